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


@pytest.mark.ranks(2)
@pytest.mark.parametrize("backend", ["gloo", "gocl"])
def test_tags_in_swapped_order_are_never_swapped(backend):
    """Rank 0 sends tag 7 then tag 3; rank 1 posts irecv(tag=3) then
    irecv(tag=7). gloo matches by tag; gocl delivers in the order sent, so
    each receive fails naming both tags: never the other tag's data."""
    with group(backend=backend) as (rank, world):
        if rank == 0:
            ws = [dist.isend(torch.full((4,), 7.0), 1, tag=7), dist.isend(torch.full((4,), 3.0), 1, tag=3)]
            for w in ws:
                w.wait()
        else:
            a, b = torch.zeros(4), torch.zeros(4)
            wa, wb = dist.irecv(a, 0, tag=3), dist.irecv(b, 0, tag=7)
            if backend == "gloo":
                wa.wait()
                wb.wait()
                assert a.tolist() == [3.0] * 4 and b.tolist() == [7.0] * 4
            else:
                for w, want, got in ((wa, 3, 7), (wb, 7, 3)):
                    with pytest.raises(RuntimeError) as info:
                        w.wait()
                    msg = str(info.value)
                    assert f"sent with tag {got}" in msg and f"tag={want}" in msg and "rank 1" in msg, msg
                    assert "in the order" in msg, msg
                assert a.tolist() == [0.0] * 4 and b.tolist() == [0.0] * 4  # nothing delivered
        # the pair (and the group) stay usable
        x = torch.full((2,), float(rank + 1))
        dist.all_reduce(x)
        assert x.tolist() == [3.0, 3.0]


@pytest.mark.ranks(2)
@pytest.mark.parametrize("backend", ["gloo", "gocl"])
def test_tags_in_order_and_tag_zero(backend):
    """Tags posted in the order sent (nonzero, mixed with 0, batched) arrive
    as on gloo; a receive from any source takes a tag too."""
    with group(backend=backend) as (rank, world):
        tags = [0, 3, 7, 0, 2, 123456]
        if rank == 0:
            ws = [dist.isend(torch.full((5,), float(i)), 1, tag=t) for i, t in enumerate(tags)]
            dist.send(torch.arange(3, dtype=torch.int32), 1, tag=9)
            for w in ws:
                w.wait()
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), 11.0), 1, tag=4),
                                           dist.P2POp(dist.isend, torch.full((2,), 12.0), 1, tag=0)])
            for r in reqs:
                r.wait()
        else:
            outs = [torch.zeros(5) for _ in tags]
            ws = [dist.irecv(o, 0, tag=t) for o, t in zip(outs, tags)]
            for w in ws:
                w.wait()
            assert [o.tolist() for o in outs] == [[float(i)] * 5 for i in range(len(tags))]
            y = torch.zeros(3, dtype=torch.int32)
            assert dist.recv(y, tag=9) == 0  # any source
            assert y.tolist() == [0, 1, 2]
            p, q = torch.zeros(2), torch.zeros(2)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, p, 0, tag=4),
                                           dist.P2POp(dist.irecv, q, 0, tag=0)])
            for r in reqs:
                r.wait()
            assert p.tolist() == [11.0, 11.0] and q.tolist() == [12.0, 12.0]


@pytest.mark.ranks(2, timeout=90)
@pytest.mark.parametrize("backend", ["gloo", "gocl"])
@pytest.mark.parametrize("recv_first", [True, False], ids=["recv_first", "recv_after"])
def test_unwaited_isend_then_collective_on_another_group(backend, recv_first):
    """Pipeline parallel: rank 0 isends to rank 1 (not waited) on the world
    group, then both all_reduce on a new_group; rank 1 receives before
    (recv_first) or after the all_reduce. Completes at once, as on gloo (a
    short GOCL_TIMEOUT makes a regression fail rather than hang long)."""
    os.environ["GOCL_TIMEOUT"] = "5"
    with group(timeout_s=5, backend=backend) as (rank, world):
        sub = dist.new_group([0, 1])
        dist.barrier(group=sub)  # sub is connected: the time below is the pattern's
        t0 = time.monotonic()
        y = torch.zeros(4)
        if rank == 0:
            w = dist.isend(torch.full((4,), 7.0), 1)
        elif recv_first:
            dist.recv(y, 0)
        x = torch.full((3,), float(rank + 1))
        dist.all_reduce(x, group=sub)
        assert x.tolist() == [3.0] * 3
        if rank == 0:
            w.wait()
        else:
            if not recv_first:
                dist.recv(y, 0)
            assert y.tolist() == [7.0] * 4
        took = time.monotonic() - t0
        assert took < 3, f"{backend}: took {took:.1f} s"


def test_another_groups_call_releases_held_p2p(monkeypatch):
    """The executors alone (gocl calls stubbed out): an isend held back by
    one group goes out before a call on another group, and before another
    group's own held-back tasks are waited for."""
    from gocl.torch_backend import _work

    ran = []
    monkeypatch.setattr(_work, "run_tasks", lambda tasks, stream: ran.append([t.name for t in tasks]))
    a, b = _work.Executor("a:0"), _work.Executor("b:0")
    try:
        a.submit(_work.Task("send", None, p2p=True), async_op=True)
        b.submit(_work.Task("allreduce", None), async_op=True).wait()
        assert ran == [["send"], ["allreduce"]]
        a.submit(_work.Task("send2", None, p2p=True), async_op=True)
        b.submit(_work.Task("recv", None, p2p=True), async_op=True).wait()
        assert ran[2:] == [["send2"], ["recv"]]
    finally:
        a.close()
        b.close()
