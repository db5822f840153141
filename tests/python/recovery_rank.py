"""A rank of tests/python/test_recovery.py's kill-shrink-grow rounds.

    recovery_rank.py DIR WORLD ROUNDS --rank R             # a first rank (DIR/id holds the unique id)
    recovery_rank.py DIR WORLD ROUNDS --rank R --join K    # a replacement joining round K's grow

Each round: write DIR/ready-K-PID, then run random collectives (the same
sequence on every rank, each checked against numpy) until one fails, which
happens when the driver SIGKILLs a rank; then shrink with no list (the
survivors agree on who is gone; again if a rank dies during that), check
the shrunk communicator once the driver has written DIR/killed-K, grow it
back to WORLD with the replacements the driver starts (the shrunk
communicator's rank 0 writes DIR/grow-K, the id they join with), check
again, and write DIR/done-K-PID: the members' pids and this process's
resource counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import numpy as np

import gocl

TIMEOUT = 15


def put(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def wait_file(path: str, seconds: float = 60) -> str:
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"pid {os.getpid()}: {path} did not appear in {seconds} s")
        time.sleep(0.01)
    with open(path) as f:
        return f.read()


def counts() -> dict[str, int]:
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    with open("/proc/self/maps") as f:  # bytes, not mappings: the kernel merges and splits those
        spans = [ln.split()[0].split("-") for ln in f if "/memfd:" in ln]
    return {"fds": len(fds), "sockets": sum(x.startswith("socket:") for x in fds),
            "memfd fds": sum(x.startswith("/memfd:") for x in fds),
            "memfd KiB mapped": sum(int(b, 16) - int(a, 16) for a, b in spans) // 1024,
            "threads": len(os.listdir("/proc/self/task"))}


def collective(comm: gocl.Communicator, rng: random.Random) -> None:
    """One random collective of a random size, checked against numpy."""
    n, r = comm.world_size, comm.rank
    count = rng.choice([1, 7, 1000, 4099, 70001])
    kind = rng.choice(["all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_to_all"])
    inputs = [np.arange(count * n, dtype=np.float32) % 97 + q for q in range(n)]
    mine = inputs[r]
    if kind == "all_reduce":
        got, want = comm.all_reduce(mine[:count].copy()), sum(x[:count] for x in inputs)
    elif kind == "all_gather":
        got, want = comm.all_gather(mine[:count]), np.stack([x[:count] for x in inputs])
    elif kind == "broadcast":
        root = rng.randrange(n)
        got, want = comm.broadcast(mine[:count].copy(), root=root), inputs[root][:count]
    elif kind == "reduce_scatter":
        got = comm.reduce_scatter(mine.reshape(n, count))
        want = sum(inputs)[r * count:(r + 1) * count]
    else:
        got = comm.all_to_all(mine.reshape(n, count))
        want = np.stack([x.reshape(n, count)[r] for x in inputs])
    if not np.array_equal(np.asarray(got).reshape(want.shape), want):
        raise AssertionError(f"{kind} of {count} on rank {r} of {n}: wrong result")


def check(comm: gocl.Communicator, world: int) -> list[int]:
    """The communicator has world ranks that all-reduce right; returns its
    members' pids in rank order."""
    assert comm.world_size == world, (comm.world_size, world)
    pids = comm.all_gather(np.array([os.getpid()], np.int64)).reshape(-1)
    x = comm.all_reduce(np.full(5, comm.rank, np.float64))
    assert (x == sum(range(world))).all(), x
    return [int(p) for p in pids]


PEER_FAILED = (gocl.errors.RemoteError, gocl.errors.GoclTimeoutError)


def recover(comm: gocl.Communicator, killed: str) -> tuple[gocl.Communicator, list[int]]:
    """Shrink (the survivors agree on who is gone) until a communicator
    passes its check after the driver says the round's kills are done
    (the file killed): a rank killed after a shrink took it in fails the
    check on every rank, and they shrink again."""
    while True:
        shrunk = comm.shrink()
        comm.destroy()
        comm = shrunk
        wait_file(killed)
        try:
            return comm, check(comm, comm.world_size)
        except PEER_FAILED:
            continue


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("world", type=int)
    ap.add_argument("rounds", type=int)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--join", type=int, default=-1)
    a = ap.parse_args()
    d, world = a.dir, a.world
    if a.join < 0:
        comm = gocl.Communicator(bytes.fromhex(wait_file(f"{d}/id")), a.rank, world, timeout=TIMEOUT)
        first = 0
    else:
        comm = gocl.Communicator.join_grow(bytes.fromhex(wait_file(f"{d}/grow-{a.join}")), a.rank, world,
                                           timeout=TIMEOUT)
        put(f"{d}/done-{a.join}-{os.getpid()}", json.dumps({"pids": check(comm, world), "counts": counts()}))
        first = a.join + 1
    for k in range(first, a.rounds):
        put(f"{d}/ready-{k}-{os.getpid()}", "")
        rng = random.Random(k)
        end = time.monotonic() + 60
        try:
            while time.monotonic() < end:
                collective(comm, rng)
            raise AssertionError(f"round {k}: no rank was killed within 60 s")
        except PEER_FAILED as e:  # a peer died
            failure = str(e)
        shrunk, alive = recover(comm, f"{d}/killed-{k}")
        if shrunk.rank == 0:
            put(f"{d}/shrunk-{k}", json.dumps(alive))
            put(f"{d}/grow-{k}", shrunk.grow_id().hex())
        comm = shrunk.grow(world)
        shrunk.destroy()
        put(f"{d}/done-{k}-{os.getpid()}", json.dumps({"pids": check(comm, world), "counts": counts(),
                                                       "failure": failure[:300]}))
    comm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
