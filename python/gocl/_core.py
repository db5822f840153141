"""The thin layer over the C API that the numpy API and the torch backend
share: communicators, collectives on raw pointers, groups, streams and
events. Pointers are ints (numpy ``ctypes.data``, torch ``data_ptr()``);
lengths are element counts; dtypes and ops are gocl's enum values.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Iterator

from . import _lib
from .errors import error_for

# goclDataType_t
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
# goclRedOp_t
SUM, PROD, MAX, MIN, AVG = range(5)
SPLIT_NOCOLOR = -1
SHRINK_DEFAULT, SHRINK_ABORT = 0, 1
SUCCESS, IN_PROGRESS = 0, 7


def check(rc: int, comm: int | None = None) -> None:
    """Raise the GoclError subclass for rc, with goclGetLastError's sentence."""
    if rc == SUCCESS:
        return
    lib = _lib.lib()
    msg = lib.goclGetLastError(comm)
    if not msg:
        msg = lib.goclGetErrorString(rc)
    raise error_for(rc, (msg or b"").decode("utf-8", "replace"))


def version() -> int:
    v = ctypes.c_int()
    check(_lib.lib().goclGetVersion(ctypes.byref(v)))
    return v.value


def unique_id(host: str | None = None) -> bytes:
    """A new 128-byte id; starts the rendezvous service in this process, on
    host's interface when host (MASTER_ADDR) is an address of this machine
    (loopback: the job stays on loopback)."""
    uid = _lib.UniqueId()
    if host:
        check(_lib.lib().goclGetUniqueIdAt(ctypes.byref(uid), host.encode()))
    else:
        check(_lib.lib().goclGetUniqueId(ctypes.byref(uid)))
    return uid.to_bytes()


def exchange_unique_id(host: str, port: int, rank: int, nranks: int, round_: int, secret: str,
                       timeout: float) -> bytes:
    """goclExchangeUniqueId: the id of a launcher's world through rank 0 at
    host:port, proving secret ("" : none); timeout in seconds, 0: none."""
    uid = _lib.UniqueId()
    check(_lib.lib().goclExchangeUniqueId(ctypes.byref(uid), host.encode(), port, rank, nranks, round_,
                                          secret.encode(), float(timeout)))
    return uid.to_bytes()


