#!/usr/bin/env python3
"""gocl against OpenMPI, allreduce side by side, checked against issue 10's goals.

    python3 bench/compare.py [--ranks 2,4] [--rounds 3] [-b 8] [-e 64M] [-f 2] [-n 1000] [--out-dir bench]
    make bench [BENCH_ARGS="--ranks 2,4,8 --rounds 5"]

For every rank count the two benchmarks alternate, round after round (gocl
then MPI, MPI then gocl, ...), and within a round segment by segment of the
sweep (up to 1 KiB, up to 128 KiB, the rest), so the sizes compared ran
seconds apart and the drifts of a shared machine hit both alike (on the
benchmark VM a bare cross-core round trip swings between ~50 and ~500 ns
every few seconds to minutes as the host moves its vCPUs; a whole sweep
takes 5 s or more): gocl is build/gocl-perf all_reduce -P N (N processes, gocl's default
transports), MPI is build/mpi-perf all_reduce under mpirun -np N (C
MPI_Allreduce; OpenMPI on one host uses shared memory). Both are built from
cmd/gocl-perf/perf_common.h, so sizes, iterations, data, checks (-c 1) and timing are
the same. Per size it prints the median out-of-place time of each, MPI/gocl
(above 1: gocl is faster) and the busbw of each, then the goals:

  2 ranks: 8 B within 2x MPI's time; busbw >= 1.2x MPI's at every size >= 64 KiB;
           64 MiB busbw >= 6 GB/s
  4 ranks: >= 1.0x MPI at every size
  8 ranks: the sweep finishes; 8 B under 1 ms
  1 rank:  the C API adds < 0.1 µs per call over the Go-level call (an 8-byte
           allreduce: Go's BenchmarkCallOneRank against gocl-perf -g 1, alternated, the fastest round of each;
           beside it the C API's cheapest call, build/capi-floor, the Go runtime's share of that overhead)

and writes OUT/RESULTS.md (the tables and the verdicts), OUT/results.json
(the medians as gocl-perf runs: `gocl perf --plot x.png OUT/results.json`
draws them) and, with matplotlib, OUT/busbw.png. When mpicc or mpirun is
missing it installs Debian's openmpi-bin and libopenmpi-dev (root; apt-get).
Only the standard library is needed. Sizes take K, M, G suffixes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _units import human  # bench/ is on sys.path: this runs as a script

REPO = Path(__file__).resolve().parent.parent
GOCL = REPO / "build" / "gocl-perf"
MPI = REPO / "build" / "mpi-perf"
FLOOR = REPO / "build" / "capi-floor"
KIB, MIB = 1 << 10, 1 << 20


def size_arg(s: str) -> int:
    units = {"K": KIB, "M": MIB, "G": 1 << 30}
    mult = units.get(s[-1:].upper(), 1)
    try:
        return int(s[:-1] if mult > 1 else s) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a size such as 8, 64K or 64M") from None


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def ensure_mpi() -> None:
    if shutil.which("mpicc") and shutil.which("mpirun"):
        return
    print("compare: OpenMPI is missing: installing Debian's openmpi-bin and libopenmpi-dev", flush=True)
    if os.geteuid() != 0:
        sys.exit("compare: run as root, or install them first: sudo apt-get install openmpi-bin libopenmpi-dev")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "openmpi-bin", "libopenmpi-dev"]):
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            sys.exit(f"compare: {' '.join(cmd)} failed (exit {r.returncode})")


def build() -> None:
    r = subprocess.run(["make", "-s", "-C", str(REPO), "build/gocl-perf", "build/mpi-perf", "build/capi-floor"])
    if r.returncode != 0:
        sys.exit("compare: building build/gocl-perf, build/mpi-perf and build/capi-floor failed")


def run_one(lib: str, n: int, sweep: list[str], out: Path, timeout: float) -> dict:
    """One sweep of one library; its gocl-perf JSON."""
    if lib == "gocl":
        cmd = [str(GOCL), "all_reduce", "-P", str(n), *sweep, "-T", str(int(timeout))]
    else:
        # Unbound, like gocl's processes; more ranks than cores need --oversubscribe.
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        cmd = ["mpirun", *root, "--oversubscribe", "--bind-to", "none", "-np", str(n), str(MPI), "all_reduce", *sweep]
    try:
        r = sh([*cmd, f"--json={out}"], timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        sys.exit(f"compare: {lib} on {n} ranks did not finish within {timeout:.0f} s: {' '.join(cmd)}")
    if r.returncode != 0 or not out.exists():
        sys.exit(f"compare: {lib} on {n} ranks failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    run = json.loads(out.read_text())
    if run["out_of_bounds"]:
        sys.exit(f"compare: {lib} on {n} ranks computed wrong values:\n{r.stdout}")
    return run


# The sweep is run in segments ending at these sizes (and the last size).
SEGMENT_ENDS = (1 * KIB, 128 * KIB)


def segments(b: int, e: int, f: int) -> list[tuple[int, int]]:
    """The sweep b..e (factor f) as (first, last) size pairs, split after SEGMENT_ENDS."""
    sizes = [b]
    while f >= 2 and sizes[-1] * f <= e:
        sizes.append(sizes[-1] * f)
    out: list[list[int]] = [[]]
    for size in sizes:
        out[-1].append(size)
        if any(size <= end < size * f for end in SEGMENT_ENDS):  # the next size is past an end
            out.append([])
    return [(g[0], g[-1]) for g in out if g]


def merge(parts: list[dict]) -> dict:
    """One sweep from its segments' gocl-perf JSONs."""
    return {**parts[0], "maxbytes": parts[-1]["maxbytes"], "rows": [r for p in parts for r in p["rows"]],
            "out_of_bounds": sum(p["out_of_bounds"] for p in parts)}


