"""All-reduce between two hosts against the raw TCP throughput of their link.

    flock /work/helpers/bench.lock .venv/bin/python bench/multihost.py            # needs root and iproute2
    .venv/bin/python bench/multihost.py --size 64M --rounds 5 --ranks-per-host 1 --markdown

Two "hosts" are network namespaces joined by a veth pair (tests/python/netns.py).
Rounds alternate, so a change in machine load hits both alike:

- raw: one TCP stream from host 0 to host 1 over the link (plain sockets, 4 MiB
  writes, --seconds long), throughput measured at the receiver, as iperf3 does;
- gocl: `gocl run --nnodes 2` on each host, `gocl perf all_reduce` (float32, sum,
  out of place) at --size per rank, GOCL_SOCKET_IFNAME set to the link; busbw as
  nccl-tests defines it (algbw x 2(n-1)/n).

Reported: the median of each over rounds, and gocl busbw against two anchors
(the goal is >= 0.8 of the raw throughput):

- one stream, one way (the issue's wording);
- both ways at once, per direction: two streams, one each way, counted over
  the same wall-clock window. This is the fair anchor: an all-reduce of 2
  hosts sends and receives its whole size each way at once (busbw = the
  bytes each direction carries per second), and a veth link's throughput is
  the CPU time of the kernel's copies, which two directions share.

Writes bench/MULTIHOST.md and bench/multihost.json (--markdown/--json: elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
import netns  # noqa: E402

CHUNK = 4 << 20
PORT = 29470

# The receiver counts the bytes that arrive inside one wall-clock window
# [start, stop), the same for every stream of a run, so "both ways at once"
# measures two streams that really overlap (started one after the other and
# timed each from its own first byte, their ends ran alone and read high).
RECEIVER = """
import socket, sys, time
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
start, stop = float(sys.argv[3]), float(sys.argv[4])
print("listening", flush=True)
c, _ = srv.accept()
buf = bytearray({chunk}); view = memoryview(buf); total = 0
while True:
    k = c.recv_into(view)
    if not k:
        break
    if start <= time.time() < stop:
        total += k
print(total / (stop - start), flush=True)
""".format(chunk=CHUNK)

SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
data = bytes({chunk}); end = float(sys.argv[3])
while time.time() < end:
    c.sendall(data)
c.close()
""".format(chunk=CHUNK)


def parse_bytes(s: str) -> int:
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


LEAD = 0.5  # s from launching the streams to the window: every sender is streaming by then


