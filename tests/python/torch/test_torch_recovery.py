"""A torch job that loses a rank keeps going: dist.shrink_group on gocl
(torch >= 2.10; torch 2.7.1 has no shrink_group)."""

from __future__ import annotations

import datetime
import os

import pytest
from torchdist_util import dist, torch  # noqa: I001

needs_shrink = pytest.mark.skipif(not hasattr(dist, "shrink_group"),
                                  reason=f"torch {torch.__version__} has no dist.shrink_group")


@needs_shrink
@pytest.mark.ranks(4)
def test_shrink_group_after_a_rank_exits():
    """Rank 3 exits; the survivors' next all_reduce raises naming it;
    dist.shrink_group([3]) gives them a group of 3 that all-reduces right."""
    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    assert dist.group.WORLD._get_backend(torch.device("cpu")).supports_shrinking
    dist.all_reduce(torch.ones(4))
    if rank == 3:
        os._exit(0)
    with pytest.raises(Exception, match="rank 3"):
        for _ in range(100):  # until the exit is seen
            dist.all_reduce(torch.ones(1 << 16))
    group = dist.shrink_group([3])
    assert dist.get_world_size(group) == 3 and dist.get_rank(group) == rank
    for i in range(20):
        x = torch.full((1000 + i,), float(rank + i))
        dist.all_reduce(x, group=group)
        assert bool((x == 3 + 3 * i).all()), (i, x[:3])
    dist.destroy_process_group()
    os._exit(0)  # the store's host (rank 0) may leave first


@pytest.mark.ranks(4)
def test_a_group_is_made_again_with_a_new_world_size():
    """destroy_process_group, then init_process_group again in the same
    processes with one rank fewer (as an elastic restart does)."""
    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    x = torch.ones(10)
    dist.all_reduce(x)
    assert bool((x == 4).all())
    dist.destroy_process_group()
    if rank == 3:
        os._exit(0)
    port = int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group("gocl", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}", rank=rank, world_size=3,
                            timeout=datetime.timedelta(seconds=20))
    x = torch.full((1001,), float(rank))
    dist.all_reduce(x)
    assert dist.get_world_size() == 3 and bool((x == 3).all()), x[:3]
    dist.barrier()
    dist.destroy_process_group()


@needs_shrink
@pytest.mark.ranks(4)
def test_a_stopped_rank_is_named_by_the_heartbeats_and_shrunk_away():
    """Rank 3 stops (SIGSTOP) with a 600 s group timeout: within the
    heartbeat timeout every survivor's all_reduce raises naming it as
    stopped (not exited), and dist.shrink_group([3]) works at once."""
    import signal
    import time

    os.environ["GOCL_HEARTBEAT_TIMEOUT"] = "2"
    dist.init_process_group("gocl", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    pids = [None] * 4
    dist.all_gather_object(pids, os.getpid())
    if rank == 3:
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)  # resumed by rank 0 at the end
    t0 = time.monotonic()
    with pytest.raises(Exception, match="rank 3 stalled: it stopped answering gocl's heartbeats"):
        for _ in range(1_000_000):
            dist.all_reduce(torch.ones(1 << 14))
    assert time.monotonic() - t0 < 25, "the survivors waited for the group's timeout, not the heartbeats"
    t1 = time.monotonic()
    group = dist.shrink_group([3])
    assert time.monotonic() - t1 < 25
    assert dist.get_world_size(group) == 3 and dist.get_rank(group) == rank
    for i in range(5):
        x = torch.full((1000 + i,), float(rank + i))
        dist.all_reduce(x, group=group)
        assert bool((x == 3 + 3 * i).all()), (i, x[:3])
    dist.barrier(group=group)
    if rank == 0:
        os.kill(pids[3], signal.SIGCONT)
    dist.destroy_process_group()
    os._exit(0)  # the store's host (rank 0) may leave first
