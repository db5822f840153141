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
- **TCP on MASTER_ADDR:MASTER_PORT** (:func:`exchange`, the library's
  goclExchangeUniqueId, which cmd/gocl-perf/launch.c calls too):
  ``Communicator.from_env`` and ``gocl.jax.init`` elsewhere. Rank 0 listens
  on MASTER_ADDR's interface and hands the id to each rank that proves the
  launcher's rendezvous secret (GOCL_RENDEZVOUS_SECRET) and asks with the
  right world size and generation (the count of from_env calls in the
  process, the same on every rank: a rank never takes an id meant for
  another round), until every rank has acknowledged it.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import threading

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
        uid = _core.unique_id(os.environ.get("MASTER_ADDR"))  # a job on loopback stays there
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

SECRET_VAR = "GOCL_RENDEZVOUS_SECRET"

_generation_lock = threading.Lock()
_generation = 0
_warned = False


def next_generation() -> int:
    """Counts from_env calls in this process: every rank makes them in the
    same order, so a rank never takes a unique id meant for another round."""
    global _generation
    with _generation_lock:
        _generation += 1
        return _generation


def _warn_open(addr: str, port: int) -> None:
    """The one line a job without a rendezvous secret gets (once)."""
    global _warned
    if _warned:
        return
    _warned = True
    print(f"gocl: {SECRET_VAR} is not set: any process that reaches {addr}:{port} (MASTER_ADDR:MASTER_PORT) can "
          "fetch this job's unique id and join or revoke it; start the ranks with `gocl run`, or export the same "
          "random secret on every rank (docs/SECURITY.md)", file=sys.stderr, flush=True)


def exchange(addr: str, port: int, rank: int, world: int, gen: int, limit: float, secret: str) -> bytes:
    """The id through rank 0 at addr:port (the library's goclExchangeUniqueId:
    both sides prove the secret, the id travels encrypted; rank 0 listens on
    MASTER_ADDR's interface and serves until every rank has acknowledged)."""
    if not secret:
        _warn_open(addr, port)
    return _core.exchange_unique_id(addr, port, rank, world, gen, secret, 0.0 if math.isinf(limit) else limit)


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
        return _core.unique_id(w.addr), 0, 1
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
    return exchange(addr, port, rank, world, gen, limit, os.environ.get(SECRET_VAR, "")), rank, world
