"""Issue 39's torch items, each checked against gloo where gloo has an
answer: Work.wait(timeout) raises a RuntimeError, send/recv tags never
pair messages silently across tags, and an isend nobody waited on does not
hold up a collective on another group."""

from __future__ import annotations

import datetime
import os
import time

import pytest
from torchdist_util import dist, group, torch  # noqa: I001

IMPLS = ["backend", "processgroup"]


def _use(impl):
    from gocl.torch_backend import _frontends

    if impl == "backend" and not _frontends._has_py_backend():
        pytest.skip(f"torch {torch.__version__} has no Python Backend trampoline")
    os.environ["GOCL_TORCH_IMPL"] = impl


@pytest.mark.ranks(2)
@pytest.mark.parametrize("impl", IMPLS)
def test_wait_timeout_raises_gocl_timeout_error(impl):
    """A wait(timeout=...) that runs out raises GoclTimeoutError, a
    RuntimeError as gloo's is, naming the op, the rank and the timeout; the
    operation goes on and a later wait() completes it."""
    from gocl import GoclTimeoutError

    _use(impl)
    with group() as (rank, world):
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            x = torch.zeros(4)
            w = dist.irecv(x, 1)
            t0 = time.monotonic()
            try:
                with pytest.raises(RuntimeError) as info:
                    w.wait(timeout=datetime.timedelta(seconds=0.25))
            finally:
                store.set("timed_out", "1")  # rank 1 sends now
            assert time.monotonic() - t0 < 5
            assert isinstance(info.value, GoclTimeoutError), type(info.value)
            msg = str(info.value)
            assert "recv" in msg and "rank 0" in msg and "0.25 s" in msg, msg
            w.wait()
            assert x.tolist() == [5.0] * 4
        else:
            store.wait(["timed_out"], datetime.timedelta(seconds=20))
            dist.send(torch.full((4,), 5.0), 0)
