"""gocl.jax.all_reduce inside jit vs JAX's own CPU collectives (gloo), side by side.

    .venv/bin/python bench/jax_allreduce.py                    # 2 processes, 8 B .. 64 MiB
    .venv/bin/python bench/jax_allreduce.py --max-bytes 1M --rounds 3 --markdown
    .venv/bin/python bench/jax_allreduce.py --lock /work/helpers/bench.lock --min-bytes 1M

The script starts N local processes (one CPU device each). Each calls
jax.distributed.initialize with JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo (the
baseline: jax.lax.psum under shard_map over the N processes' devices) and
gocl.jax.init (the candidate: gocl.jax.all_reduce on the process's local
array, inside jax.jit); the anchor is gocl's numpy API (Communicator.all_reduce
into a preallocated array, no JAX), the same transport without XLA. For every
size (float32, sum) it runs rounds that alternate the three, so a change in
machine load hits all alike; a round times a burst of calls, each waited for
(block_until_ready), and the reported time is the median over rounds of rank
0's mean time per call. Results are checked against N × the input.
ratio = gloo / gocl.jax (> 1: gocl.jax is faster).

Start-up and compilation (every size is compiled and run once first) take
long on a loaded machine and are not timed: with --lock FILE, rank 0 takes an
flock on FILE only for the timed rounds, as `flock FILE cmd` would.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _units import human, parse_bytes  # bench/ is on sys.path: these run as scripts

SIZES = [8 * 8**k for k in range(8)] + [64 << 20]  # 8 B, 64 B ... 16 MiB, 64 MiB
NAMES = ("gocl", "gloo", "numpy")


# ---------------------------------------------------------------- one rank
def worker(args) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    os.environ["JAX_NUM_CPU_DEVICES"] = "1"
    import numpy as np

    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    jax.distributed.initialize(f"127.0.0.1:{os.environ['BENCH_JAX_PORT']}", num_processes=world, process_id=rank)
    import gocl
    import gocl.jax as gj

    gj.init(local_devices=1)
    comm = gocl.Communicator.from_env()
    mesh = jax.make_mesh((world,), ("i",))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.6.1
        from jax.experimental.shard_map import shard_map
    gloo = jax.jit(shard_map(lambda s: jax.lax.psum(s, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    gocl_fn = jax.jit(lambda v: gj.all_reduce(v))
    dev = jax.local_devices()[0]
    want = world * (world + 1) / 2

    # Inputs, compilation and a checked first call for every size, untimed.
    cases = {}
    for size in [s for s in SIZES if args.min_bytes <= s <= args.max_bytes]:
        local = np.full(max(1, size // 4), rank + 1.0, np.float32)
        out = np.empty_like(local)
        x_gocl = jax.device_put(local, dev)
        x_gloo = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local)
        fns = {"gocl": lambda x=x_gocl: gocl_fn(x).block_until_ready(),
               "gloo": lambda x=x_gloo: gloo(x).block_until_ready(),
               "numpy": lambda x=local, o=out: comm.all_reduce(x, out=o)}
        ok = bool(np.all(np.asarray(gocl_fn(x_gocl)) == want))
        ok &= bool(np.all(np.asarray(gloo(x_gloo).addressable_shards[0].data) == want))
        fns["numpy"]()
        ok &= bool(np.all(out == want))
        cases[size] = (fns, ok)

    lock = None
    if args.lock and rank == 0:
        import fcntl

        lock = open(args.lock, "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
    comm.barrier()  # the other ranks wait here for rank 0's lock
    for size, (fns, ok) in cases.items():

        def burst(name, iters):
            f = fns[name]
            t0 = time.perf_counter()
            for _ in range(iters):
                f()
            return (time.perf_counter() - t0) / iters

        est = max(burst(name, 2) for name in NAMES)
        # every rank must run the same number of calls: take rank 0's choice
        iters = np.array([max(1, min(args.max_iters, int(args.burst_s / est)))], np.int32)
        comm.broadcast(iters, root=0)
        times = {name: [] for name in NAMES}
        for r in range(args.rounds):
            for name in NAMES[r % 3:] + NAMES[:r % 3]:
                times[name].append(burst(name, int(iters[0])))
        if rank == 0:
            print(json.dumps({"size": size, "iters": int(iters[0]), "ok": ok,
                              **{name: statistics.median(t) for name, t in times.items()},
                              "spread": {name: [min(t), max(t)] for name, t in times.items()}}), flush=True)
    if lock is not None:
        lock.close()
    comm.destroy()
    gj.shutdown()
    jax.distributed.shutdown()


# ---------------------------------------------------------------- launcher
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=parse_bytes, default=0, help="smallest size (default 8 B)")
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per size (median taken)")
    p.add_argument("--burst-s", type=float, default=0.05, help="target seconds per timed burst")
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--lock", help="flock this file (rank 0) for the timed rounds only")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    from gocl.launcher import free_port, rank_env

    n, port, jport = args.ranks, free_port(), free_port()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--min-bytes", str(args.min_bytes),
           "--max-bytes", str(args.max_bytes), "--rounds", str(args.rounds), "--burst-s", str(args.burst_s),
           "--max-iters", str(args.max_iters)] + (["--lock", args.lock] if args.lock else [])
    procs = [subprocess.Popen(cmd, env={**rank_env(r, n, "127.0.0.1", port), "BENCH_JAX_PORT": str(jport)},
                              stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True) for r in range(n)]
    rows = []
    for line in procs[0].stdout:
        if line.startswith("{"):
            row = json.loads(line)
            rows.append(row)
            lo, hi = row["spread"]["gocl"]
            print(f"  {human(row['size']):>8}: gloo {row['gloo'] * 1e6:10.1f} us  gocl.jax {row['gocl'] * 1e6:10.1f} us"
                  f" ({lo * 1e6:.0f}-{hi * 1e6:.0f})  numpy {row['numpy'] * 1e6:10.1f} us"
                  f"  ratio {row['gloo'] / row['gocl']:5.2f}", file=sys.stderr, flush=True)
        elif line.strip():
            print(line.rstrip(), file=sys.stderr)
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a rank failed (exit codes {codes})")
    # The rounds' spread of each column shows an outlier round (one slow
    # stretch of a loaded machine) next to a median it did not move.
    def spread(r, name):
        lo, hi = r["spread"][name]
        return f"{lo * 1e6:.0f}-{hi * 1e6:.0f}"

    head = ["size", "gloo psum us", "gocl.jax us", "gocl numpy us", "gloo/gocl.jax", "gloo range", "gocl.jax range"]
    body = [[human(r["size"]), f"{r['gloo'] * 1e6:.1f}", f"{r['gocl'] * 1e6:.1f}", f"{r['numpy'] * 1e6:.1f}",
             f"{r['gloo'] / r['gocl']:.2f}" + ("" if r["ok"] else " (WRONG RESULT)"), spread(r, "gloo"),
             spread(r, "gocl")] for r in rows]
    if args.markdown:
        print("\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
                        + ["| " + " | ".join(r) + " |" for r in body]))
    else:
        w = [max(len(x) for x in col) for col in zip(head, *body)]
        print("\n".join("  ".join(f"{c:>{k}}" for c, k in zip(r, w)) for r in [head] + body))


if __name__ == "__main__":
    main()
