"""Collectives across hosts whose link is the bottleneck: gocl beside torch's
gloo and OpenMPI, on the same shaped links, alternated, as ratios to the link.

    make bench-multihost                      # needs root, iproute2 (ip, tc) and OpenMPI
    .venv/bin/python bench/multihost.py --hosts 2 --ranks-per-host 2 --rate 1gbit --rounds 3

The hosts are network namespaces (gocl.tools.netns): 2 joined by a veth
pair, more on a bridge, each direction of each host's link shaped to --rate
by a token bucket (tc tbf), so the link and not the kernel's copies bounds
what crosses it, as on a 1/10/25 GbE cluster. When every rank can have a
CPU of its own, each host gets its own share of the CPUs (--share-cpus:
not), as real hosts have. Each round, in turn:

- raw: one TCP stream host 0 -> host 1 (plain sockets, 4 MiB writes, as
  iperf3 measures), then two at once, one each way (per direction);
- for each collective, each library in turn, one sweep of sizes (--sizes,
  nccl-tests' sizes: the larger buffer of a rank), float32, sum:
  gocl: `gocl run --nnodes N` on each host running `gocl perf COLL`
  (GOCL_SOCKET_IFNAME=gocl0; GOCL_NET_GBPS=the rate, which a real NIC of
  that speed reports by itself and a shaped veth does not); gloo: torchrun --nnodes N on each host
  running this file's gloo worker (GLOO_SOCKET_IFNAME=gocl0), timed as
  gocl perf times (a loop of back-to-back calls, the mean over ranks);
  mpi: Debian's OpenMPI `mpirun` from host 0, its daemons started in the
  other namespaces by an rsh agent (`ip netns exec`), running
  build/mpi-perf COLL (`MPI_Allreduce`...) over the TCP BTL (`--mca btl
  tcp,self`; also between ranks of one host: see run_mpi).

busbw follows nccl-tests (all_reduce x 2(n-1)/n, all_gather and
reduce_scatter x (n-1)/n), so the physical limit of every collective is the
link's own rate: the tables give busbw / raw one-stream rate and the ratios
of gocl to each anchor, medians over rounds. Writes bench/MULTIHOST.md's
section for the configuration (bench/multihost/<config>.md and .json, and
.png with matplotlib; `make bench-multihost` runs the issue's three
configurations and assembles bench/MULTIHOST.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gocl.tools import netns
from gocl.tools.perf_hosts import human

REPO = Path(__file__).resolve().parents[1]
PORT = 29470
COLLS = ("all_reduce", "all_gather", "reduce_scatter")
LIBS = ("gocl", "gloo", "mpi")
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n}
LOOP_BYTES = 256 << 20  # perf_common.h's PERF_LOOP_BYTES: the gloo worker follows the same policy



def parse_bytes(s: str) -> int:
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def raw(hosts, seconds: float, both: bool) -> float:
    return netns.link_rate(hosts, seconds, both, PORT)


# ------------------------------------------------------------------ runners

def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "NCCL_", "GLOO_", "OMPI_"))}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def _perf_args(coll: str, sizes: list[int], iters: int, warmup: int, out: Path) -> list[str]:
    return [coll, "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(_factor(sizes)), "-n", str(iters),
            "-w", str(warmup), "-T", "600", f"--json={out}"]


def _factor(sizes: list[int]) -> int:
    return sizes[1] // sizes[0] if len(sizes) > 1 else 2


def _rows(out: Path, what: str, logs: str) -> dict[int, float]:
    """size -> out-of-place time (us) from a perf JSON; the run must have
    checked right."""
    if not out.exists():
        raise RuntimeError(f"{what} wrote no results:\n{logs[-4000:]}")
    data = json.loads(out.read_text())
    if data.get("out_of_bounds"):
        raise RuntimeError(f"{what} computed wrong values:\n{logs[-4000:]}")
    return {r["size"]: r["out_of_place"]["time_us"] for r in data["rows"]}


def _wait_all(procs, what: str, timeout: float) -> str:
    logs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] or "")
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{what} did not finish within {timeout:.0f} s")
    text = "".join(logs)
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{what} failed (exit {bad}):\n{text[-4000:]}")
    return text


def run_gocl(hosts, per_host, coll, sizes, a, port, settings=None) -> dict[int, float]:
    out = Path(tempfile.mkdtemp(prefix="mh-gocl-")) / "perf.json"
    env = _clean_env(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_TIMEOUT="120", **(settings or {}))
    if a.rate != "none" and "GOCL_NET_GBPS" not in (settings or {}):  # as a NIC of that speed reports it
        env["GOCL_NET_GBPS"] = f"{netns.rate_bits(a.rate) / 1e9:g}"
    gocl = str(Path(sys.executable).parent / "gocl")
    perf = os.environ.get("GOCL_PERF_CMD", gocl + " perf").split()
    procs = [subprocess.Popen(h.cmd([gocl, "run", "--nnodes", str(len(hosts)), "--node-rank", str(k), "--master-addr",
                                     hosts[0].addr, "--master-port", str(port), "-n", str(per_host), "--", *perf,
                                     *_perf_args(coll, sizes, a.iters, a.warmup, out)]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k, h in enumerate(hosts)]
    logs = _wait_all(procs, f"gocl {coll}", a.limit)
    return _rows(out, f"gocl {coll}", logs)


def run_gloo(hosts, per_host, coll, sizes, a, port) -> dict[int, float]:
    out = Path(tempfile.mkdtemp(prefix="mh-gloo-")) / "gloo.json"
    env = _clean_env(GLOO_SOCKET_IFNAME=netns.IFNAME, TORCH_CPP_LOG_LEVEL="ERROR")
    torchrun = str(Path(sys.executable).parent / "torchrun")
    procs = [subprocess.Popen(h.cmd([torchrun, "--nnodes", str(len(hosts)), "--node-rank", str(k), "--nproc-per-node",
                                     str(per_host), "--master-addr", hosts[0].addr, "--master-port", str(port),
                                     __file__, "--gloo-worker", coll, "--sizes", ",".join(map(str, sizes)),
                                     "--iters", str(a.iters), "--warmup", str(a.warmup), "--out", str(out)]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k, h in enumerate(hosts)]
    logs = _wait_all(procs, f"gloo {coll}", a.limit)
    return _rows(out, f"gloo {coll}", logs)


def run_mpi(hosts, per_host, coll, sizes, a, port) -> dict[int, float]:
    tmp = Path(tempfile.mkdtemp(prefix="mh-mpi-"))
    out = tmp / "perf.json"
    # The issue's --mca btl tcp,self, also between ranks of one host: vader (MPI's shared
    # memory) segfaults in mca_btl_vader_poll_handle_frag here (OpenMPI 4.1.4, ranks of
    # "hosts" that are namespaces of one machine), with or without its single-copy path.
    env = _clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TMPDIR=str(tmp))
    cmd = netns.mpirun(hosts, per_host, [str(REPO / "build" / "mpi-perf"), *_perf_args(coll, sizes, a.iters, a.warmup, out)],
                       tmp, mca=["--mca", "btl", "tcp,self"])
    procs = [subprocess.Popen(hosts[0].cmd(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    logs = _wait_all(procs, f"mpi {coll}", a.limit)
    return _rows(out, f"mpi {coll}", logs)


# ------------------------------------------------------- the gloo worker

def gloo_worker(a) -> int:
    """One rank under torchrun: gocl perf's timing on torch's gloo (the loop
    of back-to-back calls, iterations capped at LOOP_BYTES per loop, the mean
    time over ranks), rank 0 writes perf's JSON rows."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for size in (int(s) for s in a.sizes.split(",")):
        if a.gloo_worker == "all_reduce":
            count = size // 4
            send, recv = torch.ones(count), None
            call = lambda: dist.all_reduce(send)  # noqa: E731 - gocl perf's out-of-place is MPI's; gloo has in place only
        elif a.gloo_worker == "all_gather":
            count = size // 4 // n  # nccl-tests: size is the gathered buffer, count per rank
            send, recv = torch.ones(count), torch.empty(count * n)
            call = lambda: dist.all_gather_into_tensor(recv, send)  # noqa: E731
        else:
            count = size // 4 // n
            send, recv = torch.ones(count * n), torch.empty(count)
            call = lambda: dist.reduce_scatter_tensor(recv, send)  # noqa: E731
        if count == 0:
            continue
        iters = max(2, min(a.iters, LOOP_BYTES // size))
        warmup = max(1, min(a.warmup, LOOP_BYTES // 4 // size))
        for _ in range(warmup):
            call()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        us = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(us)
        rows.append({"size": size, "count": count, "out_of_place": {"time_us": us.item() / n}})
    if rank == 0:
        Path(a.out).write_text(json.dumps({"rows": rows, "out_of_bounds": 0}))
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------- report

def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(result: dict) -> dict:
    """Medians over rounds: raw rates, and per collective, library and size,
    busbw (GB/s), busbw / raw one stream, and gocl's speed ratio to each
    anchor (time ratio, per round, then the median)."""
    n = result["nranks"]
    rounds = result["rounds"]
    raw1 = _med([r["raw_one_way"] for r in rounds])
    raw2 = _med([r["raw_both_ways"] for r in rounds])
    out = {"raw_one_way_GBps": raw1 / 1e9, "raw_both_ways_GBps": raw2 / 1e9, "colls": {}}
    for coll in result["colls"]:
        per = {}
        for size in result["sizes"]:
            row = {}
            for lib in result["libs"]:
                ts = [r["times"][coll][lib].get(str(size)) for r in rounds if lib in r["times"].get(coll, {})]
                t = _med(ts)
                if t is None:
                    continue
                bus = size / t / 1e3 * BUS[coll](n)  # GB/s
                row[lib] = {"time_us": t, "busbw_GBps": bus, "of_link": bus * 1e9 / raw1}
            for lib in result["libs"]:
                if lib == "gocl" or lib not in row or "gocl" not in row:
                    continue
                ratios = [r["times"][coll][lib][str(size)] / r["times"][coll]["gocl"][str(size)] for r in rounds
                          if str(size) in r["times"][coll].get(lib, {}) and str(size) in r["times"][coll].get("gocl", {})]
                row["gocl"][f"vs_{lib}"] = _med(ratios)
            per[str(size)] = row
        out["colls"][coll] = per
    return out


def goals(result: dict, s: dict) -> list[str]:
    """The issue's goals, judged on the medians."""
    lines = []
    for coll, per in s["colls"].items():
        big_from = 16 << 20 if coll == "all_reduce" else 1 << 20
        link = [(int(k), v["gocl"]["of_link"]) for k, v in per.items() if "gocl" in v and int(k) >= big_from]
        if coll == "all_reduce" and link:
            worst = min(link, key=lambda x: x[1])
            lines.append(f"- {coll}: busbw >= 0.9x the link from 16 MiB: "
                         f"{'met' if worst[1] >= 0.9 else 'NOT met'} (lowest {worst[1]:.2f}x at {human(worst[0])})")
        elif link:
            worst = min(link, key=lambda x: x[1])
            lines.append(f"- {coll}: busbw from 1 MiB: lowest {worst[1]:.2f}x the link at {human(worst[0])}")
        for lib, want in (("gloo", 1.3), ("mpi", 1.1)):
            big = [(int(k), v["gocl"].get(f"vs_{lib}")) for k, v in per.items()
                   if "gocl" in v and v["gocl"].get(f"vs_{lib}") is not None and int(k) >= (64 << 10 if coll == "all_reduce" else 1 << 20)]
            small = [(int(k), v["gocl"].get(f"vs_{lib}")) for k, v in per.items()
                     if "gocl" in v and v["gocl"].get(f"vs_{lib}") is not None and int(k) < (64 << 10 if coll == "all_reduce" else 1 << 20)]
            if not big:
                continue
            wb = min(big, key=lambda x: x[1])
            text = (f"- {coll}: >= {want}x {lib} from {'64 KiB' if coll == 'all_reduce' else '1 MiB'}: "
                    f"{'met' if wb[1] >= want else 'NOT met'} (lowest {wb[1]:.2f}x at {human(wb[0])})")
            if small:
                ws = min(small, key=lambda x: x[1])
                text += f"; below: never slower {'met' if ws[1] >= 1.0 else 'NOT met'} (lowest {ws[1]:.2f}x at {human(ws[0])})"
            lines.append(text)
    return lines


def markdown(result: dict, s: dict) -> str:
    cfg = result["config"]
    lines = [f"## {cfg}", "",
             f"`{result['command']}` — {result['nranks']} ranks, {result['cpus']} CPUs, {result['date']}, "
             f"{len(result['rounds'])} rounds alternated; link shaped to {result['rate']} each way per host; "
             + (f"each host on CPUs of its own ({', '.join(map(str, result['host_cpus']))})" if result.get("host_cpus")
                else "the hosts share the CPUs") + ".", "",
             f"Raw TCP over this link (median): one stream {s['raw_one_way_GBps']:.4f} GB/s, both ways at once "
             f"{s['raw_both_ways_GBps']:.4f} GB/s per direction (GB = 10⁹ B). busbw / link below is busbw / the "
             "one-stream rate.", ""]
    for coll, per in s["colls"].items():
        libs = [lib for lib in result["libs"] if any(lib in v for v in per.values())]
        head = "| size | " + " | ".join(f"{lib} busbw (GB/s) | {lib} / link" for lib in libs)
        head += "".join(f" | gocl vs {lib}" for lib in libs if lib != "gocl") + " |"
        lines += [f"### {coll}", "", head, "|---:" * (1 + 2 * len(libs) + len(libs) - 1) + "|"]
        for size, row in per.items():
            cells = []
            for lib in libs:
                v = row.get(lib)
                cells += [f"{v['busbw_GBps']:.4f}", f"{v['of_link']:.2f}"] if v else ["-", "-"]
            for lib in libs:
                if lib != "gocl":
                    x = row.get("gocl", {}).get(f"vs_{lib}")
                    cells.append("-" if x is None else f"{x:.2f}x")
            lines.append(f"| {human(int(size))} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Goals (medians):", "", *goals(result, s), ""]
    return "\n".join(lines)


def plot(result: dict, s: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colls = list(s["colls"])
    fig, axes = plt.subplots(1, len(colls), figsize=(5 * len(colls), 4), squeeze=False)
    for ax, coll in zip(axes[0], colls):
        per = s["colls"][coll]
        for lib in result["libs"]:
            pts = [(int(k), v[lib]["of_link"]) for k, v in per.items() if lib in v]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{coll}, {result['config']}")
        ax.set_xlabel("size (B)")
        ax.set_ylabel("busbw / link rate")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


HEADER = """# Across hosts whose link is the bottleneck: gocl, torch gloo and OpenMPI on shaped links

`make bench-multihost` (bench/multihost.py): hosts are network namespaces (2 on a veth pair, 4 on a
bridge), each host's link shaped by a token bucket (`tc qdisc ... tbf`) each way, so the link and not
the two cores' copies bounds what crosses it. Each round measures the link (one TCP stream; two, one
each way) and then runs, for each collective, gocl (`gocl perf`), torch's gloo (torchrun --nnodes, the
same timing) and OpenMPI 4.1 (`mpirun` across the namespaces, `--mca btl tcp,self`, also inside a host: its vader crashes here), the
library that goes first rotating per round. float32, sum, out of place (gloo: in place). busbw by
nccl-tests' factors, so 1.0x the link is the physical limit of a ring (2 hosts x 2 ranks can exceed it:
the ranks of one host share memory). "gocl vs X" is X's time / gocl's time per round, the median.
Per configuration: the section below, its JSON and its plot in bench/multihost/.
"""


def render(result: dict, folder: Path, stem: str) -> str:
    """The configuration's section (and its plot, with matplotlib) from its results."""
    summary = summarize(result)
    result["summary"] = summary
    md = markdown(result, summary)
    if plot(result, summary, folder / f"{stem}.png"):
        md += f"\n![busbw / link, {result['config']}]({stem}.png)\n"
    (folder / f"{stem}.md").write_text(md)
    return md


def assemble(folder: Path, dest: Path) -> int:
    """Render every configuration's results in folder again (plots too,
    where matplotlib now is) and write dest from them."""
    runs = sorted(folder.glob("*.json"), key=lambda p: [int(x) if x.isdigit() else x
                                                       for x in p.stem.replace("x", "-").split("-")])
    if not runs:
        print(f"bench/multihost.py --assemble: no results in {folder}", file=sys.stderr)
        return 1
    parts = [render(json.loads(p.read_text()), folder, p.stem) for p in runs]
    text = HEADER + "\n" + "\n".join(md.replace("](", f"]({folder.name}/") for md in parts)
    findings = folder / "FINDINGS.md"  # what the runs show, written by whoever ran them
    if findings.exists():
        text += "\n" + findings.read_text()
    dest.write_text(text)
    print(f"wrote {dest} from {', '.join(p.name for p in runs)}")
    return 0


# --------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--rate", default="1gbit", help="each host's link, each way (tc's units: 1gbit, 500mbit); 'none': unshaped")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--sizes", default="1K:256M", help="MIN:MAX, every power of 4 between (nccl-tests' sizes)")
    # Enough calls that a timed loop is long against the token bucket's
    # burst (1 ms of the rate): with 20, 16 KiB all-reduces ran at 1.3x the
    # link, the bucket's credit and not the link (loops above 0.25 MiB have
    # fewer: at most LOOP_BYTES each).
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each raw stream")
    ap.add_argument("--limit", type=float, default=900.0, help="seconds one sweep may take")
    ap.add_argument("--share-cpus", action="store_true",
                    help="let the hosts share the CPUs (default: each host gets CPUs of its own when every rank can have one)")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=VAR=V[,VAR=V]",
                    help="also run gocl with these settings each round, as library NAME")
    ap.add_argument("--out", default=str(REPO / "bench" / "multihost"), help="folder for CONFIG.md, .json, .png")
    ap.add_argument("--assemble", action="store_true",
                    help="write bench/MULTIHOST.md from the configurations' sections in --out, and stop")
    # the gloo worker (started by torchrun)
    ap.add_argument("--gloo-worker", choices=COLLS, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.gloo_worker:  # --sizes: the sweep's sizes, comma-separated; --out: rank 0's JSON
        return gloo_worker(a)
    if a.assemble:
        return assemble(Path(a.out), REPO / "bench" / "MULTIHOST.md")
    rate = None if a.rate == "none" else a.rate
    why = netns.unavailable(shaped=rate is not None)
    if why:
        print(f"bench/multihost.py: cannot make hosts here: {why}", file=sys.stderr)
        return 2
    lo, hi = (parse_bytes(x) for x in a.sizes.split(":"))
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= 4
    colls = [c for c in a.colls.split(",") if c]
    libs = [lib for lib in a.libs.split(",") if lib]
    for c in colls:
        if c not in COLLS:
            ap.error(f"--colls: {c!r} is not one of {', '.join(COLLS)}")
    for lib in libs:
        if lib not in LIBS:
            ap.error(f"--libs: {lib!r} is not one of {', '.join(LIBS)}")
    if "mpi" in libs and not (shutil.which("mpirun") and (REPO / "build" / "mpi-perf").exists()):
        ap.error("--libs mpi needs mpirun and build/mpi-perf: make mpi build/mpi-perf (or drop mpi from --libs)")
    compare = {}
    for c in a.compare:
        name, _, kv = c.partition("=")
        compare[name] = dict(x.split("=", 1) for x in kv.split(","))
    config = f"{a.hosts} hosts x {a.ranks_per_host} ranks, {a.rate}"
    result = {"config": config, "command": " ".join(["bench/multihost.py", *(argv if argv is not None else sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "rate": a.rate, "hosts": a.hosts,
              "ranks_per_host": a.ranks_per_host, "nranks": a.hosts * a.ranks_per_host, "colls": colls,
              "libs": libs + list(compare), "sizes": sizes, "rounds": []}
    print(f"# {config}: {len(sizes)} sizes {human(sizes[0])}..{human(sizes[-1])}, {', '.join(colls)}; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    port = PORT + 10
    own = not a.share_cpus and a.hosts * a.ranks_per_host <= len(os.sched_getaffinity(0))
    with netns.hosts(a.hosts, rate, "b", own_cpus=own) as hosts:
        result["host_cpus"] = [",".join(map(str, h.cpus)) for h in hosts] if own else None
        for i in range(a.rounds):
            rnd = {"raw_one_way": raw(hosts, a.seconds, False), "raw_both_ways": raw(hosts, a.seconds, True), "times": {}}
            print(f"round {i}: raw one stream {rnd['raw_one_way'] / 1e9:.4f} GB/s, both ways "
                  f"{rnd['raw_both_ways'] / 1e9:.4f} GB/s per direction", flush=True)
            for coll in colls:
                rnd["times"][coll] = {}
                every = libs + list(compare)
                order = every[i % len(every):] + every[:i % len(every)]  # who goes first rotates
                for lib in order:
                    port += 1
                    t0 = time.monotonic()
                    if lib in compare:
                        rows = run_gocl(hosts, a.ranks_per_host, coll, sizes, a, port, compare[lib])
                    else:
                        rows = {"gocl": run_gocl, "gloo": run_gloo, "mpi": run_mpi}[lib](
                            hosts, a.ranks_per_host, coll, sizes, a, port)
                    rnd["times"][coll][lib] = {str(k): v for k, v in rows.items()}
                    n = a.hosts * a.ranks_per_host
                    big = max(rows)
                    print(f"round {i} {coll} {lib}: {time.monotonic() - t0:.0f} s; at {human(big)} busbw "
                          f"{big / rows[big] / 1e3 * BUS[coll](n):.4f} GB/s", flush=True)
            result["rounds"].append(rnd)
            md = save(result, Path(a.out), f"{a.hosts}x{a.ranks_per_host}-{a.rate}")  # each round: a crash keeps the others
    print(md)
    return 0


def save(result: dict, out: Path, stem: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    md = render(result, out, stem)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    return md


if __name__ == "__main__":
    sys.exit(main())
