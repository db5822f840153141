"""Hosts on one machine: network namespaces on a link, shaped or not.

Each ``Host`` is a network namespace with loopback, a decoy interface that
comes first (``dec0``, an address no other host can reach: a rank that does
not pick its interface by ``GOCL_SOCKET_IFNAME`` picks it and fails) and
``gocl0``, its end of the link (10.251.0.<i+1>/24):

- 2 hosts: one veth pair between them;
- more: each host's veth pair ends on a bridge in a namespace of its own
  (the switch), so the machine's own namespace is left alone.

``rate`` (e.g. ``"1gbit"``) shapes every link to a NIC of that speed in each
direction: a token bucket (``tc ... tbf``) on each host's egress and, behind
a bridge, on the switch port's egress towards the host. This makes the link
the bottleneck, as on a cluster, where an unshaped veth link is only as fast
as the kernel's copies on the cores the ranks use.

``hosts(n, rate)`` and ``two_hosts()`` need root and iproute2 (``ip``,
``tc``); ``unavailable()`` says why not. ``link_rate()`` measures what a
link carries (one TCP stream, or one each way). Used by ``gocl perf
--hosts``, tests/python/test_multihost.py and bench/multihost.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

IFNAME = "gocl0"
SUBNET = "10.251.0"


def unavailable(shaped: bool = False) -> str | None:
    """Why namespaces (shaped: and token-bucket shaping) cannot be made
    here, or None when they can."""
    if not shutil.which("ip"):
        return "no `ip` command (iproute2) to make network namespaces"
    if shaped and not shutil.which("tc"):
        return "no `tc` command (iproute2) to shape links"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    name = f"gocl-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    try:
        if shaped:
            _ip("-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
            r = subprocess.run(["tc", "-n", name, "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "1gbit",
                                "burst", "128kb", "latency", "50ms"], capture_output=True, text=True)
            if r.returncode != 0:
                return f"this kernel cannot shape links with tbf: {r.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _run(argv: Sequence[str]) -> None:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")


def _ip(*args: str) -> None:
    _run(["ip", *args])


def rate_bits(rate: str) -> int:
    """Bits per second of a tc rate such as 1gbit, 500mbit, 2.5gbit."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmg]?)(bit|bps)?\s*", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r}: write it as tc does, e.g. 1gbit, 500mbit")
    bits = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] * (8 if m[3] == "bps" else 1)
    return int(bits)


def _shape(ns: str, dev: str, rate: str) -> None:
    """A token bucket on dev's egress: rate, a burst of 1 ms at that rate
    (at least 128 KiB, so the veth's 64 KiB GSO packets pass whole) and a
    queue of 50 ms."""
    burst = max(128 << 10, rate_bits(rate) // 8 // 1000)
    _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
          "burst", str(burst), "latency", "50ms"])


@dataclass
class Host:
    ns: str
    addr: str  # address on IFNAME
    port_ns: str = ""  # where the other end of this host's link is (the switch, or the other host)
    port_dev: str = ""
    cpus: tuple[int, ...] = ()  # this host's own CPUs (empty: it shares the machine's)

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """argv run inside this host's namespace (on its own CPUs, when it has some)."""
        pin = ["taskset", "-c", ",".join(map(str, self.cpus))] if self.cpus else []
        return ["ip", "netns", "exec", self.ns, *pin, *argv]

    def link(self, up: bool) -> None:
        """Bring this host's end of the link up or down (down: packets are dropped, no reset)."""
        _ip("-n", self.ns, "link", "set", IFNAME, "up" if up else "down")

    def shaping(self) -> str:
        """`tc qdisc show` of this host's end of the link."""
        r = subprocess.run(["tc", "-n", self.ns, "qdisc", "show", "dev", IFNAME], capture_output=True, text=True)
        return r.stdout.strip()


def cpu_slices(n: int) -> list[tuple[int, ...]] | None:
    """n disjoint equal slices of the CPUs this process may use, or None
    when there are fewer CPUs than n."""
    cpus = sorted(os.sched_getaffinity(0))
    per = len(cpus) // n
    return [tuple(cpus[k * per:(k + 1) * per]) for k in range(n)] if per else None


