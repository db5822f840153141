"""One rank of tests/python/test_multihost.py (run inside a host's namespace).

    multihost_rank.py collectives   # checked collectives over numpy, then "OK <rank>"
    multihost_rank.py every         # every collective and send/recv, checked, at sizes on both sides of the tuner's switches
    multihost_rank.py cut           # all_reduce in a loop ("READY" after the first) until one fails
    multihost_rank.py torch         # the same checks through torch.distributed's "gocl" backend
"""

from __future__ import annotations

import sys
import time

import numpy as np


def collectives() -> None:
    import gocl

    with gocl.Communicator.from_env() as comm:
        r, n = comm.rank, comm.world_size
        for count in (1, 1023, 300_001):  # 300,001 floats: above the striping threshold
            for dt in (np.float32, np.int64, np.float64):
                x = np.arange(count, dtype=dt) + r
                comm.all_reduce(x)
                want = np.arange(count, dtype=dt) * n + n * (n - 1) // 2
                assert np.array_equal(x, want), (count, dt)
        g = comm.all_gather(np.full(5, r, np.int32))
        assert np.array_equal(g, np.repeat(np.arange(n, dtype=np.int32)[:, None], 5, axis=1))
        b = np.full(7, r, np.float32)
        comm.broadcast(b, root=n - 1)
        assert (b == n - 1).all()
        m = comm.all_reduce(np.array([r], np.float32), op="max")
        assert m[0] == n - 1
        hier_matrix(comm)
        comm.barrier()
        print(f"OK {r}", flush=True)


def hier_matrix(comm) -> None:
    """all_reduce of every dtype and op against numpy, in and out of place, at
    sizes the ranks per host do not divide, above the one-shot's threshold:
    the hierarchical all-reduce on hosts with 2 ranks each."""
    r, n = comm.rank, comm.world_size
    dtypes = (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64)
    for count in (10_001, 100_003):
        for dt in dtypes:
            inputs = [((np.arange(count) * 7 + q) % 5 + 1).astype(dt) for q in range(n)]
            for op in ("sum", "prod", "max", "min", "avg"):
                if op == "avg" and np.dtype(dt).kind != "f":
                    continue
                ref = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum, "avg": np.add}[op]
                want = inputs[0].copy()
                for q in range(1, n):
                    want = ref(want, inputs[q]).astype(dt)
                if op == "avg":
                    want = (want.astype(np.float64) / n).astype(dt)
                for in_place in (True, False):
                    x = inputs[r].copy()
                    got = comm.all_reduce(x, op=op) if in_place else comm.all_reduce(x, op=op, out=np.empty_like(x))
                    assert np.array_equal(got, want), (count, np.dtype(dt).name, op, in_place, got[:8], want[:8])


def every() -> None:
    """Every collective of the numpy API and a send/recv ring, float32 and
    int64, against numpy, at counts from 1 element to past the tuner's
    switches from direct to ring/tree/hierarchical (1 MiB and more)."""
    import gocl

    with gocl.Communicator.from_env() as comm:
        r, n = comm.rank, comm.world_size
        for count in (1, 3001, 65_537, 400_003):
            for dt in (np.float32, np.int64):
                base = [(np.arange(count) * 3 + 7 * q) % 11 for q in range(n)]
                mine = base[r].astype(dt)
                total = sum(base).astype(dt)
                for op, ref in (("sum", total), ("max", np.maximum.reduce(base).astype(dt))):
                    got = comm.all_reduce(mine.copy(), op=op)
                    assert np.array_equal(got, ref), ("all_reduce", op, count, dt)
                got = comm.reduce(mine.copy(), root=n - 1)
                if r == n - 1:
                    assert np.array_equal(got, total), ("reduce", count, dt)
                b = mine.copy()
                comm.broadcast(b, root=n // 2)
                assert np.array_equal(b, base[n // 2].astype(dt)), ("broadcast", count, dt)
                g = comm.all_gather(mine)
                assert np.array_equal(g, np.stack(base).astype(dt)), ("all_gather", count, dt)
                blocks = np.stack([(np.arange(count) + 5 * r + i) % 13 for i in range(n)]).astype(dt)
                rs = comm.reduce_scatter(blocks.copy())  # rank q's blocks: (arange + 5q + i) % 13, block i
                want = sum(((np.arange(count) + 5 * q + r) % 13) for q in range(n)).astype(dt)
                assert np.array_equal(rs, want), ("reduce_scatter", count, dt)
                a2a = comm.all_to_all(np.stack([np.full(count, 100 * r + j) for j in range(n)]).astype(dt))
                assert np.array_equal(a2a, np.stack([np.full(count, 100 * i + r) for i in range(n)]).astype(dt)), \
                    ("all_to_all", count, dt)
                recv = np.empty(count, dt)
                with gocl.group():
                    comm.send(mine, (r + 1) % n)
                    comm.recv(recv, (r - 1) % n)
                assert np.array_equal(recv, base[(r - 1) % n].astype(dt)), ("send/recv", count, dt)
        comm.barrier()
        print(f"OK {r}", flush=True)


def cut() -> None:
    import gocl

    comm = gocl.Communicator.from_env()
    x = np.ones(1 << 20, np.float32)
    try:
        comm.all_reduce(x)
        print("READY", flush=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            comm.all_reduce(x)
        print("NO ERROR after 120 s", flush=True)
        sys.exit(2)
    except gocl.GoclError as e:
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        comm.abort()
        sys.exit(3)


def torch_ranks() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gocl")
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.arange(100_003, dtype=torch.float32) + r
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(100_003, dtype=torch.float32) * n + n * (n - 1) // 2)
    out = [torch.zeros(3, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(out, torch.full((3,), r, dtype=torch.int64))
    assert [int(o[0]) for o in out] == list(range(n))
    dist.barrier()
    dist.destroy_process_group()
    print(f"OK {r}", flush=True)


if __name__ == "__main__":
    {"collectives": collectives, "every": every, "cut": cut, "torch": torch_ranks}[sys.argv[1]]()