def median_run(runs: list[dict], label: str) -> dict:
    """The runs' rows with the median time per size and phase (bandwidths from it)."""
    first = runs[0]
    factor = first["busbw_factor"]
    rows = []
    for i, row in enumerate(first["rows"]):
        out = {"size": row["size"], "count": row["count"]}
        for phase in ("out_of_place", "in_place"):
            times = [r["rows"][i][phase]["time_us"] for r in runs if r["rows"][i].get(phase)]
            if not times:
                out[phase] = None
                continue
            t = statistics.median(times)
            algbw = row["size"] / t / 1e3
            out[phase] = {"time_us": t, "algbw": algbw, "busbw": algbw * factor, "wrong": 0,
                          "times_us": sorted(times)}
        rows.append(out)
    keep = ("tool", "schema", "library", "collective", "nranks", "nprocs", "ranks_per_proc", "type", "redop",
            "root", "minbytes", "maxbytes", "stepfactor", "iters", "warmup_iters", "check", "average", "busbw_factor")
    return {**{k: first[k] for k in keep}, "label": label, "rounds": len(runs), "rows": rows, "out_of_bounds": 0}


def goals(n: int, gocl: dict, mpi: dict | None) -> list[tuple[str, str, str]]:
    """(goal, measured, PASS/FAIL/not measured) for n ranks."""
    g = {r["size"]: r["out_of_place"] for r in gocl["rows"]}
    m = {r["size"]: r["out_of_place"] for r in mpi["rows"]} if mpi else {}
    smallest = min(g)
    out = []

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    if n == 2:
        if smallest in m:
            ratio = g[smallest]["time_us"] / m[smallest]["time_us"]
            out.append((f"{human(smallest)}: gocl time within 2x MPI's",
                        f"{g[smallest]['time_us']:.2f} us vs {m[smallest]['time_us']:.2f} us ({ratio:.2f}x)",
                        verdict(ratio <= 2)))
        big = [s for s in sorted(g) if s >= 64 * KIB and s in m]
        if big:
            worst = min(big, key=lambda s: g[s]["busbw"] / m[s]["busbw"])
            r = g[worst]["busbw"] / m[worst]["busbw"]
            out.append(("busbw >= 1.2x MPI at every size >= 64 KiB",
                        f"lowest {r:.2f}x at {human(worst)}", verdict(r >= 1.2)))
        else:
            out.append(("busbw >= 1.2x MPI at every size >= 64 KiB", "no size >= 64 KiB measured", "not measured"))
        if 64 * MIB in g:
            bw = g[64 * MIB]["busbw"]
            out.append(("64 MiB busbw >= 6 GB/s", f"{bw:.2f} GB/s", verdict(bw >= 6)))
        else:
            out.append(("64 MiB busbw >= 6 GB/s", "64 MiB not measured", "not measured"))
    elif n == 4:
        both = [s for s in sorted(g) if s in m]
        worst = min(both, key=lambda s: m[s]["time_us"] / g[s]["time_us"])
        r = m[worst]["time_us"] / g[worst]["time_us"]
        out.append((">= 1.0x MPI at every size", f"lowest {r:.2f}x at {human(worst)}", verdict(r >= 1.0)))
    elif n == 8:
        out.append(("the sweep finishes", f"{len(g)} sizes, {human(smallest)} to {human(max(g))}", "PASS"))
        if smallest == 8:
            t = g[8]["time_us"]
            out.append(("8 B under 1 ms", f"{t:.2f} us", verdict(t < 1000)))
        else:
            out.append(("8 B under 1 ms", "8 B not measured (-b)", "not measured"))
    return out


