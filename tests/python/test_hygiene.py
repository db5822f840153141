"""Resource hygiene, counted: this process is rank 0 of 3 (rank 1 a process
over shared memory, rank 2 one over TCP: tests/python/hygiene_peer.py).
File descriptors, threads, shared-memory segments (memfd mappings, /dev/shm
entries) and listening ports return to their counts after destroy, after
abort (also while the peers wait in a collective), and after a peer is
killed; many collectives and init/destroy cycles keep resident memory flat.
Short here (growth after a warm-up under 4 MiB per process);
GOCL_TEST_LONG=1 (`make test-reliability`) runs 100,000 collectives and 1,000
init/destroy cycles and bounds the slopes of private RSS (RssAnon; the
shared-memory rings' pages, RssShmem, are resident once touched and bounded
by the rings' size, so they are reported, not fitted).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gocl

HERE = Path(__file__).resolve().parent
LONG = os.environ.get("GOCL_TEST_LONG") == "1"
WORLD = 3
THREAD_SLACK = 2


def _listening_inodes() -> set[str]:
    out = set()
    for name in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                out |= {ln.split()[9] for ln in f if ln.split()[3] == "0A"}
        except OSError:
            pass
    return out


def counts() -> dict[str, int]:
    """What this process holds now."""
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    listening = _listening_inodes()
    with open("/proc/self/maps") as f:
        memfd_maps = sum("/memfd:" in ln for ln in f)
    return {
        "fds": len(fds),
        "threads": len(os.listdir("/proc/self/task")),
        "memfd mappings": memfd_maps,
        "memfd fds": sum(x.startswith("/memfd:") for x in fds),
        "/dev/shm entries": len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0,
        "listening ports": sum(x.startswith("socket:[") and x[8:-1] in listening for x in fds),
    }


def rss_kib(pid: int | str = "self") -> tuple[int, int]:
    """(RssAnon, RssShmem) in KiB: private memory (where a leak shows), and the
    shared-memory rings' pages, resident once touched (bounded by their size)."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(ln.split(":", 1) for ln in f if ln.startswith("Rss"))
    return int(fields["RssAnon"].split()[0]), int(fields["RssShmem"].split()[0])


def settle(base: dict[str, int], what: str) -> None:
    """Counts return to base (released resources may close a moment later).
    OS threads are the Go runtime's: it keeps idle ones for reuse and may
    start one more when a wait meets a busy machine, so they are bounded
    (base + THREAD_SLACK, base taken after a warm-up cycle) rather than
    returned; goroutines are counted exactly in runtime/comm's Go test."""
    deadline = time.monotonic() + 5
    while True:
        now = counts()
        diff = {k: (base[k], now[k]) for k in base
                if (now[k] > base[k] + THREAD_SLACK if k == "threads" else now[k] != base[k])}
        if not diff or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not diff, f"after {what}: (before, after) = {diff}"


