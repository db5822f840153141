"""Connect on first use (GOCL_RUNTIME_CONNECT=1, the default) as a user's
processes see it: a rank holds the sockets its calls use, not one per peer;
a blocking send to a rank that has not reached the matching receive, over a
pair no call has connected yet, completes as it does over a full mesh; a
receive from any rank works; the full mesh stays one setting away."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gocl


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


@pytest.mark.ranks(8)
def test_a_ring_job_opens_fewer_sockets_than_the_mesh():
    os.environ.update(GOCL_ALGO="ring", GOCL_SHM_DISABLE="1")  # TCP pairs: a socket per connection
    world = gocl.Communicator.from_env()
    counts = {}
    for mode in ("0", "1", "0"):  # the mesh twice: world's own first split connects world's pairs
        os.environ["GOCL_RUNTIME_CONNECT"] = mode  # read by each init, a split's too
        before = _sockets()
        comm = world.split(0)
        x = np.ones(1 << 16, np.float32)
        for _ in range(3):
            comm.all_reduce(x)
        counts[mode] = _sockets() - before
        assert x[0] == comm.world_size ** 3, x[0]
        comm.barrier()
        comm.destroy()
    # The mesh: 2 sockets to each of 7 peers (14). On first use: the ring's
    # 2 peers and init's exchange (Bruck: r±1, r±2, r+4): 5 peers at most.
    assert counts["1"] < counts["0"], counts
    world.barrier()
    world.destroy()


@pytest.mark.ranks(8)
def test_a_send_completes_before_the_receiver_is_there():
    comm = gocl.Communicator.from_env()
    n, r = comm.world_size, comm.rank
    # r+3 is a pair init's exchange does not connect (Bruck's distances
    # are 1, 2, 4): each rank sends first, then receives: a cycle that
    # would deadlock if the link waited for both ends' calls.
    comm.send(np.full(16, r, np.int32), (r + 3) % n)
    got = np.empty(16, np.int32)
    comm.recv(got, (r - 3) % n)
    assert (got == (r - 3) % n).all(), got
    comm.barrier()
    comm.destroy()


@pytest.mark.ranks(4)
def test_a_receive_from_any_rank_connects_every_rank():
    comm = gocl.Communicator.from_env()
    if comm.rank == 0:
        seen = set()
        for _ in range(comm.world_size - 1):
            buf = np.empty(4, np.int64)
            comm.recv(buf)
            seen.add(int(buf[0]))
        assert seen == set(range(1, comm.world_size)), seen
    else:
        comm.send(np.full(4, comm.rank, np.int64), 0)
    comm.barrier()
    comm.destroy()
