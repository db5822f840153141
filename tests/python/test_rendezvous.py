"""gocl._rendezvous: how ranks come to hold one unique id.

The TCP carrier (Communicator.from_env outside torchrun): its protocol and
its timeouts. The store carrier (torch groups, from_env under torchrun): the
key scheme, a fresh round for each incarnation of a communicator on a store
that outlives it, and bounded waits. End to end: from_env under torchrun.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import gocl
from gocl import _rendezvous as rv


SECRET = "test-secret-0123456789-abcdefghij"


def test_tcp_exchange_protocol():
    """goclExchangeUniqueId, as from_env calls it: rank 0's exact 128 bytes
    reach every rank (over a name too), a world-size mismatch is refused
    naming both sizes, a rank of another round is told to wait, a weak
    secret is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with ThreadPoolExecutor(4) as pool:
        rank0 = pool.submit(rv.exchange, "127.0.0.1", port, 0, 3, 7, 20, SECRET)
        with pytest.raises(gocl.InvalidArgumentError, match="rank 2 has WORLD_SIZE=4 but rank 0 has WORLD_SIZE=3"):
            rv.exchange("127.0.0.1", port, 2, 4, 7, 5, SECRET)
        with pytest.raises(gocl.GoclTimeoutError, match="rank 0 is serving another from_env round"):
            rv.exchange("127.0.0.1", port, 2, 3, 8, 0.5, SECRET)
        one = pool.submit(rv.exchange, "127.0.0.1", port, 1, 3, 7, 5, SECRET)
        two = pool.submit(rv.exchange, "localhost", port, 2, 3, 7, 5, SECRET)
        uid = rank0.result(timeout=30)
        assert len(uid) == 128 and one.result(timeout=30) == uid and two.result(timeout=30) == uid
    with pytest.raises(gocl.InvalidArgumentError, match="GOCL_RENDEZVOUS_SECRET has 6 characters"):
        rv.exchange("127.0.0.1", port, 1, 2, 1, 1, "s3cret")


def test_from_env_timeouts_name_what_they_waited_for(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("GOCL_MASTER_PORT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    monkeypatch.setenv("RANK", "1")
    start = time.monotonic()
    with pytest.raises(gocl.GoclTimeoutError, match=rf"rank 1 timed out waiting for rank 0 to serve the "
                                                    rf"unique id at 127.0.0.1:{port} \(MASTER_ADDR:MASTER_PORT\)"):
        gocl.Communicator.from_env(timeout=1)
    assert time.monotonic() - start < 5
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(gocl.GoclTimeoutError, match=r"rank 0 timed out waiting for rank\(s\) 1 to fetch"):
        gocl.Communicator.from_env(timeout=datetime.timedelta(seconds=1))
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(gocl.InvalidArgumentError, match=r"RANK=2 is not in \[0, WORLD_SIZE=2\)"):
        gocl.Communicator.from_env(timeout=1)
    monkeypatch.delenv("RANK")
    with pytest.raises(gocl.InvalidArgumentError, match=r"\$RANK is not set"):
        gocl.Communicator.from_env(timeout=1)


def test_timeout_seconds():
    assert rv.seconds(2) == 2.0
    assert rv.seconds(datetime.timedelta(milliseconds=1500)) == 1.5
    assert rv.seconds(0) == float("inf")  # 0: no limit, as a communicator's timeout
    assert rv.seconds(None) == rv.default_timeout()


# ------------------------------------------------------------ store carrier

def _store():
    dist = pytest.importorskip("torch.distributed")
    return dist.HashStore()


def _exchange_all(store, size: int, scope: str, timeout: float = 20) -> list[bytes]:
    """size ranks (threads) meet through store; each rank's id."""
    with ThreadPoolExecutor(size) as pool:
        futs = [pool.submit(rv.store_exchange, store, r, size, scope, timeout, f"rank {r}") for r in range(size)]
        return [f.result() for f in futs]


def test_store_exchange_rounds_and_keys():
    """Every rank gets rank 0's id under gocl/unique_id/<scope>/<round>; the
    same scope met again on the same store (a group re-created after
    destroy_process_group) is a new round with a fresh id; another scope is
    apart."""
    store = _store()
    first = _exchange_all(store, 3, "g/[0,1,2]")
    assert len(set(first)) == 1 and len(first[0]) == 128
    assert bytes(store.get("gocl/unique_id/g/[0,1,2]/0")) == first[0]
    assert int(store.add("gocl/unique_id/g/[0,1,2]/joins", 0)) == 3
    second = _exchange_all(store, 3, "g/[0,1,2]")
    assert len(set(second)) == 1 and second[0] != first[0]
    assert bytes(store.get("gocl/unique_id/g/[0,1,2]/1")) == second[0]
    other = _exchange_all(store, 2, "h/[0,1]")
    assert len(set(other)) == 1 and other[0] not in (first[0], second[0])
    # the ids are real: the ranks of one round form a communicator
    uid = _exchange_all(store, 2, "comm")[0]
    with ThreadPoolExecutor(2) as pool:
        comms = list(pool.map(lambda r: gocl.Communicator(uid, r, 2), range(2)))
    try:
        import numpy as np

        outs = list(ThreadPoolExecutor(2).map(lambda c: c.all_reduce(np.full(3, c.rank + 1.0)), comms))
        assert all((o == 3.0).all() for o in outs)
    finally:
        for c in comms:
            c.destroy()


def test_store_exchange_waits_are_bounded():
    store = _store()
    start = time.monotonic()
    with pytest.raises(gocl.GoclTimeoutError,
                       match=r"^rank 1 of g: timed out after 0.5 s waiting for the group's rank 0 \(global rank 4\) "
                             r"to publish the gocl unique id under store key 'gocl/unique_id/g/0'"):
        rv.store_exchange(store, 1, 2, "g", 0.5, "rank 1 of g", "the group's rank 0 (global rank 4)")
    assert time.monotonic() - start < 5
    store.set("gocl/unique_id/bad/0", b"short")
    store.add("gocl/unique_id/bad/joins", 1)  # rank 0 joined (and wrote something else)
    with pytest.raises(gocl.InvalidUsageError, match=r"store key 'gocl/unique_id/bad/0' holds 5 bytes, not a 128"):
        rv.store_exchange(store, 1, 2, "bad", 5, "rank 1")


def test_from_env_under_torchrun(tmp_path):
    """torchrun's agent owns MASTER_PORT: from_env passes the id through its
    store (two rounds in the same processes)."""
    pytest.importorskip("torch.distributed.run")
    script = tmp_path / "under_torchrun.py"
    script.write_text(
        "import numpy as np, gocl\n"
        "for _ in range(2):\n"
        "    with gocl.Communicator.from_env(timeout=60) as comm:\n"
        "        print('sum', comm.all_reduce(np.full(3, comm.rank + 1.0))[0], flush=True)\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("3.0") == 4, r.stdout  # (two ranks may print into one line)
