"""The repository's map stays inside the repository, every Go package
says what it is (``go doc ./<package>``), and ``make help`` names every
target."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_stay_in_the_repository(doc):
    links = re.findall(r"\]\(([^)\s]+)\)", doc.read_text())
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue  # a web address or an anchor
        target = (doc.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(REPO), f"{doc.name} links {link}, outside the repository"
        assert target.exists(), f"{doc.name} links {link}, which does not exist"


def test_every_go_package_has_a_doc_comment():
    go = shutil.which("go")
    if go is None:
        pytest.skip("no go command on PATH")
    out = subprocess.run([go, "list", "-f", "{{.ImportPath}}\t{{.Doc}}", "./..."], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("\t", 1) for line in out.splitlines()]
    assert len(rows) > 10
    undocumented = [path for path, doc in rows if not doc.strip()]
    assert not undocumented, f"Go packages without a package comment (add a doc.go): {undocumented}"


def test_make_help_names_every_target():
    """Every .PHONY target of the Makefile appears in `make help` (issue 44:
    `make help` lists every target)."""
    if not shutil.which("make"):
        pytest.skip("no make")
    makefile = (REPO / "Makefile").read_text()
    targets = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    words = set(re.findall(r"[a-z0-9][a-z0-9-]*", out))
    missing = [t for t in targets if t not in words]
    assert not missing, f"make help does not name: {missing}"


def test_the_readme_folder_table_matches_the_tree():
    """Every tracked folder at the top, and each of runtime/, tests/ and cmd/
    one level down, is named in the README's "What is here" table, and every
    folder the table names exists."""
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## What is here"):]
    table = table[:table.index("\n## ", 1)]
    named = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            first = row.split(" | ")[0]
            named |= {t.rstrip("/") for t in re.findall(r"`([^`]+)`", first)}
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {f.split("/")[0] for f in files if "/" in f}
    folders |= {"/".join(f.split("/")[:2]) for f in files if f.count("/") >= 2 and f.split("/")[0] in ("runtime", "tests", "cmd")}
    folders -= {"runtime", "tests", "cmd"}  # named through their parts
    missing = sorted(d for d in folders if not any(n == d or n.startswith(d + "/") for n in named))
    assert not missing, f"README's folder table does not name {missing}"
    gone = sorted(n for n in named if "." not in n.split("/")[-1] and not (REPO / n).is_dir())
    assert not gone, f"README's folder table names folders that do not exist: {gone}"


def test_the_docs_build_as_a_site():
    """`make docs` builds the site: mkdocs --strict fails on a page the nav
    names that is missing, or an API name mkdocstrings cannot resolve; the
    API page carries the numpy and JAX front ends from their docstrings."""
    if not shutil.which("make"):
        pytest.skip("no make")
    r = subprocess.run(["make", "-s", "docs"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    site = REPO / "build" / "site"
    api = (site / "api" / "index.html").read_text()
    for name in ("Communicator", "all_reduce", "reduce_scatter", "initialize", "GoclTimeoutError"):
        assert name in api, f"the API page has no {name}"
    home = (site / "index.html").read_text()
    assert "The two commands" in home