class Peers:
    """Ranks 1 (shared memory with rank 0) and 2 (GOCL_SHM_DISABLE=1: TCP)."""

    def __init__(self):
        self.procs = []
        for rank in (1, 2):
            env = dict(os.environ, GOCL_SHM_DISABLE="1" if rank == 2 else "0")
            self.procs.append(subprocess.Popen([sys.executable, str(HERE / "hygiene_peer.py")], env=env,
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    def send(self, line: str, ranks=(1, 2)) -> None:
        for r in ranks:
            p = self.procs[r - 1]
            p.stdin.write(line.format(rank=r) + "\n")
            p.stdin.flush()

    def replies(self, ranks=(1, 2)) -> list[str]:
        return [self.procs[r - 1].stdout.readline().strip() for r in ranks]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.stdin.write("exit\n")
                    p.stdin.close()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def peers():
    p = Peers()
    yield p
    p.close()


def init(peers: Peers) -> gocl.Communicator:
    uid = gocl.unique_id()
    peers.send(f"init {uid.hex()} {{rank}} {WORLD}")
    comm = gocl.Communicator(uid, 0, WORLD, timeout=20)
    assert peers.replies() == ["ok", "ok"]
    return comm


def all_reduces(comm: gocl.Communicator, peers: Peers, k: int, count: int) -> None:
    peers.send(f"ar {k} {count}")
    x = np.ones(count, np.float32)
    for _ in range(k):
        comm.all_reduce(np.ones(count, np.float32), out=x)
    assert x[0] == WORLD
    assert peers.replies() == ["ok", "ok"]


def cycle(peers: Peers, end: str = "destroy") -> None:
    comm = init(peers)
    all_reduces(comm, peers, 5, 3)
    all_reduces(comm, peers, 2, 300_001)  # large: the data ring and striped sockets
    getattr(comm, end)()
    peers.send(end)
    assert peers.replies() == ["ok", "ok"]


def test_counts_return_after_destroy_abort_and_a_killed_peer(peers):
    cycle(peers)  # warm-up: the library, Go's threads, numpy
    base = counts()
    cycle(peers, "destroy")
    settle(base, "destroy")
    cycle(peers, "abort")
    settle(base, "abort")

    # rank 0 aborts while ranks 1 and 2 wait for it in a collective
    comm = init(peers)
    peers.send("ar 1 1000")
    time.sleep(0.2)
    comm.abort()
    assert all(r.startswith("err ") for r in peers.replies()), "the peers' collective did not fail"
    peers.send("abort")
    peers.replies()
    settle(base, "abort while the peers waited")

    # a peer is killed: rank 0's next collective fails; then it is destroyed
    comm = init(peers)
    all_reduces(comm, peers, 3, 1000)
    peers.procs[1].send_signal(signal.SIGKILL)
    peers.procs[1].wait()
    peers.send("ar 1 1000", ranks=(1,))
    with pytest.raises(gocl.GoclError, match="rank 2"):
        comm.all_reduce(np.ones(1000, np.float32))
    assert peers.replies(ranks=(1,))[0].startswith("err ")
    comm.destroy()
    peers.send("destroy", ranks=(1,))
    peers.replies(ranks=(1,))
    settle(base, "a killed peer")


def slope(samples: list[tuple[int, int]]) -> float:
    """Least-squares KiB per step over the second half (after warm-up)."""
    xs, ys = zip(*samples[len(samples) // 2:])
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def test_memory_stays_flat(peers):
    calls, cycles = (100_000, 1_000) if LONG else (2_000, 20)
    for _ in range(2):  # warm-up: Python's and Go's allocators reach their working sizes
        comm = init(peers)
        all_reduces(comm, peers, 500, 8)
        comm.destroy()
        peers.send("destroy")
        peers.replies()
    comm = init(peers)
    pids = ["self", peers.procs[0].pid, peers.procs[1].pid]
    step = calls // 20
    call_rss = {p: [] for p in pids}
    for i in range(0, calls, step):
        all_reduces(comm, peers, step, 8)
        for p in pids:
            call_rss[p].append((i + step, rss_kib(p)))
    comm.destroy()
    peers.send("destroy")
    peers.replies()
    every = max(1, cycles // 20)
    cycle_rss = {p: [] for p in pids}
    for i in range(cycles):
        comm = init(peers)
        all_reduces(comm, peers, 1, 8)
        comm.destroy()
        peers.send("destroy")
        assert peers.replies() == ["ok", "ok"]
        if (i + 1) % every == 0:
            for p in pids:
                cycle_rss[p].append((i + 1, rss_kib(p)))
    names = {"self": "rank 0 (this process)", pids[1]: "rank 1 (shm)", pids[2]: "rank 2 (TCP)"}
    report, flat = [], True
    for p in pids:
        anon_calls = [(x, a) for x, (a, _) in call_rss[p]]
        anon_cycles = [(x, a) for x, (a, _) in cycle_rss[p]]
        per_call = slope(anon_calls) * 1000  # KiB per 1,000 calls
        per_cycle = slope(anon_cycles)  # KiB per init/destroy cycle
        shm = max(s for _, (_, s) in call_rss[p] + cycle_rss[p])
        report.append(f"{names[p]}: private RSS {per_call:+.2f} KiB per 1,000 collectives (ends at {anon_calls[-1][1]} KiB), "
                      f"{per_cycle:+.2f} KiB per init/destroy cycle (ends at {anon_cycles[-1][1]} KiB); "
                      f"shared-memory rings resident at most {shm} KiB")
        if LONG:  # flat: under 2 KiB per 1,000 calls and 4 KiB per cycle (one leaked data ring is 1 MiB)
            flat &= per_call < 2 and per_cycle < 4
        else:  # too short for a slope (the GC's sawtooth is ~1 MiB): bound the growth instead
            anon = [a for _, a in anon_calls + anon_cycles]
            flat &= max(anon) - anon[0] < 4096
    print("\n".join(["", f"memory over {calls} collectives and {cycles} init/destroy cycles:", *report]))
    assert flat, "\n".join(report)
