"""gocl.torchft.ProcessGroupGocl, the process group torchft's Manager
reconfigures at every quorum: collectives (also reduce_scatter and
alltoall_base, which torchft's gloo groups refuse), configure again with a new
store prefix and world size, abort from another thread, errored().

torchft is an optional extra: `make test-torchft` installs it and runs this
file and bench/torchft_recovery.py's short run; without torchft these tests
are skipped (all but the one checking the ImportError's message)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

HAVE_TORCHFT = importlib.util.find_spec("torchft") is not None

needs_torchft = pytest.mark.skipif(not HAVE_TORCHFT, reason="torchft is not installed (make test-torchft installs "
                                   "the gocl[torchft] extra and runs these tests)")


def test_import_without_torchft_says_what_to_install():
    code = "import sys; sys.modules['torchft'] = None\ntry:\n import gocl.torchft\nexcept ImportError as e:\n print(e)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'pip install "gocl[torchft]"' in r.stdout, r.stdout


def _store(rank: int):
    """Rank 0 hosts the job's TCPStore (torchft's Manager uses the replica
    group's store the same way), every rank gets its address."""
    from torch.distributed import TCPStore

    port = int(os.environ["MASTER_PORT"])
    store = TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False, timeout=timedelta(seconds=30))
    return store, f"127.0.0.1:{port}"


def _check_collectives(pg, rank: int, n: int) -> None:
    import torch
    from torch.distributed import ReduceOp
    from torch.distributed.distributed_c10d import (
        AllgatherOptions,
        AllreduceOptions,
        AllToAllOptions,
        BarrierOptions,
        BroadcastOptions,
        ReduceScatterOptions,
    )

    def sum_opts():
        o = AllreduceOptions()
        o.reduceOp = ReduceOp.SUM
        return o

    # allreduce, both as Manager uses it (the future's value) and waited on
    x = torch.full((1000,), float(rank + 1))
    fut = pg.allreduce([x], sum_opts()).get_future()
    fut.wait()
    assert bool((x == n * (n + 1) / 2).all()), x[:4]
    x = torch.arange(7, dtype=torch.float64) * (rank + 1)
    pg.allreduce([x], sum_opts()).wait()
    assert torch.equal(x, torch.arange(7, dtype=torch.float64) * n * (n + 1) / 2)

    # allgather
    out = [[torch.empty(3, dtype=torch.int64) for _ in range(n)]]
    pg.allgather(out, [torch.full((3,), rank, dtype=torch.int64)], AllgatherOptions()).wait()
    assert [t.tolist() for t in out[0]] == [[r] * 3 for r in range(n)]

    # broadcast from the last rank
    b = torch.full((5,), float(rank))
    o = BroadcastOptions()
    o.rootRank = n - 1
    pg.broadcast([b], o).wait()
    assert b.tolist() == [float(n - 1)] * 5

    # reduce_scatter: rank r gets the sum over ranks of their r-th input
    out = torch.empty(4)
    ins = [[torch.full((4,), float(10 * rank + r)) for r in range(n)]]
    o = ReduceScatterOptions()
    o.reduceOp = ReduceOp.SUM
    pg.reduce_scatter([out], ins, o).wait()
    assert out.tolist() == [float(sum(10 * s + rank for s in range(n)))] * 4

    # alltoall_base, even and uneven splits
    inp = torch.tensor([100 * rank + d for d in range(n)], dtype=torch.float32)
    out = torch.empty(n)
    pg.alltoall_base(out, inp, [], [], AllToAllOptions()).wait()
    assert out.tolist() == [float(100 * s + rank) for s in range(n)]
    # rank r sends r+1 elements of value 100*r+d to rank d
    send = [d + 1 for d in range(n)]
    recv = [rank + 1] * n
    inp = torch.cat([torch.full((send[d],), float(100 * rank + d)) for d in range(n)])
    out = torch.empty(sum(recv))
    pg.alltoall_base(out, inp, recv, send, AllToAllOptions()).wait()
    want = torch.cat([torch.full((rank + 1,), float(100 * s + rank)) for s in range(n)])
    assert torch.equal(out, want)

    pg.barrier(BarrierOptions()).wait()
    assert pg.size() == n
    assert pg.errored() is None