def capi_overhead(rounds: int, tmp: Path) -> tuple[float, float, float] | None:
    """ns per 8-byte allreduce on one rank: the Go-level call (runtime/comm's
    BenchmarkCallOneRank) and the same call through the C API (gocl-perf
    -g 1), alternated, the fastest round of each: a fixed cost per call,
    and on the benchmark VM the whole machine's speed swings by 1.6x from
    one second to the next (both sides alike: 43-79 ns and 120-220 ns), so
    noise only adds. Third, the C API's cheapest call (capi-floor:
    goclGetVersion, into Go and back), the part of the overhead that is
    the Go runtime's cgo crossing. None without a Go toolchain."""
    go = os.environ.get("GO") or shutil.which("go")
    test = tmp / "comm.test"
    if not go or sh([go, "test", "-c", "-o", str(test), "./runtime/comm"], cwd=REPO).returncode != 0:
        print("compare: no Go toolchain to build runtime/comm's benchmark: the C API's overhead is not measured")
        return None
    go_ns, c_ns, floor_ns = [], [], []
    for rnd in range(rounds):
        r = sh([str(FLOOR)], timeout=300)
        if r.returncode != 0:
            sys.exit(f"compare: capi-floor failed:\n{r.stdout}{r.stderr}")
        floor_ns.append(float(r.stdout))
        r = sh([str(test), "-test.run", "XXX", "-test.bench", "CallOneRank$", "-test.benchtime", "2000000x"],
               cwd=REPO / "runtime" / "comm", timeout=300)
        m = re.search(r"BenchmarkCallOneRank\S*\s+\d+\s+([\d.]+) ns/op", r.stdout)
        if not m:
            sys.exit(f"compare: BenchmarkCallOneRank failed:\n{r.stdout}{r.stderr}")
        go_ns.append(float(m.group(1)))
        out = tmp / f"capi.{rnd}.json"
        run_one_rank = sh([str(GOCL), "all_reduce", "-g", "1", "-b", "8", "-e", "8", "-n", "200000", "-w", "2000",
                           f"--json={out}"], timeout=300)
        if run_one_rank.returncode != 0:
            sys.exit(f"compare: gocl-perf -g 1 failed:\n{run_one_rank.stdout}{run_one_rank.stderr}")
        c_ns.append(json.loads(out.read_text())["rows"][0]["out_of_place"]["time_us"] * 1e3)
    return min(go_ns), min(c_ns), min(floor_ns)


def table(gocl: dict, mpi: dict | None) -> list[str]:
    lines = ["| size | gocl µs | MPI µs | MPI/gocl | gocl busbw GB/s | MPI busbw GB/s |", "|---:|---:|---:|---:|---:|---:|"]
    m = {r["size"]: r["out_of_place"] for r in mpi["rows"]} if mpi else {}
    for row in gocl["rows"]:
        g = row["out_of_place"]
        mm = m.get(row["size"])
        ratio = f"{mm['time_us'] / g['time_us']:.2f}" if mm else "–"
        lines.append(f"| {human(row['size'])} | {g['time_us']:.2f} | {mm['time_us']:.2f} | {ratio} | "
                     f"{g['busbw']:.3f} | {mm['busbw']:.3f} |" if mm else
                     f"| {human(row['size'])} | {g['time_us']:.2f} | – | – | {g['busbw']:.3f} | – |")
    return lines