def raw(hosts, seconds: float, both: bool) -> float:
    """Bytes/s of one stream host 0 -> host 1 (both: the sum of two streams,
    one each way, over the same window)."""
    pairs = [(hosts[0], hosts[1], PORT)] + ([(hosts[1], hosts[0], PORT + 1)] if both else [])
    start = time.time() + LEAD + 0.2 * len(pairs)  # after every process has started, even on a loaded host
    stop = start + seconds
    rxs, txs = [], []
    for src, dst, port in pairs:
        rx = subprocess.Popen(dst.cmd([sys.executable, "-c", RECEIVER, dst.addr, str(port), str(start), str(stop)]),
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "listening"
        txs.append(subprocess.Popen(src.cmd([sys.executable, "-c", SENDER, dst.addr, str(port), str(stop + 0.1)])))
        rxs.append(rx)
    rate = sum(float(rx.communicate(timeout=seconds + 60)[0]) for rx in rxs)
    for tx in txs:
        tx.wait(timeout=60)
    return rate


def gocl_allreduce(hosts, size: int, per_host: int, iters: int, port: int, settings: dict | None = None) -> dict:
    """One gocl perf all_reduce run over both hosts (settings: extra GOCL_*
    variables); rank 0's JSON row."""
    out = Path(tempfile.mkdtemp()) / "perf.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "NCCL_"))}
    env.update(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_TIMEOUT="120", **(settings or {}))
    gocl = str(Path(sys.executable).parent / "gocl")
    procs = [subprocess.Popen(h.cmd([gocl, "run", "--nnodes", "2", "--node-rank", str(k), "--master-addr",
                                     hosts[0].addr, "--master-port", str(port), "-n", str(per_host), "--",
                                     gocl, "perf", "all_reduce", "-b", str(size), "-e", str(size), "-n", str(iters),
                                     "-w", "3", "-c", "0", f"--json={out}"]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k, h in enumerate(hosts)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise SystemExit(f"gocl perf failed:\n{log}")
    data = json.loads(out.read_text())
    row = data["rows"][0]["out_of_place"]
    return {"busbw_GBps": row["busbw"], "algbw_GBps": row["algbw"], "time_us": row["time_us"], "nranks": data["nranks"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="64M", help="bytes per rank (default 64M)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each raw stream")
    ap.add_argument("--iters", type=int, default=20, help="all_reduce calls per gocl round")
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=VAR=V[,VAR=V]",
                    help="also run gocl with these settings each round (e.g. nsocks4=GOCL_NSOCKS_PERTHREAD=4, "
                         "or another build: GOCL_LIBRARY=... with GOCL_PERF=...); its busbw is reported beside the default's")
    ap.add_argument("--markdown", default=str(REPO / "bench" / "MULTIHOST.md"))
    ap.add_argument("--json", default=str(REPO / "bench" / "multihost.json"))
    args = ap.parse_args()
    why = netns.unavailable()
    if why:
        print(f"bench/multihost.py: cannot make hosts here: {why}", file=sys.stderr)
        return 2
    size = parse_bytes(args.size)
    compare = {}
    for c in args.compare:
        name, _, kv = c.partition("=")
        compare[name] = dict(x.split("=", 1) for x in kv.split(","))
    rounds = []
    with netns.two_hosts("b") as hosts:
        for i in range(args.rounds):
            one = raw(hosts, args.seconds, both=False)
            two = raw(hosts, args.seconds, both=True)
            g = gocl_allreduce(hosts, size, args.ranks_per_host, args.iters, PORT + 10 + i)
            rounds.append({"raw_one_way_GBps": one / 1e9, "raw_both_ways_GBps": two / 1e9, **g})
            for k, (name, settings) in enumerate(compare.items()):
                rounds[-1][name] = gocl_allreduce(hosts, size, args.ranks_per_host, args.iters,
                                                  PORT + 100 + 10 * k + i, settings)["busbw_GBps"]
            print(f"round {i}: raw one way {one / 1e9:.3f} GB/s, both ways {two / 1e9:.3f} GB/s; "
                  f"gocl all_reduce busbw {g['busbw_GBps']:.3f} GB/s"
                  + "".join(f", {name} {rounds[-1][name]:.3f}" for name in compare), flush=True)
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("raw_one_way_GBps", "raw_both_ways_GBps", "busbw_GBps", *compare)}
    for name in compare:
        print(f"{name} ({compare[name]}): median busbw {med[name]:.3f} GB/s vs default {med['busbw_GBps']:.3f} "
              f"({med[name] / med['busbw_GBps']:.2f}x); / raw one stream {med[name] / med['raw_one_way_GBps']:.2f}")
    ratio = med["busbw_GBps"] / med["raw_one_way_GBps"]
    fair = med["busbw_GBps"] / (med["raw_both_ways_GBps"] / 2)
    result = {"size": size, "ranks_per_host": args.ranks_per_host, "nranks": rounds[0]["nranks"], "cpus": os.cpu_count(),
              "rounds": rounds, "median": med, "ratio": ratio, "ratio_both_ways": fair, "goal": 0.8,
              "met": ratio >= 0.8, "met_both_ways": fair >= 0.8}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    md = [
        "# All-reduce between two hosts vs the raw TCP throughput of their link",
        "",
        f"`bench/multihost.py --size {args.size} --rounds {args.rounds} --ranks-per-host {args.ranks_per_host}`: "
        f"two network namespaces joined by a veth pair, {rounds[0]['nranks']} ranks, {os.cpu_count()} CPUs; "
        "rounds alternate raw and gocl; medians over rounds (GB = 10⁹ B).",
        "",
        "| round | raw TCP, one stream (GB/s) | raw TCP, both ways at once (GB/s) | gocl all_reduce busbw (GB/s) |"
        + "".join(f" {name} busbw (GB/s) |" for name in compare),
        "|---|---|---|---|" + "---|" * len(compare),
        *[f"| {i} | {r['raw_one_way_GBps']:.3f} | {r['raw_both_ways_GBps']:.3f} | {r['busbw_GBps']:.3f} |"
          + "".join(f" {r[name]:.3f} |" for name in compare) for i, r in enumerate(rounds)],
        f"| median | {med['raw_one_way_GBps']:.3f} | {med['raw_both_ways_GBps']:.3f} | {med['busbw_GBps']:.3f} |"
        + "".join(f" {med[name]:.3f} |" for name in compare),
        "",
        f"ratio = gocl busbw / raw one stream = **{ratio:.2f}** (goal ≥ 0.8: {'met' if ratio >= 0.8 else 'not met'}).",
        *[f"{name} = {', '.join(f'{k}={v}' for k, v in compare[name].items())}: median busbw "
          f"{med[name] / med['busbw_GBps']:.2f}x the default's; / raw one stream {med[name] / med['raw_one_way_GBps']:.2f}."
          for name in compare],
        "",
        f"Fair anchor (the all-reduce's direction pattern: its whole size each way at once): gocl busbw / "
        f"(both ways / 2) = **{fair:.2f}** (goal ≥ 0.8: {'met' if fair >= 0.8 else 'not met'}); a veth link is "
        "bound by the kernel's copies on the cores the ranks use, so both directions at once share them.",
        *[f"{name}: / (both ways / 2) {med[name] / (med['raw_both_ways_GBps'] / 2):.2f}." for name in compare],
        "",
    ]
    Path(args.markdown).write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