@needs_torchft
@pytest.mark.ranks(3, timeout=180)
def test_configure_collectives_reconfigure_abort():
    import torch
    from torch.distributed import ReduceOp
    from torch.distributed.distributed_c10d import AllreduceOptions

    from gocl.torchft import ProcessGroupGocl

    rank = int(os.environ["RANK"])
    store, addr = _store(rank)
    pg = ProcessGroupGocl(timeout=timedelta(seconds=20))
    assert pg.getBackendName() == "torchft-gocl" and pg.errored() is None

    # quorum 1: the 3 ranks
    pg.configure(f"{addr}/torchft/1/0", "replica", rank, 3, quorum_id=1, group_rank=0, group_world_size=1,
                 global_ranks=[0, 1, 2])
    _check_collectives(pg, rank, 3)

    # quorum 2: rank 2 is gone; the others make a group of 2 under a new prefix.
    # Rank 2 is alone (a quorum of one, as torchft makes for a lone replica).
    if rank < 2:
        pg.configure(f"{addr}/torchft/2/0", "replica", rank, 2, quorum_id=2)
        _check_collectives(pg, rank, 2)
    else:
        pg.configure(f"{addr}/torchft/2/alone", "replica", 0, 1, quorum_id=2)
        _check_collectives(pg, 0, 1)
        pg.shutdown()
        store.set("rank2/done", b"1")
        return

    # abort from another thread ends a collective stuck on a peer that never comes
    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.SUM
    if rank == 0:
        raised = {}

        def stuck():
            work = pg.allreduce([torch.ones(1 << 12)], opts)
            raised["ok"] = work.wait()  # False when the call failed (torchft's Manager reads the future)
            raised["at"] = time.monotonic()
            try:
                work.get_future().wait()
                raised["err"] = None
            except Exception as exc:  # noqa: BLE001
                raised["err"] = exc

        t = threading.Thread(target=stuck)
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), raised  # rank 1 is waiting in the store, not in the collective
        aborted_at = time.monotonic()
        pg.abort()
        t.join(5)
        assert not t.is_alive()
        assert raised["ok"] is False and raised["err"] is not None, raised
        assert raised["at"] - aborted_at < 1.0, raised["at"] - aborted_at
        err = pg.errored()
        assert err is not None and "abort" in str(err), err
        with pytest.raises(RuntimeError, match="not configured"):
            pg.allreduce([torch.ones(1)], opts)
        store.set("rank0/aborted", b"1")
    else:
        store.wait(["rank0/aborted"], timedelta(seconds=30))
        # the peer aborted: this rank's next call fails (wait() returns False,
        # the future has the error) naming it, and errored() says so
        work = pg.allreduce([torch.ones(1 << 12)], opts)
        assert work.wait() is False
        with pytest.raises(Exception, match="rank 0"):
            work.get_future().wait()
        err = pg.errored()
        assert err is not None and "rank 0" in str(err), err

    # and the next quorum works again, in the same processes
    pg.configure(f"{addr}/torchft/3/0", "replica", rank, 2, quorum_id=3)
    assert pg.errored() is None
    x = torch.full((100,), float(rank + 1))
    pg.allreduce([x], opts).wait()
    assert bool((x == 3).all())
    pg.shutdown()
    if rank == 0:  # the store's host leaves last
        store.wait(["rank2/done"], timedelta(seconds=30))
        store.set("rank1/bye", b"")
        store.wait(["rank1/done"], timedelta(seconds=30))
    else:
        store.wait(["rank1/bye"], timedelta(seconds=30))
        store.set("rank1/done", b"1")