def _timeout_arg(timeout, rank: int) -> float | None:
    """Seconds as a float from a number or a datetime.timedelta (None stays None)."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise ValueError(f"rank {rank}: timeout is {timeout!r}: pass seconds (a number or a timedelta), "
                         "or None for GOCL_TIMEOUT") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"rank {rank}: timeout is {timeout!r}: pass seconds >= 0 (0: no limit), "
                         "or None for GOCL_TIMEOUT")
    return seconds


class Comm:
    """One rank's communicator handle."""

    def __init__(self, handle: int):
        self.handle = handle
        self.rank = self._query(_lib.lib().goclCommUserRank)
        self.size = self._query(_lib.lib().goclCommCount)

    @classmethod
    def init_rank(cls, uid: bytes, nranks: int, rank: int, timeout: float | None = None) -> "Comm":
        """goclCommInitRankConfig. timeout: seconds any wait on a peer may take
        (init and every operation; 0: no limit); None: GOCL_TIMEOUT."""
        if len(uid) != _lib.UNIQUE_ID_BYTES:
            raise ValueError(f"unique id must be {_lib.UNIQUE_ID_BYTES} bytes, got {len(uid)}")
        h = ctypes.c_void_p()
        cfg = _lib.config(timeout=_timeout_arg(timeout, rank))
        check(_lib.lib().goclCommInitRankConfig(ctypes.byref(h), nranks, _lib.UniqueId.from_bytes(uid), rank,
                                                ctypes.byref(cfg)))
        return cls(h.value)

    @classmethod
    def init_all(cls, n: int) -> list["Comm"]:
        hs = (ctypes.c_void_p * n)()
        check(_lib.lib().goclCommInitAll(hs, n, None))
        return [cls(h) for h in hs]

    def _query(self, fn) -> int:
        v = ctypes.c_int()
        check(fn(self.handle, ctypes.byref(v)), self.handle)
        return v.value

    def _call(self, rc: int) -> None:
        check(rc, self.handle)

    # collectives: pointers are ints, counts are elements
    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int | None = None):
        self._call(_lib.lib().goclAllReduce(send, recv, count, dtype, op, self.handle, stream))

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, stream: int | None = None):
        self._call(_lib.lib().goclBroadcast(send, recv, count, dtype, root, self.handle, stream))

    def reduce(self, send: int, recv: int, count: int, dtype: int, op: int, root: int, stream: int | None = None):
        self._call(_lib.lib().goclReduce(send, recv, count, dtype, op, root, self.handle, stream))

    def all_gather(self, send: int, recv: int, count: int, dtype: int, stream: int | None = None):
        self._call(_lib.lib().goclAllGather(send, recv, count, dtype, self.handle, stream))

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int | None = None):
        self._call(_lib.lib().goclReduceScatter(send, recv, count, dtype, op, self.handle, stream))

    def all_to_all(self, send: int, recv: int, count: int, dtype: int, stream: int | None = None):
        self._call(_lib.lib().goclAlltoAll(send, recv, count, dtype, self.handle, stream))

    def gather(self, send: int, recv: int, count: int, dtype: int, root: int, stream: int | None = None):
        self._call(_lib.lib().goclGather(send, recv, count, dtype, root, self.handle, stream))

    def scatter(self, send: int, recv: int, count: int, dtype: int, root: int, stream: int | None = None):
        self._call(_lib.lib().goclScatter(send, recv, count, dtype, root, self.handle, stream))

    def send(self, buf: int, count: int, dtype: int, peer: int, stream: int | None = None):
        self._call(_lib.lib().goclSend(buf, count, dtype, peer, self.handle, stream))

    def recv(self, buf: int, count: int, dtype: int, peer: int, stream: int | None = None):
        self._call(_lib.lib().goclRecv(buf, count, dtype, peer, self.handle, stream))

    def dump_trace(self, path: str | None = None) -> None:
        """goclCommDumpTrace: append the flight recorder to path (None: GOCL_TRACE_FILE)."""
        self._call(_lib.lib().goclCommDumpTrace(self.handle, None if path is None else os.fsencode(path)))

    def recv_any(self, buf: int, count: int, dtype: int) -> int:
        """Blocking receive from whichever rank sends first; returns its rank."""
        peer = ctypes.c_int(-1)
        self._call(_lib.lib().goclRecvAny(buf, count, dtype, ctypes.byref(peer), self.handle, None))
        return peer.value

    def premul_sum(self, scalar: bytes, dtype: int) -> int:
        """A custom op scaling inputs by scalar (one element of dtype, raw bytes)."""
        op = ctypes.c_int()
        buf = ctypes.create_string_buffer(scalar, len(scalar))
        self._call(_lib.lib().goclRedOpCreatePreMulSum(ctypes.byref(op), buf, dtype, 1, self.handle))
        return op.value

    def destroy_op(self, op: int) -> None:
        self._call(_lib.lib().goclRedOpDestroy(op, self.handle))

    def split(self, color: int, key: int, timeout: float | None = None) -> "Comm | None":
        """goclCommSplit; timeout as in init_rank (None: keep this comm's)."""
        h = ctypes.c_void_p()
        cfg = _lib.config(timeout=_timeout_arg(timeout, self.rank))
        self._call(_lib.lib().goclCommSplit(self.handle, color, key, ctypes.byref(h), ctypes.byref(cfg)))
        return Comm(h.value) if h.value else None

    def shrink(self, exclude: list[int] | None, flags: int, timeout: float | None = None) -> "Comm":
        """goclCommShrink; exclude None: the survivors agree on who is gone."""
        h = ctypes.c_void_p()
        cfg = _lib.config(timeout=_timeout_arg(timeout, self.rank))
        ranks = None if exclude is None else (ctypes.c_int * max(len(exclude), 1))(*exclude)
        self._call(_lib.lib().goclCommShrink(self.handle, ranks, 0 if exclude is None else len(exclude),
                                             ctypes.byref(h), ctypes.byref(cfg), flags))
        return Comm(h.value)

    def revoke(self) -> None:
        self._call(_lib.lib().goclCommRevoke(self.handle, 0))

    def grow_id(self) -> bytes:
        """goclCommGetUniqueId: the id new ranks join a grow with."""
        uid = _lib.UniqueId()
        self._call(_lib.lib().goclCommGetUniqueId(self.handle, ctypes.byref(uid)))
        return uid.to_bytes()

    def grow(self, nranks: int, uid: bytes | None, timeout: float | None = None) -> "Comm":
        """goclCommGrow on an existing rank (it keeps its rank)."""
        h = ctypes.c_void_p()
        cfg = _lib.config(timeout=_timeout_arg(timeout, self.rank))
        ref = None if uid is None else ctypes.byref(_lib.UniqueId.from_bytes(uid))
        self._call(_lib.lib().goclCommGrow(self.handle, nranks, ref, -1, ctypes.byref(h), ctypes.byref(cfg)))
        return Comm(h.value)

    @classmethod
    def grow_join(cls, uid: bytes, nranks: int, rank: int, timeout: float | None = None) -> "Comm":
        """goclCommGrow on a new rank (comm NULL)."""
        if len(uid) != _lib.UNIQUE_ID_BYTES:
            raise ValueError(f"unique id must be {_lib.UNIQUE_ID_BYTES} bytes, got {len(uid)}")
        h = ctypes.c_void_p()
        cfg = _lib.config(timeout=_timeout_arg(timeout, rank))
        check(_lib.lib().goclCommGrow(None, nranks, ctypes.byref(_lib.UniqueId.from_bytes(uid)), rank,
                                      ctypes.byref(h), ctypes.byref(cfg)))
        return cls(h.value)

    def async_error(self) -> int:
        v = ctypes.c_int()
        self._call(_lib.lib().goclCommGetAsyncError(self.handle, ctypes.byref(v)))
        return v.value

    def destroy(self) -> None:
        if self.handle:
            h, self.handle = self.handle, 0
            check(_lib.lib().goclCommDestroy(h))

    def abort(self) -> None:
        if self.handle:
            h, self.handle = self.handle, 0
            check(_lib.lib().goclCommAbort(h))


