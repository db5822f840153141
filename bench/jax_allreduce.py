"""gocl.jax.all_reduce inside jit vs JAX's own CPU collectives (gloo), side by side.

    .venv/bin/python bench/jax_allreduce.py                    # 2 processes, 8 B .. 64 MiB
    .venv/bin/python bench/jax_allreduce.py --max-bytes 1M --rounds 3 --markdown

The script starts N local processes (one CPU device each). Each calls
jax.distributed.initialize with JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo (the
baseline: jax.lax.psum under shard_map over the N processes' devices) and
gocl.jax.init (the candidate: gocl.jax.all_reduce on the process's local
array, inside jax.jit). For every size (float32, sum) it runs rounds that
alternate the two, so a change in machine load hits both alike; a round times
a burst of calls, each waited for (block_until_ready), and the reported time
is the median over rounds of rank 0's mean time per call. Results are checked
against N × the input. ratio = gloo / gocl (> 1: gocl is faster).
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
    import gocl.jax as gj

    gj.init(local_devices=1)
    mesh = jax.make_mesh((world,), ("i",))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.6.1
        from jax.experimental.shard_map import shard_map
    gloo = jax.jit(shard_map(lambda s: jax.lax.psum(s, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    gocl = jax.jit(lambda v: gj.all_reduce(v))
    dev = jax.local_devices()[0]

    for size in [s for s in SIZES if s <= args.max_bytes]:
        count = max(1, size // 4)
        local = np.full(count, rank + 1.0, np.float32)
        inputs = {"gocl": jax.device_put(local, dev),
                  "gloo": jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local)}
        fns = {"gocl": gocl, "gloo": gloo}

        def burst(name, iters):
            f, x = fns[name], inputs[name]
            t0 = time.perf_counter()
            for _ in range(iters):
                f(x).block_until_ready()
            return (time.perf_counter() - t0) / iters

        want = world * (world + 1) / 2
        ok = bool(np.all(np.asarray(gocl(inputs["gocl"])) == want))
        ok &= bool(np.all(np.asarray(gloo(inputs["gloo"]).addressable_shards[0].data) == want))
        est = max(burst("gocl", 2), burst("gloo", 2))
        # every rank must run the same number of calls: take rank 0's choice
        iters = int(np.asarray(gj.broadcast(np.int32(max(1, min(args.max_iters, int(args.burst_s / est)))))))
        times = {"gocl": [], "gloo": []}
        for r in range(args.rounds):
            for name in (("gocl", "gloo") if r % 2 == 0 else ("gloo", "gocl")):
                times[name].append(burst(name, iters))
        if rank == 0:
            print(json.dumps({"size": size, "iters": iters, "ok": ok, "gocl": statistics.median(times["gocl"]),
                              "gloo": statistics.median(times["gloo"])}), flush=True)
    gj.shutdown()
    jax.distributed.shutdown()


# ---------------------------------------------------------------- launcher
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per size (median taken)")
    p.add_argument("--burst-s", type=float, default=0.05, help="target seconds per timed burst")
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    from gocl.launcher import free_port, rank_env

    n, port, jport = args.ranks, free_port(), free_port()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--max-bytes", str(args.max_bytes),
           "--rounds", str(args.rounds), "--burst-s", str(args.burst_s), "--max-iters", str(args.max_iters)]
    procs = [subprocess.Popen(cmd, env={**rank_env(r, n, "127.0.0.1", port), "BENCH_JAX_PORT": str(jport)},
                              stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True) for r in range(n)]
    rows = []
    for line in procs[0].stdout:
        if line.startswith("{"):
            row = json.loads(line)
            rows.append(row)
            print(f"  {human(row['size']):>8}: gloo {row['gloo'] * 1e6:10.1f} us  gocl {row['gocl'] * 1e6:10.1f} us"
                  f"  ratio {row['gloo'] / row['gocl']:5.2f}", file=sys.stderr, flush=True)
        elif line.strip():
            print(line.rstrip(), file=sys.stderr)
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a rank failed (exit codes {codes})")
    head = ["size", "gloo psum us", "gocl.jax us", "gloo/gocl"]
    body = [[human(r["size"]), f"{r['gloo'] * 1e6:.1f}", f"{r['gocl'] * 1e6:.1f}",
             f"{r['gloo'] / r['gocl']:.2f}" + ("" if r["ok"] else " (WRONG RESULT)")] for r in rows]
    if args.markdown:
        print("\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
                        + ["| " + " | ".join(r) + " |" for r in body]))
    else:
        w = [max(len(x) for x in col) for col in zip(head, *body)]
        print("\n".join("  ".join(f"{c:>{k}}" for c, k in zip(r, w)) for r in [head] + body))


if __name__ == "__main__":
    main()
