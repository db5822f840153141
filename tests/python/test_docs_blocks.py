"""The code blocks of the README and docs/ do not rot (issue 44): the
self-contained ones run (the numpy example on 2 ranks, the pytest example
under the plugin), the C example compiles against gocl.h, every Python block
compiles and every gocl name it uses exists, and every `gocl ...`, `make ...`
and `python -m gocl...` command of the shell blocks is one that exists.
Blocks for other machines (Slurm, Ray, several hosts) are checked for their
names, not run."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def blocks(lang: str) -> list[tuple[str, str]]:
    """(where, body) of every ```lang block of the docs."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            if m.group(1) == lang:
                line = text.count("\n", 0, m.start()) + 1
                out.append((f"{doc.name}:{line}", m.group(2)))
    return out


PY = blocks("python")
SH = blocks("sh")


def test_the_docs_have_blocks():
    assert len(PY) >= 5 and len(SH) >= 5 and blocks("c"), (len(PY), len(SH))


@pytest.mark.parametrize("where,body", PY, ids=[w for w, _ in PY])
def test_python_blocks_compile_and_name_what_exists(where, body):
    tree = ast.parse(body, filename=where)
    refs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gocl":
            refs.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            refs.update(a.name for a in node.names if a.name.split(".")[0] == "gocl")
        elif isinstance(node, ast.Attribute):
            parts = []
            n = node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id == "gocl":
                refs.add(".".join(["gocl", *reversed(parts)]))
    missing, skipped = [], []
    for ref in sorted(refs):
        try:
            found = _resolve(ref)
        except _NeedsPackage as e:
            skipped.append(f"{ref} (needs {e})")
            continue
        if not found:
            missing.append(ref)
    assert not missing, f"{where} names what gocl does not have: {missing}"
    if skipped and len(skipped) == len(refs):
        pytest.skip(f"{where}: every name needs a package not installed here: {skipped}")


class _NeedsPackage(Exception):
    """A gocl module that imports a package this Python lacks (Ray)."""


def _missing_package(e: ImportError) -> str | None:
    """The third-party module whose absence made e, if that is what it is."""
    while e is not None:
        if isinstance(e, ModuleNotFoundError) and e.name and e.name.split(".")[0] != "gocl":
            return e.name
        e = e.__cause__ or e.__context__
    return None


def _resolve(ref: str) -> bool:
    """Whether the dotted name ref exists: its longest importable module, then
    attributes."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError as e:
            if (pkg := _missing_package(e)) is not None:
                raise _NeedsPackage(pkg) from e
            continue  # not a module: an attribute of a shorter one
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_c_block_compiles():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (where, body), = blocks("c")
    lines = body.splitlines()
    includes = [x for x in lines if x.startswith("#include")]
    rest = [x for x in lines if not x.startswith("#include")]
    # The block's free names are a program's: its rank, world size and buffer.
    src = "\n".join(["#include <stdio.h>", *includes,
                     "void example(int nranks, int rank, float *buf, size_t count) {", *rest, "}", ""])
    r = subprocess.run([cc, "-fsyntax-only", "-Wall", "-Werror", "-I", str(REPO / "capi"), "-x", "c", "-"],
                       input=src, capture_output=True, text=True)
    assert r.returncode == 0, f"{where} does not compile against capi/gocl.h:\n{r.stderr}\n{src}"


def _gocl_commands() -> set[str]:
    from gocl.tools import cli

    p = cli.parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices) | {"doctor", "perf"}  # those two pass their options on (cli.main)


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-zA-Z0-9][\w.-]*)\s*:(?!=)", text, re.M))


@pytest.mark.parametrize("where,body", SH, ids=[w for w, _ in SH])
def test_shell_blocks_run_commands_that_exist(where, body):
    gocl_cmds, targets = _gocl_commands(), _make_targets()
    bad = []
    for raw in body.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        for i, w in enumerate(words):
            if w == "gocl" and i + 1 < len(words) and not words[i + 1].startswith("-") \
                    and words[i + 1] not in gocl_cmds:
                bad.append(f"gocl {words[i + 1]}")
            if w == "make" and i == 0:
                bad += [f"make {t}" for t in words[1:] if not t.startswith("-") and t not in targets]
            if w == "-m" and i + 1 < len(words) and words[i + 1].startswith("gocl"):
                if importlib.util.find_spec(words[i + 1]) is None:
                    bad.append(f"python -m {words[i + 1]}")
    assert not bad, f"{where} runs commands that do not exist: {bad}"


def _numpy_block() -> tuple[str, str]:
    return next((w, b) for w, b in PY if "Communicator.from_env()" in b and "import numpy" in b)


def test_the_numpy_block_runs_on_two_ranks(tmp_path):
    where, body = _numpy_block()
    script = tmp_path / "example.py"
    script.write_text(body + "\nprint('RESULT', comm.rank, x.tolist(), y.shape)\n")
    r = subprocess.run([str(BIN / "gocl"), "run", "-n", "2", str(script)], capture_output=True, text=True,
                       timeout=180, cwd=tmp_path)
    assert r.returncode == 0, f"{where} failed on 2 ranks:\n{r.stdout}\n{r.stderr}"
    # x is the sum of the ranks (0 + 1) after the in-place all_reduce, on both ranks
    assert r.stdout.count("RESULT") == 2 and "[1.0, 1.0, 1.0, 1.0] (2, 4)" in r.stdout, r.stdout


def test_the_pytest_block_runs_under_the_plugin(tmp_path):
    where, body = next((w, b) for w, b in PY if "pytest.mark.ranks" in b)
    # The block is a test module's body; its imports are the obvious ones.
    (tmp_path / "test_example.py").write_text("import numpy as np, pytest\nimport gocl\n\n" + body)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "GOCL_"))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0 and "1 passed" in r.stdout, f"{where} under pytest:\n{r.stdout}\n{r.stderr}"