def machine() -> dict:
    def first_line(cmd: list[str]) -> str:
        try:
            r = sh(cmd, timeout=30)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    cpu = "?"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = "?"
    try:
        kb = int(next(ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal")))
        mem = f"{kb / (1 << 20):.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory": mem, "kernel": platform.release(),
            "mpi": first_line(["mpirun", "--version"]), "go": first_line(["go", "version"]),
            "commit": first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4; the goals cover 2, 4, 8)")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds per rank count; medians over them (3)")
    p.add_argument("-b", type=size_arg, default=8, help="smallest size (8)")
    p.add_argument("-e", type=size_arg, default=64 * MIB, help="largest size (64M)")
    p.add_argument("-f", type=int, default=2, help="size step factor (2)")
    p.add_argument("-d", default="float", help="data type (float)")
    p.add_argument("-n", type=int, default=1000,
                   help="iterations per size (1000; gocl-perf and mpi-perf cap each timed loop at 256 MiB moved "
                        "per rank, so large sizes run fewer): at a few µs per call, nccl-tests' usual 20 let one "
                        "descheduling of a rank sharing a core decide a row")
    p.add_argument("-w", type=int, default=200, help="warm-up iterations per size (200; capped alike)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one sweep may take (900)")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench", help="where RESULTS.md, results.json go (bench/)")
    p.add_argument("--note", default="", help="a paragraph for RESULTS.md (e.g. what else ran on the machine)")
    a = p.parse_args()
    try:
        ranks = [int(x) for x in a.ranks.split(",")]
    except ValueError:
        p.error(f"--ranks {a.ranks!r}: give rank counts such as 2,4,8")
    if a.rounds < 1 or any(n < 2 for n in ranks):
        p.error("--rounds must be >= 1 and every rank count >= 2")
    if a.f < 2:
        p.error(f"-f {a.f}: the size step factor must be 2 or more")

    ensure_mpi()
    build()
    common = ["-f", str(a.f), "-d", a.d, "-c", "1", "-n", str(a.n), "-w", str(a.w)]
    parts = segments(a.b, a.e, a.f)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="gocl-bench-") as tmp:
        for n in ranks:
            got: dict[str, list[dict]] = {"gocl": [], "MPI": []}
            for rnd in range(a.rounds):
                print(f"compare: {n} ranks, round {rnd + 1}/{a.rounds}", flush=True)
                seg: dict[str, list[dict]] = {"gocl": [], "MPI": []}
                for k, (lo, hi) in enumerate(parts):
                    for lib in (("gocl", "MPI") if (rnd + k) % 2 == 0 else ("MPI", "gocl")):
                        sweep = ["-b", str(lo), "-e", str(hi), *common]
                        seg[lib].append(run_one(lib, n, sweep, Path(tmp) / f"{lib}.{n}.{rnd}.{k}.json", a.timeout))
                for lib, runs in seg.items():
                    got[lib].append(merge(runs))
            med = {lib: median_run(runs, f"{lib}, {n} ranks (median of {len(runs)})") for lib, runs in got.items()}
            results.append((n, med["gocl"], med["MPI"]))
        capi_rounds = max(a.rounds, 7)
        capi = capi_overhead(capi_rounds, Path(tmp))

    info = machine()
    # Other work on the machine slows both libraries, MPI's busy polling most:
    # the load average says how much there was.
    info["loadavg_before"] = [round(x, 2) for x in load_before]
    info["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    md = ["# gocl vs OpenMPI: allreduce, side by side", "",
          f"Written by `bench/compare.py` (`make bench`) on {started:%Y-%m-%d %H:%M} UTC, commit {info['commit']}.",
          f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory']}, Linux {info['kernel']}; "
          f"{info['mpi']}; {info['go']}.", "",
          f"{a.d} sum, out-of-place, {human(a.b)} to {human(a.e)} (factor {a.f}), results checked (-c 1), "
          f"-n {a.n} -w {a.w} (each timed loop capped at 256 MiB per rank). "
          f"gocl: `build/gocl-perf all_reduce -P N` (N processes, default transports); MPI: "
          f"`mpirun --oversubscribe --bind-to none -np N build/mpi-perf all_reduce` (C `MPI_Allreduce`). "
          f"Alternated {a.rounds} round(s) per rank count, and within a round segment by segment of the sweep "
          f"({', '.join(f'{human(lo)}-{human(hi)}' for lo, hi in parts)}), so compared sizes ran seconds apart; "
          "every number is the median over the rounds. "
          "MPI/gocl above 1 means gocl is faster. busbw is nccl-tests' (2(n-1)/n x size/time).", "",
          f"Load average (1, 5, 15 min) before the run {info['loadavg_before']}, after {info['loadavg_after']} "
          f"on {info['cpus']} CPUs: above the CPU count, other programs shared the cores and the times are noisy.", ""]
    if a.note:
        md += [a.note, ""]
    verdicts = []
    for n, g, m in results:
        md += [f"## {n} ranks", "", *table(g, m), ""]
        verdicts += [(n, *v) for v in goals(n, g, m)]
        print(f"\n{n} ranks: median of {a.rounds}\n{'size':>10} {'gocl us':>12} {'MPI us':>12} {'MPI/gocl':>9}")
        mrows = {r["size"]: r["out_of_place"] for r in m["rows"]}
        for row in g["rows"]:
            gt, mt = row["out_of_place"]["time_us"], mrows[row["size"]]["time_us"]
            print(f"{human(row['size']):>10} {gt:>12.2f} {mt:>12.2f} {mt / gt:>9.2f}")
    goal = "the C API adds < 0.1 µs per call over the Go-level call (8 B allreduce)"
    if capi:
        go_ns, c_ns, floor_ns = capi
        verdicts.append((1, goal, f"Go {go_ns:.0f} ns, C API {c_ns:.0f} ns (fastest of {capi_rounds} rounds each): "
                         f"+{c_ns - go_ns:.0f} ns, of which crossing into Go and back takes {floor_ns:.0f} ns "
                         "(goclGetVersion, build/capi-floor)", "PASS" if c_ns - go_ns < 100 else "FAIL"))
    else:
        verdicts.append((1, goal, "no Go toolchain", "not measured"))
    md += ["## Goals (issue 10)", "", "| ranks | goal | measured | verdict |", "|---:|---|---|---|"]
    md += [f"| {n} | {goal} | {got} | {v} |" for n, goal, got, v in verdicts]
    md += ["", "Goals for rank counts not run here are not measured: `make bench BENCH_ARGS=\"--ranks 2,4,8\"`."]
    print("\ngoals:")
    for n, goal, got, v in verdicts:
        print(f"  {n} ranks: {goal}: {got}: {v}")

    a.out_dir.mkdir(parents=True, exist_ok=True)
    runs = [r for _, g, m in results for r in (g, m)]
    (a.out_dir / "results.json").write_text(json.dumps(
        {"tool": "bench/compare.py", "date": started.isoformat(timespec="seconds"), "machine": info,
         "goals": [{"ranks": n, "goal": goal, "measured": got, "verdict": v} for n, goal, got, v in verdicts],
         "runs": runs}, indent=1) + "\n")
    png = a.out_dir / "busbw.png"
    try:
        sys.path.insert(0, str(REPO / "python"))
        from gocl.tools.perf import plot

        plot(runs, png, title="allreduce busbw: gocl vs OpenMPI (medians)")
        md += ["", f"![busbw against size]({png.name})"]
    except ImportError as e:
        print(f"compare: no plot ({e})")
    (a.out_dir / "RESULTS.md").write_text("\n".join(md) + "\n")
    print(f"\ncompare: wrote {a.out_dir / 'RESULTS.md'}, {a.out_dir / 'results.json'}"
          + (f", {png}" if png.exists() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
