"""Rendezvous: how the ranks of a communicator come to hold the same 128-byte
unique id (the rest of the meeting, connections and their authentication, is
the library's bootstrap).

Two carriers, one rule: the communicator's rank 0 makes the id, the others
wait for it, every wait is bounded and fails naming what it waited for.

- **A c10d store** (:func:`store_exchange`): the torch backend's groups, and
  ``Communicator.from_env`` under torchrun, whose agent owns MASTER_PORT. The
  id is published under ``gocl/unique_id/<scope>/<round>``. A store can
  outlive a communicator (torchelastic's agent store survives
  ``destroy_process_group``, and torch's group names restart after it), so
  each rank counts its joins of the scope in ``gocl/unique_id/<scope>/joins``
  and every incarnation of the communicator gets its own round.
- **TCP on MASTER_ADDR:MASTER_PORT** (:func:`serve` / :func:`fetch`):
  ``Communicator.from_env`` and ``gocl.jax.init`` elsewhere. Rank 0 listens
  and hands the id to each rank that asks with the right magic, world size
  and generation (the count of from_env calls in the process, the same on
  every rank: a rank never takes an id meant for another round), until every
  rank has it. tests/c/launch.c speaks the same protocol.
"""

from __future__ import annotations

import datetime
import errno
import math
import os
import socket
import struct
import threading
import time

from . import _core, _lib
from . import world as world_mod
from .errors import GoclTimeoutError, InvalidArgumentError, InvalidUsageError

# ------------------------------------------------------------ settings


def default_timeout() -> float:
    """GOCL_TIMEOUT (else NCCL_TIMEOUT, else 600) in seconds, as the
    environment has it now: the bound of a rendezvous given no timeout."""
    raw = os.environ.get("GOCL_TIMEOUT") or os.environ.get("NCCL_TIMEOUT")
    try:
        return float(raw) if raw else 600.0
    except ValueError:
        return 600.0


def seconds(timeout) -> float:
    """A rendezvous bound in seconds from None (default_timeout()), a number
    or a timedelta; 0 or less: no limit (as a communicator's timeout)."""
    if timeout is None:
        return default_timeout()
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return s if s > 0 else math.inf


def _delta(s: float) -> datetime.timedelta:
    return datetime.timedelta(days=365) if math.isinf(s) else datetime.timedelta(seconds=s)


# ------------------------------------------------------------ the store carrier


def store_key(scope: str, round_: int | str) -> str:
    """The one key scheme: ``gocl/unique_id/<scope>/<round>`` (round "joins"
    holds the join counter)."""
    return f"gocl/unique_id/{scope}/{round_}"


