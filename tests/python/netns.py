"""Hosts on one machine: network namespaces joined by a veth pair.

Each ``Host`` is a network namespace with loopback, a decoy interface that
comes first (``dec0``, an address no other host can reach: a rank that does
not pick its interface by ``GOCL_SOCKET_IFNAME`` picks it and fails) and
``gocl0``, its end of the veth link to the other host (10.251.0.<i+1>/24).
``two_hosts()`` needs root and iproute2; ``unavailable()`` says why not.
Used by tests/python/test_multihost.py and bench/multihost.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator, Sequence

IFNAME = "gocl0"
SUBNET = "10.251.0"


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if not shutil.which("ip"):
        return "no `ip` command (iproute2) to make network namespaces"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    name = f"gocl-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


@dataclass
class Host:
    ns: str
    addr: str  # address on IFNAME

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """argv run inside this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def link(self, up: bool) -> None:
        """Bring this host's end of the link up or down (down: packets are dropped, no reset)."""
        _ip("-n", self.ns, "link", "set", IFNAME, "up" if up else "down")


@contextlib.contextmanager
def two_hosts(tag: str = "") -> Iterator[list[Host]]:
    """Two namespaces joined by a veth pair; removed on exit."""
    uniq = f"{os.getpid() % 100000}{tag}"
    hosts = [Host(f"gocl-h{i}-{uniq}", f"{SUBNET}.{i + 1}") for i in range(2)]
    made: list[str] = []
    try:
        for i, h in enumerate(hosts):
            _ip("netns", "add", h.ns)
            made.append(h.ns)
            _ip("-n", h.ns, "link", "set", "lo", "up")
            # The decoy first (lower interface index): an address nobody else routes to.
            _ip("-n", h.ns, "link", "add", "dec0", "type", "veth", "peer", "name", "dec1")
            _ip("-n", h.ns, "addr", "add", f"10.252.{i}.1/24", "dev", "dec0")
            _ip("-n", h.ns, "link", "set", "dec0", "up")
            _ip("-n", h.ns, "link", "set", "dec1", "up")
        a, b = f"gva{uniq}"[:15], f"gvb{uniq}"[:15]
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        for h, end in zip(hosts, (a, b)):
            _ip("link", "set", end, "netns", h.ns)
            _ip("-n", h.ns, "link", "set", end, "name", IFNAME)
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", IFNAME)
            _ip("-n", h.ns, "link", "set", IFNAME, "up")
        yield hosts
    finally:
        for ns in made:  # deleting a namespace deletes its interfaces (and the veth peer)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
