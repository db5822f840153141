"""``--upstream-short``: only the tests named in short.txt (the subset
``make test`` runs: every collective, send/recv, DDP basics).
``--upstream-gloo``: only the tests named in gloo.txt (the 90 gloo passes on
CPU with 2 ranks; runnable.py derives the list)."""

from pathlib import Path

_LISTS = {"upstream_short": "short.txt", "upstream_gloo": "gloo.txt"}


def pytest_addoption(parser):
    parser.addoption("--upstream-short", action="store_true",
                     help="run only the tests listed in tests/torch_upstream/short.txt")
    parser.addoption("--upstream-gloo", action="store_true",
                     help="run only the tests listed in tests/torch_upstream/gloo.txt (those gloo passes)")


def pytest_collection_modifyitems(config, items):
    for option, file in _LISTS.items():
        if not config.getoption(option):
            continue
        path = Path(__file__).with_name(file)
        names = {ln.split("#")[0].strip() for ln in path.read_text().splitlines()} - {""}
        keep = [it for it in items if it.name in names]
        missing = names - {it.name for it in keep}
        if missing:
            raise ValueError(f"{file} names tests the suite lacks: {sorted(missing)}")
        config.hook.pytest_deselected(items=[it for it in items if it.name not in names])
        items[:] = keep
