"""gocl.jax.all_reduce inside jit vs JAX's own CPU collectives (gloo) and mpi4jax, side by side.

    .venv/bin/python bench/jax_allreduce.py                    # 2 processes, 8 B .. 64 MiB
    .venv/bin/python bench/jax_allreduce.py --max-bytes 1M --rounds 3 --markdown
    .venv/bin/python bench/jax_allreduce.py --lock /tmp/gocl-cpu.lock --min-bytes 1M

The script starts N local processes (one CPU device each). Each calls
jax.distributed.initialize with JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo (the
baseline: jax.lax.psum under shard_map over the N processes' devices) and
gocl.jax.init (the candidate: gocl.jax.all_reduce on the process's local
array, inside jax.jit); the anchor is gocl's numpy API (Communicator.all_reduce
into a preallocated array, no JAX), the same transport without XLA. Where
mpi4jax imports and mpirun exists (`make bench-jax` installs both), the ranks
are started by mpirun instead and a fourth column times
mpi4jax.allreduce inside jax.jit over MPI.COMM_WORLD (Open MPI); else that
column is skipped with the reason. For every
size (float32, sum) it runs rounds that alternate the columns, so a change in
machine load hits all alike; a round times a burst of calls, each waited for
(block_until_ready), and the reported time is the median over rounds of rank
0's mean time per call. Results are checked against N × the input.
gloo/gocl.jax > 1: gocl.jax is faster; gocl.jax/numpy is what JAX adds to
gocl's own transport.

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

from _units import human, parse_bytes, print_table  # bench/ is on sys.path: these run as scripts

# 8 B, 64 B ... 256 KiB, then every power of two from 1 MiB to 64 MiB
SIZES = [8 * 8**k for k in range(6)] + [1 << k for k in range(20, 27)]


# ---------------------------------------------------------------- one rank
def worker(args) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    os.environ["JAX_NUM_CPU_DEVICES"] = "1"
    import numpy as np

    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    if args.mpi4jax:  # started by mpirun: ranks from Open MPI, the rest from the launcher
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        if os.environ["RANK"] != "0":
            sys.stdout = open(os.devnull, "w")
        from mpi4py import MPI
        import mpi4jax
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    names = ("gocl", "gloo", "numpy") + (("mpi4jax",) if args.mpi4jax else ())
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
    if args.mpi4jax:
        mpi_fn = jax.jit(lambda v: mpi4jax.allreduce(v, op=MPI.SUM, comm=MPI.COMM_WORLD))
    dev = jax.local_devices()[0]
    want = world * (world + 1) / 2

    # Inputs, compilation and a checked first call for every size, untimed.
    cases = {}
    for size in args.sizes or [s for s in SIZES if args.min_bytes <= s <= args.max_bytes]:
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
        if args.mpi4jax:
            fns["mpi4jax"] = lambda x=x_gocl: mpi_fn(x).block_until_ready()
            ok &= bool(np.all(np.asarray(mpi_fn(x_gocl)) == want))
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

        est = max(burst(name, 2) for name in names)
        # every rank must run the same number of calls: take rank 0's choice
        iters = np.array([max(1, min(args.max_iters, int(args.burst_s / est)))], np.int32)
        comm.broadcast(iters, root=0)
        times = {name: [] for name in names}
        for r in range(args.rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
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
def mpi4jax_missing() -> str | None:
    """Why the mpi4jax column cannot run here, or None."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("mpi4jax") is None:
        return "mpi4jax is not installed (make bench-jax installs it over Debian's Open MPI)"
    if shutil.which("mpirun") is None:
        return "mpirun is not on PATH (make mpi installs Debian's Open MPI)"
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=parse_bytes, default=0, help="smallest size (default 8 B)")
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("--sizes", type=lambda v: [parse_bytes(x) for x in v.split(",")],
                   help="these sizes instead (comma-separated, e.g. 1M,4M,16M)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per size (median taken)")
    p.add_argument("--burst-s", type=float, default=0.05, help="target seconds per timed burst")
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--lock", help="flock this file (rank 0) for the timed rounds only")
    p.add_argument("--no-mpi4jax", dest="mpi4jax", action="store_false", help="skip the mpi4jax column")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    from gocl.tools.launcher import free_port, rank_env

    if args.mpi4jax and (why := mpi4jax_missing()):
        print(f"mpi4jax column skipped: {why}", file=sys.stderr)
        args.mpi4jax = False
    n, port, jport = args.ranks, free_port(), free_port()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--min-bytes", str(args.min_bytes),
           "--max-bytes", str(args.max_bytes), "--rounds", str(args.rounds), "--burst-s", str(args.burst_s),
           "--max-iters", str(args.max_iters)] + (["--lock", args.lock] if args.lock else []) + \
        (["--sizes", ",".join(map(str, args.sizes))] if args.sizes else []) + ([] if args.mpi4jax else ["--no-mpi4jax"])
    if args.mpi4jax:
        # One mpirun for all ranks, unbound as the other columns' processes
        # would be; each worker takes its rank from Open MPI (rank 0 alone
        # writes to stdout).
        env = {**rank_env(0, n, "127.0.0.1", port), "BENCH_JAX_PORT": str(jport)}
        procs = [subprocess.Popen(["mpirun", "--allow-run-as-root", "--bind-to", "none", "-n", str(n)]
                                  + cmd, env=env, stdout=subprocess.PIPE, text=True)]
    else:
        procs = [subprocess.Popen(cmd, env={**rank_env(r, n, "127.0.0.1", port), "BENCH_JAX_PORT": str(jport)},
                                  stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True)
                 for r in range(n)]
    us = lambda r, name: f"{r[name] * 1e6:.1f}" if name in r else "-"
    rows = []
    for line in procs[0].stdout:
        if line.startswith("{"):
            row = json.loads(line)
            rows.append(row)
            lo, hi = row["spread"]["gocl"]
            print(f"  {human(row['size']):>8}: gloo {us(row, 'gloo'):>10} us  mpi4jax {us(row, 'mpi4jax'):>10} us"
                  f"  gocl.jax {us(row, 'gocl'):>10} us ({lo * 1e6:.0f}-{hi * 1e6:.0f})  numpy {us(row, 'numpy'):>10} us"
                  f"  gocl.jax/numpy {row['gocl'] / row['numpy']:5.2f}  gloo/gocl.jax {row['gloo'] / row['gocl']:5.2f}",
                  file=sys.stderr, flush=True)
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

    head = ["size", "gloo psum us", "mpi4jax us", "gocl.jax us", "gocl numpy us", "gocl.jax/numpy", "gloo/gocl.jax",
            "gocl.jax range", "numpy range"]
    body = [[human(r["size"]), us(r, "gloo"), us(r, "mpi4jax"), us(r, "gocl"), us(r, "numpy"),
             f"{r['gocl'] / r['numpy']:.2f}", f"{r['gloo'] / r['gocl']:.2f}" + ("" if r["ok"] else " (WRONG RESULT)"),
             spread(r, "gocl"), spread(r, "numpy")] for r in rows]
    print_table(head, body, args.markdown)


if __name__ == "__main__":
    main()
