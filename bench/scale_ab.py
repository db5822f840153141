"""Two builds of libgocl.so side by side at scale, alternated in one invocation.

    .venv/bin/python bench/scale_ab.py --lib before=/tmp/old/libgocl.so --lib now=python/gocl/_native/libgocl.so \\
        --inproc 256,1024,4096 --procs 32,96,128 --rounds 3

In-process rows: bench/scale.py's `Communicator.local(N)` in a fresh interpreter per
run (init time, RSS growth). Process rows: bench/scale.py's worker under `gocl run -n N`
(init, first call, 8 B and 1 MiB medians, fds, RSS per rank, the largest over ranks).
Both connect on first use. Each run points GOCL_LIBRARY at one build; builds alternate within a round, so a
loaded host hurts both alike. Prints medians over rounds as markdown (bench/SCALE.md).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", required=True, help="NAME=PATH of a libgocl.so (two or more)")
    ap.add_argument("--inproc", default="256,1024", help="in-process rank counts (comma list; empty: none)")
    ap.add_argument("--procs", default="", help="process counts (comma list; empty: none)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    libs = dict(x.split("=", 1) for x in args.lib)
    inproc = [int(x) for x in args.inproc.split(",") if x]
    procs = [int(x) for x in args.procs.split(",") if x]
    got: dict = {}
    for rd in range(args.rounds):
        for n in inproc:
            for name, lib in libs.items():
                os.environ["GOCL_LIBRARY"] = lib
                r = scale.run_inproc(n, lazy=True)
                if "error" in r:
                    print(f"round {rd} in-process N={n} {name}: failed: {r['error']}", flush=True)
                    continue
                got.setdefault(("inproc", n, name), []).append(r)
                print(f"round {rd} in-process N={n} {name}: {r['init']:.2f} s, +{r['rss']:.0f} MiB", flush=True)
        for n in procs:
            for name, lib in libs.items():
                os.environ["GOCL_LIBRARY"] = lib
                a = scale.run_procs("gocl-lazy", n)
                if a:
                    got.setdefault(("procs", n, name), []).append(a)
                    print(f"round {rd} processes N={n} {name}: init {a['init']:.2f} s (the latest rank {a['late'] * 1e3:.0f} ms late at the start), "
                          f"first {a['first'] * 1e3:.1f} ms, fds {a['fds']}, shm {a['shm']:.1f} MiB, all {a['shm_total'] / 1024:.2f} GiB", flush=True)
    os.environ.pop("GOCL_LIBRARY", None)
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    if inproc:
        first = next(iter(libs))
        print("\n| in-process N | build | init s | RSS growth MiB | init vs " + first + " |\n|---:|---:|---:|---:|---:|")
        for n in inproc:
            base = got.get(("inproc", n, first))
            for name in libs:
                rows = got.get(("inproc", n, name))
                if rows:
                    ratio = f"{med(base, 'init') / med(rows, 'init'):.1f}x faster" if base else "-"
                    print(f"| {n} | {name} | {med(rows, 'init'):.2f} | {med(rows, 'rss'):.0f} | {ratio} |")
    if procs:
        cpus = len(os.sched_getaffinity(0))
        print("\n| N | ranks/core | build | init s | first ms | 8B us | 1MiB ms | fds | RSS MiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in procs:
            for name in libs:
                rows = got.get(("procs", n, name))
                if rows:
                    print(f"| {n} | {n / cpus:g} | {name} | {med(rows, 'init'):.2f} | {med(rows, 'first') * 1e3:.1f} | {med(rows, 'lat') * 1e6:.0f} "
                          f"| {med(rows, 'bw') * 1e3:.2f} | {med(rows, 'fds'):.0f} | {med(rows, 'rss'):.0f} |")


if __name__ == "__main__":
    main()
