"""What the status endpoint and per-call metrics cost: gocl perf all_reduce
at 8 B and 1 MiB on 2 ranks (2 processes), three ways, side by side.

    flock /tmp/gocl-cpu.lock .venv/bin/python bench/metrics_overhead.py [--rounds 9] [--iters 20000]

* ``off``: ``GOCL_STATUS=0``, no metrics (the floor);
* ``status``: the default (status endpoint and its 100 ms sampler on);
* ``metrics``: the default plus ``GOCL_METRICS_FILE`` (one JSON line per call,
  written by a background goroutine to a file in a temporary folder);
* ``before`` (with ``--before DIR``): gocl perf of a build without the live
  view and metrics at all (``off`` still counts bytes and notes each call).

Each round runs every configuration once, in an order rotated from round to
round, so that load on the machine hits them alike. A run's time is the mean
of gocl perf's out-of-place and in-place time per call (each itself the mean
over ``--iters`` back-to-back calls, over both ranks); a configuration's is
the median over rounds. Prints a markdown table with ratios to ``off``, and
the records the metrics runs dropped (the writer falling behind).

Issue 29's goal: status and metrics cost <= 2% at 8 B, nothing measurable at 1 MiB.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

SIZES = (8, 1 << 20)
CONFIGS = ("off", "status", "metrics")


def run(config: str, iters: int, warmup: int, tmp: str, before: str = "") -> tuple[dict[int, float], int]:
    """gocl perf's time per call (us) by size, and the records dropped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_METRICS", "GOCL_STATUS"))}
    if config == "off":
        env["GOCL_STATUS"] = "0"
    if config == "metrics":
        env["GOCL_METRICS_FILE"] = os.path.join(tmp, "m-%p-%r.jsonl")
    out = os.path.join(tmp, "perf.json")
    perf = [os.path.join(before, "gocl-perf")] if config == "before" else [sys.executable, "-m", "gocl", "perf"]
    cmd = [*perf, "all_reduce", "-P", "2", "-b", str(SIZES[0]), "-e", str(SIZES[1]),
           "-f", str(SIZES[1] // SIZES[0]), "-n", str(iters), "-w", str(warmup), "-c", "0", f"--json={out}"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{config}: gocl perf failed:\n{r.stdout}{r.stderr}")
    with open(out) as f:
        rows = json.load(f)["rows"]
    times = {row["size"]: (row["out_of_place"]["time_us"] + row["in_place"]["time_us"]) / 2 for row in rows}
    dropped, lines = 0, 0
    for path in glob.glob(os.path.join(tmp, "m-*.jsonl")):
        with open(path) as f:
            last = {}
            for line in f:
                lines += 1
                rec = json.loads(line)
                if "gocl_metrics_dropped" in rec:
                    last[rec["header"]["rank"]] = rec["gocl_metrics_dropped"]
            dropped += sum(last.values())
        os.remove(path)
    if config == "metrics" and lines == 0:
        raise SystemExit("metrics: no metrics lines written")
    return times, dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=20000, help="timed calls per size and phase (1 MiB: capped by gocl perf)")
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--before", default="", metavar="DIR",
                    help="also run DIR/gocl-perf (python/gocl/_native of a build without the live view and metrics: "
                         "git worktree add /tmp/before COMMIT && make -C /tmp/before pylib); ratios are then to it")
    args = ap.parse_args()
    configs = (("before",) if args.before else ()) + CONFIGS
    ref = configs[0]
    tmp = tempfile.mkdtemp(prefix="gocl-metrics-overhead-")
    samples: dict[str, dict[int, list[float]]] = {c: {s: [] for s in SIZES} for c in configs}
    drops = 0
    try:
        for k in range(args.rounds):
            order = configs[k % len(configs):] + configs[:k % len(configs)]
            for c in order:
                times, d = run(c, args.iters, args.warmup, tmp, args.before)
                drops += d
                for s in SIZES:
                    samples[c][s].append(times[s])
            print(f"round {k + 1}/{args.rounds}: " + ", ".join(
                f"{c} {samples[c][8][-1]:.2f}/{samples[c][1 << 20][-1]:.0f} us" for c in configs), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {c: {s: statistics.median(samples[c][s]) for s in SIZES} for c in configs}
    # each round's ratio to the reference of the same round (the load of that moment hits both), then the median
    paired = {c: {s: statistics.median(x / y for x, y in zip(samples[c][s], samples[ref][s])) for s in SIZES}
              for c in configs}
    print(f"gocl perf all_reduce, 2 ranks (2 processes) on {os.cpu_count()} cores ({platform.machine()}), "
          f"{args.rounds} rounds, {args.iters} timed calls per size and phase (1 MiB: capped at 256 by gocl perf), "
          f"median over rounds of the time per call (mean of out-of-place and in-place); ratios to `{ref}`: "
          "the median of the rounds' own ratios\n")
    print("| configuration | 8 B (us) | ratio | 1 MiB (us) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for c in configs:
        print(f"| {c} | {med[c][8]:.3f} | {paired[c][8]:.3f} | {med[c][1 << 20]:.1f} | {paired[c][1 << 20]:.3f} |")
    print(f"\nmetrics records dropped over all metrics runs: {drops}")
    spread = {c: {s: (min(samples[c][s]), max(samples[c][s])) for s in SIZES} for c in configs}
    print("\nrange over rounds (min..max, us): " + "; ".join(
        f"{c}: 8 B {spread[c][8][0]:.3f}..{spread[c][8][1]:.3f}, 1 MiB {spread[c][1 << 20][0]:.0f}..{spread[c][1 << 20][1]:.0f}"
        for c in configs))


if __name__ == "__main__":
    main()
