"""torch.distributed all_reduce over "gloo" and over "gocl", side by side.

    .venv/bin/python bench/torch_allreduce.py                   # 2 and 4 local ranks
    .venv/bin/python bench/torch_allreduce.py -n 4 --max-bytes 1M --markdown

For each rank count the script starts that many local ranks (spawned
processes, torchrun's environment). Each rank makes one default "gocl" group
and one "gloo" group over the same ranks, then for every size (8 B, x4 ...,
32 MiB, then 64 MiB; float32, SUM) runs rounds that alternate the backends,
so a change in machine load hits both alike. A round times a burst of
back-to-back all_reduce calls after a barrier; the reported time is the
median over rounds of rank 0's mean time per call. ratio = gloo / gocl
(> 1: gocl is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _torchbench import init_groups, launch  # bench/ is on sys.path: these run as scripts
from _units import human, parse_bytes

SIZES = [8 * 4**k for k in range(12)] + [64 << 20]  # 8 B ... 32 MiB, 64 MiB


# ---------------------------------------------------------------- one rank
def worker(args) -> None:
    import torch
    import torch.distributed as dist

    rank, world, groups = init_groups()
    ctrl = groups["gloo"]

    def burst(name, t, iters):
        g = groups[name]
        dist.barrier(group=g)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, group=g)
        return (time.perf_counter() - t0) / iters

    for size in [s for s in SIZES if s <= args.max_bytes]:
        count = max(1, size // 4)
        t = torch.ones(count, dtype=torch.float32)
        # warm up both, and pick a burst length from the slower backend's time
        est = max(burst("gocl", t, 2), burst("gloo", t, 2))
        iters = torch.tensor([max(1, min(args.max_iters, int(args.burst_s / max(est, 1e-7))))])
        dist.broadcast(iters, src=0, group=ctrl)
        iters = int(iters.item())
        rounds = args.rounds if size < (8 << 20) else max(3, args.rounds // 2)
        times = {"gocl": [], "gloo": []}
        for r in range(rounds):
            order = ("gocl", "gloo") if r % 2 == 0 else ("gloo", "gocl")
            for name in order:
                times[name].append(burst(name, t, iters))
        # correctness: the last burst summed `ones` many times; check a fresh one
        chk = torch.full((count,), float(rank + 1))
        dist.all_reduce(chk)
        ok = bool((chk == world * (world + 1) / 2).all())
        if rank == 0:
            print(json.dumps({"size": size, "count": count, "iters": iters, "rounds": rounds, "ok": ok,
                              "gocl": statistics.median(times["gocl"]), "gloo": statistics.median(times["gloo"])}),
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------- launcher
def run(n: int, args) -> list[dict]:
    rows = []
    for row in launch(os.path.abspath(__file__), n, ["--max-bytes", str(args.max_bytes), "--rounds", str(args.rounds),
                                                      "--burst-s", str(args.burst_s), "--max-iters", str(args.max_iters)]):
        rows.append(row)
        print(f"  {n} ranks {human(row['size']):>8}: gloo {row['gloo'] * 1e6:10.1f} us  gocl "
              f"{row['gocl'] * 1e6:10.1f} us  ratio {row['gloo'] / row['gocl']:5.2f}", file=sys.stderr, flush=True)
    return rows


def table(results: dict[int, list[dict]], markdown: bool) -> str:
    ns = sorted(results)
    sizes = [r["size"] for r in results[ns[0]]]
    head = ["size"] + [f"{c} ({n} ranks)" for n in ns for c in ("gloo us", "gocl us", "gloo/gocl")]
    rows = []
    for i, s in enumerate(sizes):
        row = [human(s)]
        for n in ns:
            r = results[n][i]
            row += [f"{r['gloo'] * 1e6:.1f}", f"{r['gocl'] * 1e6:.1f}",
                    f"{r['gloo'] / r['gocl']:.2f}" + ("" if r["ok"] else " (WRONG RESULT)")]
        rows.append(row)
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*r) for r in rows])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, action="append", help="rank counts (default: 2 and 4)")
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per size (median taken)")
    p.add_argument("--burst-s", type=float, default=0.05, help="target seconds per timed burst")
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    results = {}
    for n in args.ranks or [2, 4]:
        results[n] = run(n, args)
    print(table(results, args.markdown))


if __name__ == "__main__":
    main()
