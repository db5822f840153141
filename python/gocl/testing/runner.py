"""One rank of a ``@pytest.mark.ranks`` test (see gocl.testing.plugin).

``python -m gocl.testing.runner SPEC.json``: imports the test module by path
(with pytest's assertion rewriting when it can), calls the test function with
the pickled arguments, and reports through files in the spec's results
folder: ``rank<R>.traceback`` on failure (exit 1), ``rank<R>.skip`` on
pytest.skip (exit 75). SIGUSR1 dumps every thread's stack (the plugin sends it
before killing a hung rank).
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import importlib.util
import json
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path

SKIP_CODE = 75


def _compile_rewritten(path: Path):
    """The module's code with pytest's assertion rewriting, or None."""
    try:
        from _pytest.assertion.rewrite import rewrite_asserts

        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
        rewrite_asserts(tree, source, str(path), None)
        return compile(tree, str(path), "exec", dont_inherit=True)
    except Exception:  # noqa: BLE001 - plain import is the fallback
        return None


def load_module(name: str, path: Path):
    """Import the test module under pytest's name for it."""
    if "." in name:
        try:
            importlib.import_module(name.rpartition(".")[0])
        except Exception:  # noqa: BLE001 - a namespace or importlib-mode name
            pass
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the test module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    code = _compile_rewritten(path)
    if code is None:
        spec.loader.exec_module(module)
    else:
        exec(code, module.__dict__)
    return module


def _resolve(module, attrs: list[str], is_class: bool):
    if not is_class:
        obj = module
        for a in attrs:
            obj = getattr(obj, a)
        return obj
    cls = module
    for a in attrs[:-1]:
        cls = getattr(cls, a)
    instance = cls()
    setup = getattr(instance, "setup_method", None)
    fn = getattr(instance, attrs[-1])
    if callable(setup):
        setup(fn)
    return fn


def _is_skip(e: BaseException) -> bool:
    try:
        from _pytest.outcomes import Skipped
    except ImportError:
        return False
    return isinstance(e, Skipped)


_GOCL_DIR = str(Path(__file__).resolve().parent.parent) + os.sep  # the gocl package


def _format(e: BaseException) -> str:
    """The traceback from the test's own frames down, without gocl's
    internals (GOCL_PYTEST_FULL_TRACE=1 keeps them)."""
    frames = traceback.extract_tb(e.__traceback__)
    frames = frames[1:] if frames and frames[0].filename == __file__ else frames  # this runner
    if not os.environ.get("GOCL_PYTEST_FULL_TRACE"):
        kept = [f for f in frames if not f.filename.startswith(_GOCL_DIR)]
        frames = traceback.StackSummary.from_list(kept or frames[-1:])
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(e), e)
    cause = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    if cause is not None and not isinstance(e, AssertionError):
        lines.append(f"(while handling {type(cause).__name__}: {cause})\n")
    return "".join(lines)


def main(argv: list[str]) -> int:
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = json.loads(Path(argv[1]).read_text())
    rank = int(os.environ.get("RANK", "0"))
    results = Path(spec["results"])
    for p in reversed(spec["sys_path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        module = load_module(spec["module"], Path(spec["path"]))
        fn = _resolve(module, spec["attrs"], spec["is_class"])
        kwargs = pickle.loads(Path(spec["args"]).read_bytes())
        fn(**kwargs)
    except BaseException as e:  # noqa: BLE001 - everything is reported
        if _is_skip(e):
            (results / f"rank{rank}.skip").write_text(str(e))
            return SKIP_CODE
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0
        text = _format(e)
        (results / f"rank{rank}.traceback").write_text(text)
        sys.stderr.write(f"gocl rank {rank}: {spec['nodeid']} failed:\n{text}")
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
