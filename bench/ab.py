"""Two builds of gocl side by side, for changes that must not change
behaviour (a refactor): gocl-perf of a build of another commit (``--before
DIR``) and of this tree (``--after DIR``, default build/), alternated, every
collective, 2 and 4 ranks (one process each), results checked.

    git worktree add /tmp/base <commit> && make -C /tmp/base build/gocl-perf
    make build/gocl-perf
    flock /tmp/gocl-cpu.lock .venv/bin/python bench/ab.py --before /tmp/base/build [--rounds 5] [--markdown FILE]

Each round runs both builds once per (collective, ranks), in an order that
alternates from round to round, so that load on the machine hits them
alike. A run's time per size is the mean of gocl-perf's out-of-place and
in-place times (alltoall: out-of-place only); the table gives each build's median over rounds and the
median of the per-round ratios after/before (1.00: unchanged; above: the
new build is slower). Any wrong result fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from _units import human  # bench/ is on sys.path: this runs as a script

COLLS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall")


def run(build: str, coll: str, ranks: int, a: argparse.Namespace, tmp: str) -> dict[int, float]:
    """Time per call (us) by size of one gocl-perf sweep."""
    out = os.path.join(tmp, "perf.json")
    cmd = [os.path.join(build, "gocl-perf"), coll, "-P", str(ranks), "-b", a.b, "-e", a.e, "-f", str(a.f),
           "-n", str(a.n), "-w", str(a.w), "-c", "1", f"--json={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    with open(out) as f:
        rows = json.load(f)["rows"]
    times = {}
    for row in rows:
        ways = [w for w in (row["out_of_place"], row["in_place"]) if w]  # alltoall has no in-place way
        if any(w["wrong"] for w in ways):
            raise SystemExit(f"{build}: {coll} on {ranks} ranks gave wrong results at {row['size']} B")
        times[row["size"]] = statistics.mean(w["time_us"] for w in ways)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="folder with the other build's gocl-perf (and its libgocl.so)")
    p.add_argument("--after", default="build", help="folder with this tree's gocl-perf (build)")
    p.add_argument("--colls", default=",".join(COLLS))
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="16M")
    p.add_argument("-f", type=int, default=16)
    p.add_argument("-n", type=int, default=200)
    p.add_argument("-w", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--markdown", help="also write the tables to this file")
    p.add_argument("--note", default="", help="a paragraph for the markdown file")
    a = p.parse_args()
    builds = {"before": a.before, "after": a.after}
    times: dict[tuple[str, int, str], list[dict[int, float]]] = {}
    load0 = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
            for coll in a.colls.split(","):
                for n in map(int, a.ranks.split(",")):
                    for which in order:
                        times.setdefault((coll, n, which), []).append(run(builds[which], coll, n, a, tmp))
            print(f"round {rnd + 1}/{a.rounds} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    load1 = os.getloadavg()
    lines = [f"Load average before {[round(x, 2) for x in load0]}, after {[round(x, 2) for x in load1]} on "
             f"{os.cpu_count()} CPUs; {a.rounds} alternated rounds, -n {a.n} -w {a.w}, one process per rank.", ""]
    worst = []
    for coll in a.colls.split(","):
        for n in map(int, a.ranks.split(",")):
            before, after = times[(coll, n, "before")], times[(coll, n, "after")]
            lines += [f"### {coll}, {n} ranks", "", "| size | before µs | after µs | after/before |", "|---:|---:|---:|---:|"]
            for size in sorted(before[0]):
                b = statistics.median(r[size] for r in before)
                af = statistics.median(r[size] for r in after)
                ratio = statistics.median(y[size] / x[size] for x, y in zip(before, after))
                worst.append((ratio, coll, n, size))
                lines.append(f"| {human(size)} | {b:.2f} | {af:.2f} | {ratio:.2f} |")
            lines.append("")
    ratios = sorted(r for r, *_ in worst)
    lo, hi = min(worst), max(worst)
    lines.append(f"Median of all {len(ratios)} ratios: {statistics.median(ratios):.3f}; lowest {lo[0]:.2f} "
                 f"({lo[1]}, {lo[2]} ranks, {human(lo[3])}), highest {hi[0]:.2f} ({hi[1]}, {hi[2]} ranks, "
                 f"{human(hi[3])}).")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        head = ["# Two builds side by side (`bench/ab.py`)", "",
                f"Written by `bench/ab.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
                f"before = `{a.before}`, after = `{a.after}`. Machine: {os.cpu_count()} CPUs, "
                f"{platform.platform()}.", ""]
        if a.note:
            head += [a.note, ""]
        with open(a.markdown, "w") as f:
            f.write("\n".join(head) + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
