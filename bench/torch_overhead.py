"""What the torch layer costs per call: 1 rank, 8 B, no network.

    .venv/bin/python bench/torch_overhead.py            # a markdown table
    .venv/bin/python bench/torch_overhead.py --bursts 41 --calls 2000

One process, a 1-rank "gocl" world and a 1-rank "gloo" group. Each row times
bursts of back-to-back calls on a float32 tensor of 2 elements and keeps the
best burst's mean (the least disturbed by other load on the machine; the
bursts of all rows are interleaved, so load hits every row alike):

* ``bare``: the ctypes call ``goclAllReduce`` alone (the floor);
* ``pg.allreduce``: the group's method called directly, synchronous (the
  gocl layer: routing, checks, the C call, and the completed Work such a
  caller gets);
* ``dist.all_reduce``: what a user calls (torch's own Python wrapper added;
  on torch >= 2.8 it takes None for a finished synchronous call, so no Work
  is made);
* ``async``: ``dist.all_reduce(async_op=True)`` until it returns its Work;
* ``async+wait``: the same and ``wait()``.

Issue 11's goals: sync overhead (``dist.all_reduce`` - ``bare``) <= 5 us, and
an asynchronous call returns its Work in <= 10 us.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bursts", type=int, default=25, help="bursts per row (best kept)")
    ap.add_argument("--calls", type=int, default=1000, help="calls per burst")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from gocl.tools.launcher import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import AllreduceOptions

    import gocl  # noqa: F401  (registers "gocl")
    from gocl import _lib

    torch.set_num_threads(1)
    dist.init_process_group("gocl")
    gloo = dist.new_group(backend="gloo")
    world = dist.group.WORLD
    t = torch.zeros(2)
    engine = world._get_backend(t.device)._engine
    c_all_reduce, handle, p = _lib.lib().goclAllReduce, engine.comm.handle, t.data_ptr()
    sync = AllreduceOptions()
    sync.asyncOp = False

    def aw(g):
        dist.all_reduce(t, group=g, async_op=True).wait()

    rows = {
        "bare goclAllReduce": lambda: c_all_reduce(p, p, 2, 7, 0, handle, None),
        "gocl pg.allreduce (sync)": lambda: world.allreduce([t], sync),
        "gocl dist.all_reduce (sync)": lambda: dist.all_reduce(t),
        "gocl dist.all_reduce(async_op=True) returns": lambda: dist.all_reduce(t, async_op=True),
        "gocl async + wait": lambda: aw(None),
        "gloo dist.all_reduce (sync)": lambda: dist.all_reduce(t, group=gloo),
        "gloo dist.all_reduce(async_op=True) returns": lambda: dist.all_reduce(t, group=gloo, async_op=True),
        "gloo async + wait": lambda: aw(gloo),
    }
    best = dict.fromkeys(rows, float("inf"))
    n = args.calls
    for _ in range(args.bursts):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n * 1e6)
            dist.barrier(group=gloo)  # async bursts: let the queue empty before the next row
            engine.executor.drain()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, torch {torch.__version__}\n")
    print("| path (1 rank, 8 B) | best us per call |\n|---|---:|")
    for name, us in best.items():
        print(f"| {name} | {us:.2f} |")
    bare = best["bare goclAllReduce"]
    print(f"\nsync overhead: dist.all_reduce - bare = {best['gocl dist.all_reduce (sync)'] - bare:.2f} us "
          f"(goal <= 5), of which the gocl layer (pg.allreduce - bare) "
          f"{best['gocl pg.allreduce (sync)'] - bare:.2f} us")
    print(f"async call returns its Work in {best['gocl dist.all_reduce(async_op=True) returns']:.2f} us (goal <= 10)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