@contextlib.contextmanager
def hosts(n: int = 2, rate: str | None = None, tag: str = "", own_cpus: bool = False) -> Iterator[list[Host]]:
    """n namespaces on one link (2: a veth pair; more: a bridge), each
    direction of each host's link shaped to rate when given; removed on exit.

    own_cpus gives each host a disjoint share of the CPUs (cpu_slices; its
    commands run under taskset), as real hosts have: sharing them, two
    1-rank "hosts" on 2 cores were often put on one core by the scheduler,
    and a 1 KiB exchange took 16-22 us instead of 9-11."""
    if not 2 <= n <= 200:
        raise ValueError(f"hosts: n={n}: make 2 to 200 hosts")
    slices = cpu_slices(n) if own_cpus else None
    if own_cpus and slices is None:
        raise ValueError(f"hosts: {n} hosts cannot have CPUs of their own on {len(os.sched_getaffinity(0))}")
    uniq = f"{os.getpid() % 100000}{tag}"
    hs = [Host(f"gocl-h{i}-{uniq}", f"{SUBNET}.{i + 1}", cpus=slices[i] if slices else ()) for i in range(n)]
    made: list[str] = []
    try:
        for i, h in enumerate(hs):
            _ip("netns", "add", h.ns)
            made.append(h.ns)
            _ip("-n", h.ns, "link", "set", "lo", "up")
            # The decoy first (lower interface index): an address nobody else routes to.
            _ip("-n", h.ns, "link", "add", "dec0", "type", "veth", "peer", "name", "dec1")
            _ip("-n", h.ns, "addr", "add", f"10.252.{i}.1/24", "dev", "dec0")
            _ip("-n", h.ns, "link", "set", "dec0", "up")
            _ip("-n", h.ns, "link", "set", "dec1", "up")
        if n == 2:
            a, b = f"gva{uniq}"[:15], f"gvb{uniq}"[:15]
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            ends = [(hs[0], a), (hs[1], b)]
            hs[0].port_ns, hs[0].port_dev = hs[1].ns, IFNAME
            hs[1].port_ns, hs[1].port_dev = hs[0].ns, IFNAME
        else:
            sw = f"gocl-sw-{uniq}"
            _ip("netns", "add", sw)
            made.append(sw)
            _ip("-n", sw, "link", "set", "lo", "up")
            _ip("-n", sw, "link", "add", "br0", "type", "bridge")
            _ip("-n", sw, "link", "set", "br0", "up")
            ends = []
            for i, h in enumerate(hs):
                a, port = f"gh{i}{uniq}"[:15], f"p{i}"
                _ip("link", "add", a, "type", "veth", "peer", "name", port, "netns", sw)
                _ip("-n", sw, "link", "set", port, "master", "br0")
                _ip("-n", sw, "link", "set", port, "up")
                h.port_ns, h.port_dev = sw, port
                ends.append((h, a))
        for h, end in ends:
            _ip("link", "set", end, "netns", h.ns)
            _ip("-n", h.ns, "link", "set", end, "name", IFNAME)
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", IFNAME)
            _ip("-n", h.ns, "link", "set", IFNAME, "up")
        if rate:
            for h in hs:
                _shape(h.ns, IFNAME, rate)
                if n > 2:  # the switch's port towards h: what h receives
                    _shape(h.port_ns, h.port_dev, rate)
        yield hs
    finally:
        for ns in made:  # deleting a namespace deletes its interfaces (and the veth peers)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def two_hosts(tag: str = "", rate: str | None = None):
    """Two namespaces joined by a veth pair (shaped to rate when given)."""
    return hosts(2, rate, tag)


# OpenMPI's rsh agent for namespaces: `agent HOST COMMAND...` runs COMMAND in
# the namespace of the host whose address is HOST (on its CPUs), with a
# TMPDIR of its own: the "hosts" share /tmp and the host name, and daemons
# making the same session directory at once failed (mkdir .../jf.N: File
# exists).
_MPI_AGENT = """#!/bin/sh
host=$1; shift
case "$host" in
{cases}
  *) echo "mpi agent: no namespace for host $host" >&2; exit 1;;
esac
mkdir -p "$tmp"
exec ip netns exec "$ns" $pin env TMPDIR="$tmp" /bin/sh -c "$*"
"""


def mpirun(hs: Sequence[Host], per_host: int, argv: Sequence[str], folder: Path,
           mca: Sequence[str] = ()) -> list[str]:
    """The command that runs argv as len(hs) * per_host ranks of one
    ``mpirun`` across the hosts (run it in host 0's namespace:
    ``hs[0].cmd(...)``): OpenMPI starts its daemons in the other namespaces
    through an rsh agent written to folder, and talks over IFNAME only.
    Give it OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    as root, and TMPDIR=folder."""
    agent = Path(folder) / "mpi-agent.sh"
    agent.write_text(_MPI_AGENT.format(cases="\n".join(
        f"  {h.addr}) ns={h.ns}; pin='{' '.join(h.cmd([])[4:])}'; tmp={folder}/h{k};;" for k, h in enumerate(hs))))
    agent.chmod(0o755)
    return ["mpirun", "--mca", "plm_rsh_agent", str(agent), "--mca", "btl_tcp_if_include", IFNAME,
            "--mca", "oob_tcp_if_include", IFNAME, *mca, "--host", ",".join(f"{h.addr}:{per_host}" for h in hs),
            "-np", str(len(hs) * per_host), "--bind-to", "none", *argv]


# link_rate's streams: the receiver counts the bytes that arrive inside one
# wall-clock window [start, stop), the same for every stream of a run, so
# "both ways at once" measures two streams that really overlap.
_CHUNK = 4 << 20
_RECEIVER = """
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
""".format(chunk=_CHUNK)

_SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
data = bytes({chunk}); end = float(sys.argv[3])
while time.time() < end:
    c.sendall(data)
c.close()
""".format(chunk=_CHUNK)

_LEAD = 0.5  # s from launching the streams to the window: every sender is streaming by then


def link_rate(hs: Sequence[Host], seconds: float = 2.0, both: bool = False, port: int = 29470) -> float:
    """Bytes/s of one TCP stream host 0 -> host 1 (plain sockets, 4 MiB
    writes, as iperf3 measures); both: per direction, the mean of two
    streams, one each way, over the same window."""
    pairs = [(hs[0], hs[1], port)] + ([(hs[1], hs[0], port + 1)] if both else [])
    start = time.time() + _LEAD + 0.2 * len(pairs)  # after every process has started, even on a loaded host
    stop = start + seconds
    rxs, txs = [], []
    for src, dst, p in pairs:
        rx = subprocess.Popen(dst.cmd([sys.executable, "-c", _RECEIVER, dst.addr, str(p), str(start), str(stop)]),
                              stdout=subprocess.PIPE, text=True)
        if rx.stdout.readline().strip() != "listening":
            raise RuntimeError(f"link_rate: the receiver in {dst.ns} did not start")
        txs.append(subprocess.Popen(src.cmd([sys.executable, "-c", _SENDER, dst.addr, str(p), str(stop + 0.1)])))
        rxs.append(rx)
    rate = sum(float(rx.communicate(timeout=seconds + 60)[0]) for rx in rxs)
    for tx in txs:
        tx.wait(timeout=60)
    return rate / len(pairs)
