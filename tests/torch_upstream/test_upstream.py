"""torch's own distributed test suite (``DistributedTest._DistTestBase``, the
suite torch runs for gloo, NCCL and MPI) run on the "gocl" backend, 2 ranks.

The suite reads ``BACKEND`` when it is imported and gates tests on that name
(decorators evaluated at import). Two ways to run it:

* ``GOCL_UPSTREAM_BACKEND=gocl`` (default): imported as gocl, with gocl
  declared for the feature sets it supports (``DistTestCases``).
* ``GOCL_UPSTREAM_GATES=gloo``: imported under the gloo name, so the
  gloo-only tests are collected too, and every rank still runs gocl
  (``_run`` below). Tests that compare the backend's name with "gloo" fail
  in this mode for that reason alone; known.txt lists them.
* ``GOCL_UPSTREAM_BACKEND=gloo``: torch's own gloo, the reference.

Tests listed in ``known.txt`` (with the reason) are skipped;
``GOCL_UPSTREAM_RUN_KNOWN=1`` runs them anyway to check the list.
``make test-torch-upstream`` runs everything; ``--upstream-short`` (see
conftest.py) the subset ``make test`` runs.
"""

from __future__ import annotations

import os
import sys
import unittest
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN_BACKEND = os.environ.setdefault("GOCL_UPSTREAM_BACKEND", "gocl")
GATES = os.environ.setdefault("GOCL_UPSTREAM_GATES", RUN_BACKEND)
if RUN_BACKEND not in ("gocl", "gloo") or GATES not in ("gocl", "gloo"):
    raise ValueError(f"GOCL_UPSTREAM_BACKEND={RUN_BACKEND!r} / GOCL_UPSTREAM_GATES={GATES!r}: "
                     "use gocl or gloo")
# Read by the suite at import, here and in every spawned rank (they inherit
# the environment).
os.environ["BACKEND"] = GATES
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", "/tmp")  # replaced per test by the suite's setUp

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if RUN_BACKEND == "gocl" or GATES == "gocl":
    import gocl.torch_backend  # noqa: E402

    gocl.torch_backend.register()

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if GATES == "gocl":
    # What gocl implements, in the suite's vocabulary. Not "gpu"/"cuda": gocl
    # stages CUDA tensors through host memory and the suite's GPU tests
    # assume a device-native backend (they need one GPU per rank anyway).
    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("gocl")

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


def read_known(path: Path = HERE / "known.txt") -> dict[str, str]:
    """known.txt: ``test_name  mode  reason`` lines; mode says where the
    test fails or is skipped: gocl (imported as gocl), gloo-gates, or both.
    Returns {test_name: reason} for the current mode."""
    mode = "gloo-gates" if GATES == "gloo" else "gocl"
    known = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) != 3 or parts[1] not in ("gocl", "gloo-gates", "both"):
            raise ValueError(f"{path}:{n}: expected 'test_name gocl|gloo-gates|both reason', got {line!r}")
        name, where, reason = parts
        if where in (mode, "both"):
            known[name] = reason
    return known


# Ranks start from a fork server that has imported torch and this suite
# once, instead of spawning fresh interpreters (torch's own driver does that:
# about 8 s of imports per test on a small machine). Fork is safe here: the
# server never loads libgocl.so (the backend loads it when a group is made).
_CTX = torch.multiprocessing.get_context("forkserver")
if __name__ != "__mp_main__":
    _CTX.set_forkserver_preload([__name__])

# The suite's setUp makes a fresh TEMP_DIR (and INIT_METHOD) per test in the
# parent's environment; a forked rank has the fork server's environment, so
# each rank carries the parent's current values.
_PER_TEST_ENV = ("TEMP_DIR", "INIT_METHOD")


class _Rank(_CTX.Process):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._env = {k: os.environ[k] for k in _PER_TEST_ENV if k in os.environ}

    def run(self):
        os.environ.update(self._env)
        super().run()


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(_Rank)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        if RUN_BACKEND == GATES:
            return super()._run(rank, test_name, file_name, pipe, **kwargs)
        # Imported under the gloo name: run the rank on gocl instead (the
        # steps of TestDistBackend._run with the backend swapped).
        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        seconds = distributed_test.CUSTOM_PG_TIMEOUT.get(test_name, distributed_test.default_pg_timeout)
        dist.init_process_group(init_method=self.init_method, backend=RUN_BACKEND,
                                world_size=int(self.world_size), rank=rank,
                                timeout=timedelta(seconds=seconds))
        self._barrier()
        self.run_test(test_name, pipe)
        self._barrier()
        dist.destroy_process_group()
        sys.exit(0)


if RUN_BACKEND == "gocl" and os.environ.get("GOCL_UPSTREAM_RUN_KNOWN") != "1":
    for _name, _reason in read_known().items():
        _fn = getattr(TestDistBackendWithSpawn, _name, None)
        if _fn is None:
            raise ValueError(f"known.txt names {_name!r}, which torch {torch.__version__}'s suite lacks")
        setattr(TestDistBackendWithSpawn, _name, unittest.skip(f"known.txt: {_reason}")(_fn))
