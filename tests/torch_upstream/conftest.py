"""``--upstream-short``: only the tests named in short.txt (the subset
``make test`` runs: every collective, send/recv, DDP basics)."""

from pathlib import Path


def pytest_addoption(parser):
    parser.addoption("--upstream-short", action="store_true",
                     help="run only the tests listed in tests/torch_upstream/short.txt")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--upstream-short"):
        return
    path = Path(__file__).with_name("short.txt")
    names = {ln.split("#")[0].strip() for ln in path.read_text().splitlines()} - {""}
    keep = [it for it in items if it.name in names]
    missing = names - {it.name for it in keep}
    if missing:
        raise ValueError(f"short.txt names tests the suite lacks: {sorted(missing)}")
    config.hook.pytest_deselected(items=[it for it in items if it.name not in names])
    items[:] = keep
