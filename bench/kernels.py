#!/usr/bin/env python3
"""gocl's reduction kernels against numpy, side by side on one core.

Usage: .venv/bin/python bench/kernels.py [--rounds N] [--core C] [--matrix]

Both sides compute dst = a op b over three separate buffers (numpy:
``np.add(a, b, out=d)`` and friends; gocl: ``Reducer.Accumulate`` through the
Go benchmark ``BenchmarkKernel`` in kernels/bench_test.go, built once into
build/kernels.test). The script pins itself, and so the Go benchmark it
starts, to one core, then alternates gocl and numpy batch by batch (one
float32 size, or one dtype of the matrix), --rounds times; each cell is the
median over the rounds, gocl/numpy the median of the per-round ratios.
GB/s counts the bytes of one buffer; Gelem/s is elements per second.

Tables: float32 sum from 4 KiB to 64 MiB (about 5 s a round); with
--matrix also every dtype x op at 64 KiB (in cache: compute bound) and
1 MiB (about 30 s a round on an idle machine). numpy has no bfloat16
(unless ml_dtypes is installed) and no one-pass premulsum, shown as "-".
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "kernels.test")
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
MATRIX_SIZES = [64 << 10, 1 << 20]
DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"]
OPS = ["sum", "prod", "max", "min", "premulsum"]
NP_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
ITEMSIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
            "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2}


def np_dtype(name):
    if name == "bfloat16":
        try:
            import ml_dtypes  # noqa: PLC0415 (optional)
        except ImportError:
            return None
        return ml_dtypes.bfloat16
    return np.dtype(name)


def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def build():
    subprocess.run(["go", "test", "-c", "-o", BIN, "./kernels"], cwd=ROOT, check=True)


def run_go(regex, benchtime):
    """Seconds per call for every Kernel/<dtype>/<op>/<bytes> case matched
    (Portable/... cases are keyed with a "portable:" dtype prefix)."""
    out = subprocess.run([BIN, "-test.run=^$", f"-test.bench={regex}", f"-test.benchtime={benchtime}"],
                         cwd=os.path.join(ROOT, "kernels"), capture_output=True, text=True, check=True).stdout
    res = {}
    for m in re.finditer(r"^Benchmark(Kernel|Portable)/(\w+)/(\w+)/(\d+)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op", out, re.M):
        dt = m[2] if m[1] == "Kernel" else "portable:" + m[2]
        res[(dt, m[3], int(m[4]))] = float(m[5]) * 1e-9
    return res


def run_np(cases, seconds):
    res = {}
    rng = np.random.default_rng(1)
    for dt, op, size in cases:
        t = np_dtype(dt)
        if t is None or op not in NP_OPS:
            continue
        n = size // ITEMSIZE[dt]
        if np.dtype(t).kind in "iu":
            a = rng.integers(-20, 20, n).astype(t)
            b = rng.integers(-10, 10, n).astype(t)
        else:
            a = rng.standard_normal(n).astype(t)
            b = (rng.standard_normal(n) * 0.5).astype(t)
        d = np.empty_like(a)
        f = NP_OPS[op]
        f(a, b, out=d)
        reps, el = 1, 0.0
        while True:  # grow the batch until it fills the time slot
            t0 = time.perf_counter()
            for _ in range(reps):
                f(a, b, out=d)
            el = time.perf_counter() - t0
            if el >= seconds:
                break
            reps = max(reps * 2, int(reps * seconds / max(el, 1e-9)))
        res[(dt, op, size)] = el / reps
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--matrix", action="store_true", help="also every dtype x op at 64 KiB and 1 MiB")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.core})
    build()

    f32 = [("float32", "sum", s) for s in SIZES]
    matrix = [] if not args.matrix else [(d, o, s) for d in DTYPES for o in OPS for s in MATRIX_SIZES]
    # Batches run back to back, gocl then numpy, so that the load of a
    # shared machine hits both alike: one per float32 size, one per dtype.
    batches = [(rf"^BenchmarkKernel$/^float32$/^sum$/^{s}$", [c], 0.04) for s, c in zip(SIZES, f32)]
    sizes = "|".join(str(s) for s in MATRIX_SIZES)
    batches += [(rf"^Benchmark(Kernel|Portable)$/^{d}$/[a-z]/^({sizes})$", [c for c in matrix if c[0] == d], 0.02)
                for d in DTYPES if matrix]
    gos, nps = [], []
    for r in range(args.rounds):
        g, n = {}, {}
        for rx, cases, secs in batches:
            g.update(run_go(rx, f"{secs}s"))
            n.update(run_np(cases, secs))
        gos.append(g)
        nps.append(n)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(runs, key):
        v = [r[key] for r in runs if key in r]
        return statistics.median(v) if v else None

    isa = subprocess.run([BIN, "-test.run=^TestISA$", "-test.v"], cwd=os.path.join(ROOT, "kernels"),
                         capture_output=True, text=True).stdout
    isa = (re.search(r"ISA: (\S+)", isa) or [None, "?"])[1]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"# gocl kernels ({isa}) vs numpy {np.__version__}, one core ({cpu}), median of {args.rounds} alternating rounds\n")
    print("float32 sum, dst = a + b (three buffers), GB/s of one buffer:\n")
    print("| size | gocl GB/s | numpy GB/s | gocl/numpy |\n|---|---|---|---|")
    for key in f32:
        g, n = med(gos, key), med(nps, key)
        ratio = statistics.median(b[key] / a[key] for a, b in zip(gos, nps))  # per round: paired in time
        print(f"| {size_name(key[2])} | {key[2] / g / 1e9:.1f} | {key[2] / n / 1e9:.1f} | {ratio:.2f} |")
    for size in MATRIX_SIZES if matrix else []:
        print(f"\nEvery dtype x op at {size_name(size)}, Gelem/s: gocl / gocl's portable loops / numpy"
              " (avg runs as sum):\n")
        print("| dtype | " + " | ".join(OPS) + " |\n|---|" + "---|" * len(OPS))
        for d in DTYPES:
            cells = []
            for o in OPS:
                key = (d, o, size)
                g, p, n = med(gos, key), med(gos, ("portable:" + d, o, size)), med(nps, key)
                el = size / ITEMSIZE[d]
                cell = " / ".join(f"{el / v / 1e9:.2f}" if v else "-" for v in (g, p, n))
                cells.append(cell)
            print(f"| {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
