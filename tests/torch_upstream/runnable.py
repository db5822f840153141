"""Which tests of torch's distributed suite run here, without running them.

``python tests/torch_upstream/runnable.py`` prints ``test_name<TAB>verdict``
for every test of the suite as test_upstream.py sets it up (so the same
environment: ``GOCL_UPSTREAM_GATES=gloo`` reads the suite under gloo's name);
verdict is ``run`` or why the test is skipped. A skip is decided either when
the suite is imported (unittest skip decorators: backend name, world size,
known.txt) or in the ranks at run time, by decorators read here from the
test's wrapper chain: no accelerator, fewer than 8 ranks, fewer than x
accelerators. ``--run`` prints only the names that run.

``GOCL_UPSTREAM_BACKEND=gloo python tests/torch_upstream/runnable.py --run``
is how gloo.txt was made: the 90 tests gloo passes on CPU with 2 ranks.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GOCL_UPSTREAM_RUN_KNOWN", "0")

import torch  # noqa: E402
from test_upstream import TestDistBackendWithSpawn  # noqa: E402

# Decorators that skip inside the ranks (torch.testing._internal.common_distributed).
_NO_ACCELERATOR = not torch.accelerator.is_available()
_WORLD = int(os.environ["WORLD_SIZE"])


def _runtime_skip(fn) -> str | None:
    while fn is not None:
        code = getattr(fn, "__code__", None)
        head = code.co_qualname.split(".")[0] if code is not None else ""
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ()))) if code else {}
        if head == "skip_if_no_gpu" and (_NO_ACCELERATOR or torch.accelerator.device_count() < _WORLD):
            return f"runtime skip: needs {_WORLD} accelerators"
        if head == "skip_if_small_worldsize" and os.environ["BACKEND"] != "mpi" and _WORLD < 8:
            return "runtime skip: needs 8 ranks"
        if head == "skip_if_lt_x_gpu" and not (cells.get("allow_cpu") and _NO_ACCELERATOR):
            if _NO_ACCELERATOR or torch.accelerator.device_count() < cells.get("x", 0):
                return f"runtime skip: needs {cells.get('x')} accelerators"
        fn = getattr(fn, "__wrapped__", None)
    return None


def verdicts() -> dict[str, str]:
    out = {}
    for name in sorted(dir(TestDistBackendWithSpawn)):
        if not name.startswith("test_"):
            continue
        fn = getattr(TestDistBackendWithSpawn, name)
        if getattr(fn, "__unittest_skip__", False):
            out[name] = "import skip: " + " ".join(str(fn.__unittest_skip_why__).split())
        else:
            out[name] = _runtime_skip(fn) or "run"
    return out


if __name__ == "__main__":
    v = verdicts()
    for name, verdict in v.items():
        if "--run" not in sys.argv:
            print(f"{name}\t{verdict}")
        elif verdict == "run":
            print(name)
    print(f"{sum(x == 'run' for x in v.values())} of {len(v)} run (BACKEND={os.environ['BACKEND']}, "
          f"WORLD_SIZE={_WORLD})", file=sys.stderr)
