"""``gocl perf --hosts N``: gocl perf across N hosts made on this machine.

    sudo gocl perf --hosts 2 --ranks-per-host 2 --rate 1gbit all_reduce -b 1K -e 256M -f 4 \\
        --json=2x2.json --plot 2x2.png

The hosts are network namespaces (gocl.tools.netns): 2 on a veth pair, more on a
bridge, each with CPUs of its own when every rank can have one, each
direction of each link shaped to ``--rate`` by a token bucket (tc tbf), so
that the link, not the machine's copies, bounds what crosses it, as on a
1/10/25 GbE cluster. It measures the link first (one TCP stream), then runs
``gocl run --nnodes N -n K -- gocl perf ARGS`` in every host
(GOCL_SOCKET_IFNAME=gocl0; GOCL_NET_GBPS=the rate, as a NIC of that speed
reports it, unless set) and prints rank 0's table with busbw / link beside
it. ``--json=FILE`` writes the run with the link's figures ("link");
``--plot FILE.png`` draws busbw / link against size. Needs root and
iproute2. bench/multihost.py runs the same beside torch's gloo and OpenMPI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from . import netns

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gocl perf --hosts", add_help=False)
    ap.add_argument("--hosts", type=int, required=True, help="hosts (network namespaces), 2 or more")
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--rate", default=None, help="each host's link, each way, in tc's units (1gbit, 500mbit); "
                                                 "unset: unshaped")
    ap.add_argument("--share-cpus", action="store_true",
                    help="let the hosts share the CPUs (default: CPUs of its own for each host when every rank "
                         "can have one)")
    ap.add_argument("--plot", default=None)
    return ap


def main(argv: Sequence[str]) -> int:
    a, rest = _parser().parse_known_args(list(argv))
    own_json = next((x.split("=", 1)[1] for x in rest if x.startswith("--json=")), None)
    rest = [x for x in rest if not x.startswith("--json")]
    problem = None
    if a.hosts < 2:
        problem = f"--hosts {a.hosts}: give 2 or more hosts (one host is plain `gocl run -n K -- gocl perf`)"
    elif a.ranks_per_host < 1:
        problem = f"--ranks-per-host {a.ranks_per_host}: give 1 or more"
    elif not rest or rest[0].startswith("-"):
        problem = "name the collective: gocl perf --hosts 2 all_reduce -b 1K -e 64M"
    elif a.rate is not None:
        try:
            netns.rate_bits(a.rate)
        except ValueError as e:
            problem = f"--rate: {e}"
    if problem is None:
        why = netns.unavailable(shaped=a.rate is not None)
        if why:
            problem = f"cannot make hosts on this machine: {why}"
    if problem is None and a.plot:
        from .perf import pyplot

        try:
            pyplot()
        except ImportError as e:
            problem = str(e)
    if problem:
        print(f"gocl perf --hosts: {problem}", file=sys.stderr)
        return EXIT_USAGE
    own = not a.share_cpus and a.hosts * a.ranks_per_host <= len(os.sched_getaffinity(0))
    gocl = [sys.executable, "-m", "gocl"]
    env = dict(os.environ, GOCL_SOCKET_IFNAME=netns.IFNAME)
    if a.rate and "GOCL_NET_GBPS" not in os.environ:
        env["GOCL_NET_GBPS"] = f"{netns.rate_bits(a.rate) / 1e9:g}"
    port = random.randint(30000, 39000)
    with tempfile.TemporaryDirectory(prefix="gocl-perf-hosts-") as tmp, \
            netns.hosts(a.hosts, a.rate, "q", own_cpus=own) as hs:
        link = netns.link_rate(hs, 2.0, port=port)
        where = (f"each host on CPUs {' / '.join(','.join(map(str, h.cpus)) for h in hs)}" if own
                 else "the hosts share the CPUs")
        print(f"# gocl perf --hosts {a.hosts} --ranks-per-host {a.ranks_per_host}, link "
              f"{a.rate or 'unshaped'}: one TCP stream carries {link / 1e9:.4f} GB/s; {where}"
              + (f"; GOCL_NET_GBPS={env['GOCL_NET_GBPS']}" if "GOCL_NET_GBPS" in env else ""), flush=True)
        out = Path(tmp) / "run.json"
        procs = [subprocess.Popen(h.cmd([*gocl, "run", "--nnodes", str(a.hosts), "--node-rank", str(k),
                                         "--master-addr", hs[0].addr, "--master-port", str(port + 2),
                                         "-n", str(a.ranks_per_host), "--", *gocl, "perf", *rest, f"--json={out}"]),
                                  env=env, stdout=None if k == 0 else subprocess.PIPE,
                                  stderr=None if k == 0 else subprocess.STDOUT, text=True)
                 for k, h in enumerate(hs)]
        logs: dict[int, str] = {}

        def drain(k: int, p: subprocess.Popen) -> None:
            logs[k] = p.communicate()[0] or ""

        threads = [threading.Thread(target=drain, args=(k, p), daemon=True) for k, p in enumerate(procs) if k]
        for t in threads:
            t.start()
        procs[0].wait()
        for p in procs[1:]:
            p.wait()
        for t in threads:
            t.join()
        bad = [k for k, p in enumerate(procs) if p.returncode != 0]
        for k in bad:
            if k:  # host 0's output went to the terminal already
                print(f"# host {k}:\n{logs.get(k, '')[-3000:]}", file=sys.stderr)
        if bad:
            return procs[bad[0]].returncode or 1
        run = json.loads(out.read_text())
    run["link"] = {"rate": a.rate, "one_stream_GBps": link / 1e9, "hosts": a.hosts,
                   "ranks_per_host": a.ranks_per_host, "host_cpus": [list(h.cpus) for h in hs] if own else None,
                   "net_gbps": env.get("GOCL_NET_GBPS")}
    print("# busbw / link (out of place): " + ", ".join(
        f"{human(r['size'])} {r['out_of_place']['busbw'] * 1e9 / link:.2f}" for r in run["rows"] if r.get("out_of_place")))
    if own_json:
        Path(own_json).write_text(json.dumps(run, indent=1) + "\n")
        print(f"# results: {own_json}")
    if a.plot:
        from .perf import plot

        plot([run], a.plot, per_link=link / 1e9,
             title=f"{run.get('collective')} on {a.hosts} hosts x {a.ranks_per_host} ranks, link {a.rate or 'unshaped'}")
        print(f"# plot: {a.plot}")
    return 0


def human(n: int) -> str:
    """A size as nccl-tests' sweeps name it: 4 KiB, 64 MiB, 1000 B."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"