def store_exchange(store, rank: int, size: int, scope: str, timeout, who: str, leader: str = "rank 0") -> bytes:
    """The unique id of this incarnation of the communicator ``scope`` through
    a c10d store: rank 0 makes and publishes it, the others wait up to
    ``timeout`` (seconds or a timedelta; see :func:`seconds`). ``who`` starts
    error messages ("Communicator.from_env on rank 1"), ``leader`` names rank 0
    in them."""
    joins = store.add(store_key(scope, "joins"), 1)
    key = store_key(scope, (joins - 1) // size)
    if rank == 0:
        uid = _core.unique_id()
        store.set(key, uid)
        return uid
    limit = seconds(timeout)
    try:
        store.wait([key], _delta(limit))
    except Exception as exc:  # noqa: BLE001 - torch raises its own DistStoreError
        raise GoclTimeoutError(
            f"{who}: timed out after {limit:g} s waiting for {leader} to publish the gocl unique id under store "
            f"key {key!r}: {exc}") from exc
    uid = bytes(store.get(key))
    if len(uid) != _lib.UNIQUE_ID_BYTES:
        raise InvalidUsageError(
            f"{who}: store key {key!r} holds {len(uid)} bytes, not a {_lib.UNIQUE_ID_BYTES}-byte gocl unique id "
            "(is another program using the store's gocl/ keys?)")
    return uid


# ------------------------------------------------------------ the TCP carrier

MAGIC = b"GOCLUID1"
HELLO = struct.Struct("!8siii")  # magic, rank, world size, generation
OK, RETRY, FATAL = 0, 1, 2

_generation_lock = threading.Lock()
_generation = 0


def next_generation() -> int:
    """Counts from_env calls in this process: every rank makes them in the
    same order, so a rank never takes a unique id meant for another round."""
    global _generation
    with _generation_lock:
        _generation += 1
        return _generation


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def listen(port: int) -> socket.socket:
    """Rank 0's listening socket on every address (IPv6 and IPv4 where the
    host has both)."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise
    return socket.create_server(("", port))


def serve(srv: socket.socket, uid: bytes, world: int, gen: int, deadline: float, where: str) -> None:
    """Rank 0: hand uid to ranks 1..world-1; returns when each has it."""
    missing = set(range(1, world))
    while missing:
        left = deadline - time.monotonic()
        if left <= 0:
            raise GoclTimeoutError(
                f"Communicator.from_env on rank 0: timed out waiting for rank(s) {sorted(missing)} to fetch the "
                f"unique id from {where} (MASTER_ADDR:MASTER_PORT); did every rank start, with WORLD_SIZE={world}?")
        srv.settimeout(min(left, 1.0))
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            continue
        with conn:
            try:
                conn.settimeout(max(0.1, min(5.0, deadline - time.monotonic())))
                magic, rank, their_world, their_gen = HELLO.unpack(_recv_exact(conn, HELLO.size))
                if magic != MAGIC:
                    continue  # a stranger: not a gocl rank
                if their_world != world:
                    msg = (f"rank {rank} has WORLD_SIZE={their_world} but rank 0 has WORLD_SIZE={world}").encode()
                    conn.sendall(bytes([FATAL]) + struct.pack("!H", len(msg)) + msg)
                    continue
                if their_gen != gen:
                    conn.sendall(bytes([RETRY]))
                    continue
                conn.sendall(bytes([OK]) + uid)
                missing.discard(rank)
            except (OSError, struct.error):
                continue


def fetch(addr: str, port: int, rank: int, world: int, gen: int, deadline: float, timeout: float) -> bytes:
    """Ranks > 0: ask rank 0 for the id until it answers or the deadline."""
    last: Exception | str = "no answer"
    pause = 0.02
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise GoclTimeoutError(
                f"Communicator.from_env on rank {rank}: timed out after {timeout:g} s waiting for rank 0 to serve "
                f"the unique id at {addr}:{port} (MASTER_ADDR:MASTER_PORT); last error: {last}. Is rank 0 running, "
                "with the same MASTER_ADDR and MASTER_PORT?")
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(left, 5.0))) as s:
                s.sendall(HELLO.pack(MAGIC, rank, world, gen))
                status = _recv_exact(s, 1)[0]
                if status == OK:
                    return _recv_exact(s, _lib.UNIQUE_ID_BYTES)
                if status == FATAL:
                    (n,) = struct.unpack("!H", _recv_exact(s, 2))
                    raise InvalidArgumentError(
                        f"Communicator.from_env on rank {rank}: {_recv_exact(s, n).decode('utf-8', 'replace')}")
                last = "rank 0 is serving another from_env round"
        except OSError as e:  # refused (not listening yet), reset, timeout
            last = e
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, 0.5)


# ------------------------------------------------------------ the environment


def from_env(timeout=None) -> tuple[bytes, int, int]:
    """The unique id, rank and world size of the launcher's world
    (gocl.world: torchrun or `gocl run`, mpirun, srun, a Kubernetes Indexed
    Job; see Communicator.from_env): through torchrun's agent store when it
    owns MASTER_PORT, else over TCP on rank 0's address and port."""
    w = world_mod.read(who="Communicator.from_env")
    if w is None:
        raise InvalidArgumentError(
            f"Communicator.from_env: $RANK is not set, nor any launcher's rank: start the ranks with "
            f"{world_mod.LAUNCHERS}, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    rank, world = w.rank, w.size
    limit = seconds(timeout)
    gen = next_generation()
    if world == 1:
        return _core.unique_id(), 0, 1
    addr = w.addr
    if not addr:
        raise InvalidArgumentError(
            f"Communicator.from_env on rank {rank}: $MASTER_ADDR is not set (the host of rank 0), and "
            f"{w.source} does not say where rank 0 runs")
    port = w.port
    gocl_port = os.environ.get("GOCL_MASTER_PORT")
    if not gocl_port and os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        import torch.distributed as dist

        store = dist.TCPStore(addr, port, is_master=False, timeout=_delta(limit))
        scope = f"from_env/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{gen}"
        uid = store_exchange(store, rank, world, scope, limit, f"Communicator.from_env on rank {rank}",
                             f"rank 0 (torchrun's store at {addr}:{port})")
        return uid, rank, world
    deadline = time.monotonic() + limit
    if rank > 0:
        return fetch(addr, port, rank, world, gen, deadline, limit), rank, world
    try:
        srv = listen(port)
    except OSError as e:
        hint = (" (is torch.distributed's store on it? set GOCL_MASTER_PORT to another free port)"
                if e.errno == errno.EADDRINUSE else "")
        raise InvalidUsageError(
            f"Communicator.from_env on rank 0: cannot listen on MASTER_PORT {port}: {e}{hint}") from e
    with srv:
        uid = _core.unique_id()
        serve(srv, uid, world, gen, deadline, f"{addr}:{port}")
    return uid, 0, world