@contextlib.contextmanager
def group() -> Iterator[None]:
    """Calls inside run together at exit (goclGroupStart/End, per thread)."""
    check(_lib.lib().goclGroupStart())
    try:
        yield
    finally:
        check(_lib.lib().goclGroupEnd())


class Stream:
    """A gocl CPU stream: calls queued on it run in order, off this thread."""

    def __init__(self):
        h = ctypes.c_void_p()
        check(_lib.lib().goclStreamCreate(ctypes.byref(h)))
        self.handle = h.value

    def synchronize(self) -> None:
        check(_lib.lib().goclStreamSynchronize(self.handle))

    def query(self) -> bool:
        """True when idle; raises the first error of queued work."""
        rc = _lib.lib().goclStreamQuery(self.handle)
        if rc == IN_PROGRESS:
            return False
        check(rc)
        return True

    def destroy(self) -> None:
        if self.handle:
            h, self.handle = self.handle, 0
            check(_lib.lib().goclStreamDestroy(h))


class Event:
    """A mark in a stream: done once the work queued before it has run."""

    def __init__(self):
        h = ctypes.c_void_p()
        check(_lib.lib().goclEventCreate(ctypes.byref(h)))
        self.handle = h.value

    def record(self, stream: Stream) -> None:
        check(_lib.lib().goclEventRecord(self.handle, stream.handle))

    def query(self) -> bool:
        rc = _lib.lib().goclEventQuery(self.handle)
        if rc == IN_PROGRESS:
            return False
        check(rc)
        return True

    def done(self) -> bool:
        """The work before the event has finished, successfully or not
        (query() raises the first error of that work instead)."""
        return _lib.lib().goclEventQuery(self.handle) != IN_PROGRESS

    def synchronize(self) -> None:
        check(_lib.lib().goclEventSynchronize(self.handle))

    def destroy(self) -> None:
        if self.handle:
            h, self.handle = self.handle, 0
            check(_lib.lib().goclEventDestroy(h))
