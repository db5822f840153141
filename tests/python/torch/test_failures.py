"""Failures surface as exceptions on every rank instead of hangs: ranks that
disagree on a call, and a rank that dies."""

from __future__ import annotations

import datetime
import os

import pytest
from torchdist_util import dist, torch  # noqa: I001


@pytest.mark.ranks(2)
def test_mismatched_calls_fail_on_every_rank():
    dist.init_process_group("gocl")
    rank = dist.get_rank()
    ok = torch.ones(3)
    dist.all_reduce(ok)
    # rank 0 sums 3 elements, rank 1 sums 4: gocl sees the mismatch in the
    # headers. The error comes from wait() (or from the call itself where
    # torch does not say the call is async, torch < 2.8, and it runs inline).
    with pytest.raises(Exception) as info:  # noqa: PT011
        dist.all_reduce(torch.ones(3 + rank), async_op=True).wait()
    msg = str(info.value)
    assert "ranks disagree" in msg and "count 3" in msg and "count 4" in msg, msg
    # the group is broken now, and says so
    with pytest.raises(Exception, match="unusable|failed|closed"):
        dist.all_reduce(torch.ones(3))
    os._exit(0)  # skip destroy/atexit: the peer may already be gone


@pytest.mark.ranks(2)
def test_dead_peer_fails_the_survivor():
    """A peer dies while DDP's buckets (asynchronous all_reduce on the
    group's stream) are in flight: backward() raises naming it, no hang;
    later calls fail too."""
    import time

    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]), bucket_cap_mb=0.25)
    x = torch.randn(4, 256)
    ddp(x).sum().backward()  # one healthy step
    if rank == 1:
        os._exit(0)  # dies without a word
    t0 = time.perf_counter()
    with pytest.raises(Exception, match="rank 1"):
        for _ in range(50):  # the first buckets may still be buffered
            ddp(x).sum().backward()
    assert time.perf_counter() - t0 < 25, "the survivor hung"
    with pytest.raises(Exception, match="rank 1"):
        dist.all_reduce(torch.ones(1 << 20))
    os._exit(0)


@pytest.mark.ranks(2)
def test_future_of_a_failed_async_call_fails():
    """The future of an asynchronous call that fails while queued is settled
    by libgocl's host function with the error, not with a result (DDP reads
    its buckets from these futures)."""
    dist.init_process_group("gocl")
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(3))
    busy = dist.all_reduce(torch.ones(1 << 22), async_op=True)  # keeps the stream busy: the next one is queued
    fut = dist.all_reduce(torch.ones(3 + rank), async_op=True).get_future()  # counts disagree
    with pytest.raises(Exception, match="ranks disagree"):
        fut.wait()
    busy.wait()
    os._exit(0)  # skip destroy/atexit: the group is broken


@pytest.mark.ranks(2)
@pytest.mark.parametrize("how", ["backend.abort", "backend.shutdown", "group.shutdown", "group.shutdown.queued"])
def test_abort_from_another_thread_unblocks_a_stuck_all_reduce(how):
    """abort() and shutdown(), on the backend or on torch's ProcessGroup,
    called while another thread is stuck in a collective (or, queued: in
    Work.wait() of an asynchronous one on the group's stream), end that call
    within 1 s (shutdown outwaits only work no other thread is stuck in)."""
    import threading
    import time

    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(3))
    if rank == 1:  # never joins the next call; leaves once rank 0 is done
        time.sleep(2.5)
        os._exit(0)
    out = {}

    def stuck():
        try:
            if how.endswith(".queued"):
                dist.all_reduce(torch.ones(1 << 16), async_op=True).wait()
            else:
                dist.all_reduce(torch.ones(1 << 16))
        except Exception as e:  # noqa: BLE001 - whatever torch wraps it in
            out["err"] = e
        out["t"] = time.monotonic()

    t = threading.Thread(target=stuck)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    start = time.monotonic()
    owner, method = how.split(".")[:2]
    target = dist.group.WORLD if owner == "group" else dist.group.WORLD._get_backend(torch.device("cpu"))
    getattr(target, method)()
    assert time.monotonic() - start < 1.0, f"{how}() itself took {time.monotonic() - start:.2f} s"
    t.join(5)
    assert not t.is_alive(), f"{how}() did not unblock the all_reduce"
    assert out["t"] - start < 1.0, f"{how}() took {out['t'] - start:.2f} s to unblock the all_reduce"
    assert "abort" in str(out.get("err")), out
    os._exit(0)  # skip destroy/atexit: the group is aborted


@pytest.mark.ranks(2)
def test_shutdown_finishes_queued_work_of_a_late_peer():
    """destroy_process_group() right after an asynchronous all_reduce nobody
    waits on: shutdown waits for it, though the peer joins the call 1.5 s
    later, instead of aborting it; both ranks get the sum."""
    import time

    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    t = torch.full((1 << 16,), float(rank + 1))
    if rank == 1:
        time.sleep(1.5)
    dist.all_reduce(t, async_op=True)
    dist.destroy_process_group()
    assert torch.equal(t, torch.full((1 << 16,), 3.0)), t[:4]


@pytest.mark.ranks(2)
def test_size_errors_name_both_sizes_and_leave_the_group_healthy():
    """The size rules (gocl._sizes, the same table as Go's comm.Elems) are
    checked before any communication: the call raises with both sizes and
    the group still works."""
    dist.init_process_group("gocl")
    with pytest.raises(Exception, match=r"all_gather_into_tensor: output has 5 torch.float32 elements, "
                                        r"expected 2 x 3 torch.float32"):
        dist.all_gather_into_tensor(torch.empty(5), torch.ones(3))
    with pytest.raises(Exception, match=r"reduce_scatter_tensor: input has 5 torch.float32 elements, "
                                        r"expected 2 x 2 torch.float32"):
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(5))
    with pytest.raises(Exception, match=r"all_to_all_single: 5 input and 5 output elements do not split evenly"):
        dist.all_to_all_single(torch.empty(5), torch.ones(5))
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [2.0, 2.0, 2.0]
    dist.destroy_process_group()
