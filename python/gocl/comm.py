"""gocl on numpy arrays: :class:`Communicator`.

Semantics, in short (README.md has the table):

- Names follow torch.distributed / mpi4py: ``all_reduce(x, op="sum")``,
  ``rank``, ``world_size``.
- In place, like torch: ``all_reduce``, ``broadcast``, ``reduce`` (at the root)
  and ``recv`` write into ``x`` and return it, unless ``out=`` is given, in which
  case the result goes to ``out`` and ``x`` is only read. Collectives whose
  result has another shape (``all_gather``, ``reduce_scatter``, ``all_to_all``,
  ``gather``, ``scatter``) return a new array, or fill ``out=``.
- Arrays that are only read may be anything ``np.ascontiguousarray`` accepts:
  non-contiguous ones are copied. Arrays written into (``x`` of an in-place
  call, ``out``) must be C-contiguous, writeable numpy arrays; ``out`` needs the
  result's dtype and number of elements (any shape).
- Reductions take int8, uint8, int32, uint32, int64, uint64, float16, float32,
  float64, bfloat16 (``ml_dtypes.bfloat16``), and bool with ``max``/``min``
  (logical or / and). Data movement (broadcast, gathers, scatter, all_to_all,
  send/recv) takes any dtype without Python objects, moved as bytes.
- ``async_op=True`` queues the call on the communicator's gocl stream and
  returns a :class:`Work`; the arrays stay referenced until it completes.
- Errors raise :mod:`gocl.errors` exceptions with gocl's sentence (what
  failed, on which rank, what to do). Checks made here name the argument and
  the rank the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from operator import index
from typing import Any, Callable, Iterator

import numpy as np

from . import _core, _lib, _rendezvous
from ._sizes import elems
from .errors import GoclError, GoclTimeoutError, InvalidArgumentError, InvalidUsageError, error_for

__all__ = ["Communicator", "Work", "PreMulSum", "premul_sum", "group", "unique_id"]

# ------------------------------------------------------------------ dtypes

_REDUCIBLE = {
    np.dtype(np.int8): _core.INT8,
    np.dtype(np.uint8): _core.UINT8,
    np.dtype(np.int32): _core.INT32,
    np.dtype(np.uint32): _core.UINT32,
    np.dtype(np.int64): _core.INT64,
    np.dtype(np.uint64): _core.UINT64,
    np.dtype(np.float16): _core.FLOAT16,
    np.dtype(np.float32): _core.FLOAT32,
    np.dtype(np.float64): _core.FLOAT64,
}
_SUPPORTED_TEXT = ("int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, "
                   "bfloat16 (ml_dtypes.bfloat16), and bool with op max or min")

_OPS = {"sum": _core.SUM, "prod": _core.PROD, "max": _core.MAX, "min": _core.MIN, "avg": _core.AVG}


# (dtype, op as passed) -> (gocl dtype, gocl op) of every reduction the slow
# path (Communicator._reduction) has accepted: a call that hits this table
# skips the checks it already passed once. Filled as calls come (bfloat16 and
# spellings like "SUM" included); only str ops, which are hashable and never
# compare equal to another kind of op.
_FAST_REDUCE: dict[tuple[np.dtype, str], tuple[int, int]] = {}

# dtypes whose arrays export a buffer (ctypes' from_buffer: the cheap way to an
# array's address); ml_dtypes' types do not.
_BUFFERABLE: dict[np.dtype, bool] = {}


def _addr(a: np.ndarray) -> int:
    """The data address of a C-contiguous array. ``a.ctypes.data`` builds a
    ctypes helper object per call (~1 us); a writeable array's buffer gives it
    for a third of that."""
    if a.flags.writeable and a.nbytes and _BUFFERABLE.get(a.dtype, True):
        try:
            return ctypes.addressof(ctypes.c_char.from_buffer(a))
        except (TypeError, ValueError, BufferError):
            _BUFFERABLE[a.dtype] = False
    return a.ctypes.data


def _gocl_type(dt: np.dtype) -> int | None:
    """gocl's datatype for a numpy dtype, or None."""
    t = _REDUCIBLE.get(dt)
    if t is not None:
        return t
    # ml_dtypes.bfloat16 (no import needed: match it by name and size).
    if dt.name == "bfloat16" and dt.itemsize == 2 and dt.kind == "V":
        return _core.BFLOAT16
    return None


class PreMulSum:
    """A reduction that multiplies every rank's input by ``scalar``, then sums
    (NCCL's ncclRedOpCreatePreMulSum). Make it with :func:`premul_sum`; the
    scalar is converted to the array's dtype at each call."""

    __slots__ = ("scalar",)

    def __init__(self, scalar: Any):
        self.scalar = scalar

    def __repr__(self) -> str:
        return f"gocl.premul_sum({self.scalar!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PreMulSum) and other.scalar == self.scalar

    def __hash__(self) -> int:
        return hash(("premul_sum", self.scalar))


def premul_sum(scalar: Any) -> PreMulSum:
    """``op=gocl.premul_sum(s)``: every input is multiplied by s before the sum."""
    return PreMulSum(scalar)


def unique_id() -> bytes:
    """A new 128-byte unique id (loads the library and starts the rendezvous
    service in this process: call it on one rank, send the bytes to the others)."""
    return _core.unique_id()


# ------------------------------------------------------------------ groups

class _Local(threading.local):
    keep: list | None = None  # a class default: reading it costs no AttributeError


_tls = _Local()


def _group_keep() -> list | None:
    """The keep-alive list of this thread's open group, or None outside one."""
    return _tls.keep


@contextlib.contextmanager
def group() -> Iterator[None]:
    """Run the calls made inside together when the block exits
    (goclGroupStart/End, per thread, nestable).

    Use it for point-to-point exchanges (a ``send`` and a ``recv`` that must
    progress together) and to drive several ranks of :meth:`Communicator.local`
    from one thread. Results are only there after the block: arrays returned
    inside it are filled at its end. ``async_op`` is not allowed inside.
    """
    outer = _group_keep() is None
    if outer:
        _tls.keep = []
    try:
        with _core.group():
            yield
    finally:
        if outer:
            _tls.keep = None


# ------------------------------------------------------------------ work


class Work:
    """The handle of a call made with ``async_op=True``.

    ``wait()`` blocks until the call has run and returns its result (the array
    the synchronous call would have returned), raising the gocl error if it
    failed; ``is_completed()`` polls. Until then the communicator keeps the
    call's arrays alive, even if this handle is dropped.
    """

    def __init__(self, comm: "Communicator", name: str, event: _core.Event, keep: tuple, result: Any):
        self._comm = comm
        self._name = name
        self._event: _core.Event | None = event
        self._keep: tuple | None = keep
        self._result = result
        self._error: GoclError | None = None
        self._done = False

    def _finish(self, error: GoclError | None) -> None:
        if self._done:
            return
        self._done = True
        self._error = error
        self._keep = None
        if self._event is not None:
            ev, self._event = self._event, None
            with contextlib.suppress(GoclError):
                ev.destroy()

    def _poll(self) -> bool:
        if self._done:
            return True
        if self._event is not None and not self._event.done():
            return False
        self._comm._retire(self)
        return True

    def is_completed(self) -> bool:
        """True once the call has run (successfully or not); never blocks."""
        return self._poll()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the call has run; return its result or raise its error.

        ``timeout`` (seconds) bounds the wait here (GoclTimeoutError); gocl's
        own GOCL_TIMEOUT bounds the call in any case.
        """
        if not self._done:
            if timeout is None:
                assert self._event is not None
                self._event.synchronize()
            else:
                deadline = time.monotonic() + timeout
                pause = 1e-5
                while not self._poll():
                    if time.monotonic() >= deadline:
                        raise GoclTimeoutError(
                            f"{self._name} on rank {self._comm.rank}: not finished after Work.wait(timeout={timeout})")
                    time.sleep(pause)
                    pause = min(pause * 2, 0.01)
            self._comm._retire(self)
        if self._error is not None:
            raise self._error
        return self._result

    def result(self) -> Any:
        """The result (the same as ``wait()``)."""
        return self.wait()

    def exception(self) -> GoclError | None:
        """The error of a completed call, or None."""
        self._poll()
        return self._error

    def __repr__(self) -> str:
        state = "failed" if self._error else ("done" if self._done else "pending")
        return f"<gocl.Work {self._name} on rank {self._comm.rank}: {state}>"


# ------------------------------------------------------------ communicator


class Communicator:
    """One rank of a gocl communicator, operating on numpy arrays.

    Make one with ``Communicator(unique_id, rank, world_size)`` (every rank
    passes the same 128 bytes from :func:`gocl.unique_id`),
    :meth:`from_env` (torchrun-style environment) or :meth:`local` (n ranks in
    this process). Use it as a context manager: the block's end destroys it,
    or aborts it if the block raised, so that peers fail instead of waiting.

    ``timeout`` (seconds, or a timedelta; 0: no limit) bounds the init and
    every operation's wait on a peer; None takes GOCL_TIMEOUT (read from the
    environment as it is now, so a value set in ``os.environ`` counts).
    """

    def __init__(self, unique_id: bytes, rank: int, world_size: int, timeout: float | None = None):
        uid = bytes(unique_id)
        rank, world_size = index(rank), index(world_size)
        if len(uid) != _lib.UNIQUE_ID_BYTES:
            raise InvalidArgumentError(
                f"Communicator on rank {rank}: unique_id must be {_lib.UNIQUE_ID_BYTES} bytes "
                f"(from gocl.unique_id()), got {len(uid)}")
        self._setup(_core.Comm.init_rank(uid, world_size, rank, timeout=timeout))

    def _setup(self, c: _core.Comm) -> None:
        self._c = c
        self._rank = c.rank
        self._size = c.size
        self._stream: _core.Stream | None = None
        self._pending: list[Work] = []
        self._lock = threading.Lock()
        self._state = "ok"  # or "destroyed", "aborted"

    @classmethod
    def _wrap(cls, c: _core.Comm) -> "Communicator":
        self = cls.__new__(cls)
        self._setup(c)
        return self

    @classmethod
    def from_env(cls, timeout: float | None = None) -> "Communicator":
        """Join the communicator described by the environment: the world of
        whichever launcher started this process (gocl.world): torchrun's
        variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `gocl run` and
        the pytest plugin set them), mpirun's (OpenMPI, MPICH), srun's, or a
        Kubernetes Indexed Job's; MASTER_ADDR and MASTER_PORT win when set.

        Rank 0 makes the unique id and serves it over TCP on MASTER_PORT
        (GOCL_MASTER_PORT, if set, instead: for programs whose torch store
        already holds MASTER_PORT) until every rank has it; the others fetch it
        from MASTER_ADDR:MASTER_PORT. Under torchrun (whose agent owns
        MASTER_PORT) the id goes through torchrun's store instead. Every wait is
        bounded by ``timeout`` seconds (default: GOCL_TIMEOUT, else 600) and
        fails with GoclTimeoutError naming what it waited for; a ``timeout``
        given here also bounds the communicator's operations.
        """
        uid, rank, world = _rendezvous.from_env(timeout)
        return cls(uid, rank, world, timeout=timeout)

    @classmethod
    def local(cls, n: int) -> "list[Communicator]":
        """n communicators of one clique in this process (goclCommInitAll):
        ranks 0..n-1. Drive each from its own thread, or call all of them
        inside ``with gocl.group():`` from one thread."""
        n = index(n)
        if n < 1:
            raise InvalidArgumentError(f"Communicator.local: n must be at least 1, got {n}")
        return [cls._wrap(c) for c in _core.Comm.init_all(n)]

    # ----------------------------------------------------------- properties

    @property
    def rank(self) -> int:
        """This rank, in [0, world_size)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._size

    size = world_size

    @property
    def handle(self) -> int:
        """The goclComm_t, as an int (0 once destroyed), for C interop."""
        return self._c.handle

    def __repr__(self) -> str:
        state = "" if self._state == "ok" else f", {self._state}"
        return f"<gocl.Communicator rank {self._rank} of {self._size}{state}>"

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._state != "ok":
            return
        if exc_type is None:
            self.destroy()
        else:
            self.abort()

    # ------------------------------------------------------------- helpers

    def _err(self, name: str, text: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{name} on rank {self._rank}: {text}")

    def _usable(self, name: str) -> None:
        if self._state != "ok":
            raise InvalidUsageError(f"{name} on rank {self._rank}: the communicator was {self._state}")

    def _reduction(self, name: str, dt: np.dtype, op: Any) -> tuple[int, int, bytes | None]:
        """(gocl dtype, gocl op, premul scalar bytes or None) for a reduction."""
        if type(op) is str:
            fast = _FAST_REDUCE.get((dt, op))
            if fast is not None:  # accepted before: the checks below would pass again
                return fast[0], fast[1], None
        if isinstance(op, PreMulSum):
            opv, opname = -1, "premul_sum"
        elif isinstance(op, str) and op.lower() in _OPS:
            opname = op.lower()
            opv = _OPS[opname]
        elif isinstance(op, (int, np.integer)) and not isinstance(op, bool) and 0 <= int(op) < len(_OPS):
            opv = int(op)
            opname = list(_OPS)[opv]
        else:
            raise self._err(name, f"op {op!r} is not a reduction: use 'sum', 'prod', 'max', 'min', 'avg' "
                                  "or gocl.premul_sum(scalar)")
        if dt == np.bool_:
            if opname not in ("max", "min"):
                raise self._err(name, f"op {opname!r} on bool arrays is not defined: use 'max' (logical or) "
                                      "or 'min' (logical and), or cast to an integer dtype")
            if type(op) is str:
                _FAST_REDUCE[(dt, op)] = (_core.UINT8, opv)
            return _core.UINT8, opv, None
        t = _gocl_type(dt)
        if t is None:
            raise self._err(name, f"x has dtype {dt}, which gocl cannot reduce; supported: {_SUPPORTED_TEXT}")
        scalar = None
        if opv < 0:
            try:
                scalar = np.asarray(op.scalar).astype(dt).tobytes()
            except (TypeError, ValueError) as e:
                raise self._err(name, f"premul_sum scalar {op.scalar!r} does not convert to {dt}: {e}") from None
            if len(scalar) != dt.itemsize:
                raise self._err(name, f"premul_sum scalar must be a single number, got {op.scalar!r}")
        elif type(op) is str:
            _FAST_REDUCE[(dt, op)] = (t, opv)
        return t, opv, scalar

    def _movable(self, name: str, arg: str, dt: np.dtype) -> tuple[int, int]:
        """(gocl dtype, elements per array element) for data movement: any
        dtype without Python objects, as bytes when gocl has no such type."""
        if dt.hasobject:
            raise self._err(name, f"{arg} has dtype {dt}, which holds Python objects: gocl moves only raw data")
        t = _gocl_type(dt)
        if t is not None:
            return t, 1
        return _core.UINT8, dt.itemsize  # bool, int16, complex, structs, ...: as bytes

    def _input(self, name: str, arg: str, x: Any) -> np.ndarray:
        """An array gocl only reads: anything array-like, copied if not C-contiguous."""
        if x is None:
            raise self._err(name, f"{arg} is None")
        a = np.asarray(x)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
        if a.dtype.hasobject:
            raise self._err(name, f"{arg} has dtype {a.dtype}, which holds Python objects: gocl moves only raw data")
        return a

    def _writable(self, name: str, arg: str, x: Any, hint: str = "") -> np.ndarray:
        """An array gocl writes into: a C-contiguous, writeable numpy array."""
        if not isinstance(x, np.ndarray):
            raise self._err(name, f"{arg} must be a numpy array (gocl writes the result into it), "
                                  f"got {type(x).__name__}{hint}")
        if not x.flags.c_contiguous:
            raise self._err(name, f"{arg} is not C-contiguous (gocl writes the result into it): pass "
                                  f"np.ascontiguousarray({arg}) and use the returned array{hint}")
        if not x.flags.writeable:
            raise self._err(name, f"{arg} is read-only but gocl writes the result into it{hint}")
        if x.dtype.hasobject:
            raise self._err(name, f"{arg} has dtype {x.dtype}, which holds Python objects: gocl moves only raw data")
        return x

    def _out(self, name: str, out: Any, size: int, dtype: np.dtype, shape: tuple, what: str) -> np.ndarray:
        """Validate or allocate the result array."""
        if out is None:
            return np.empty(shape, dtype)
        out = self._writable(name, "out", out)
        if out.dtype != dtype:
            raise self._err(name, f"out has dtype {out.dtype} but {what} has dtype {dtype}")
        if out.size != size:
            raise self._err(name, f"out has shape {out.shape} ({out.size} elements) but {what} has "
                                  f"{size} elements (shape {shape})")
        return out

    @staticmethod
    def _ptr(a: np.ndarray | None) -> int | None:
        return None if a is None else _addr(a)

    def _prune(self) -> None:
        """Retire completed async work (releasing its arrays)."""
        if not self._pending:
            return
        for w in list(self._pending):
            if w._event is not None and w._event.done():
                self._retire(w)

    def _retire(self, w: Work, error: GoclError | None = None) -> None:
        """Mark w finished: its error is the communicator's failure, if any."""
        if w._done:
            return
        if error is None and self._state == "ok":
            error = self._async_error()
        w._finish(error)
        with self._lock:
            with contextlib.suppress(ValueError):
                self._pending.remove(w)

    def _async_error(self) -> GoclError | None:
        try:
            code = self._c.async_error()
        except GoclError as e:
            return e
        if code == _core.SUCCESS:
            return None
        msg = _lib.lib().goclGetLastError(self._c.handle) or _lib.lib().goclGetErrorString(code)
        return error_for(code, msg.decode("utf-8", "replace"))

    def _launch(self, name: str, call: Callable[[int | None], None], keep: tuple, result: Any,
                async_op: bool, scalar: bytes | None = None, dtype: int = 0) -> Any:
        """Run call(stream) now, inside the open group, or queued (async_op)."""
        self._usable(name)
        op = None
        if scalar is not None:
            op = self._c.premul_sum(scalar, dtype)
            call = (lambda f, o: (lambda s: f(s, o)))(call, op)
        try:
            if async_op:
                if _group_keep() is not None:
                    raise InvalidUsageError(
                        f"{name} on rank {self._rank}: async_op=True inside gocl.group() is not supported; "
                        "the group's end already runs the calls together")
                if self._stream is None:
                    self._stream = _core.Stream()
                call(self._stream.handle)
                ev = _core.Event()
                ev.record(self._stream)
                w = Work(self, name, ev, keep, result)
                with self._lock:
                    self._pending.append(w)
                return w
            keep_list = _group_keep()
            if keep_list is not None:
                keep_list.append(keep)  # buffers must live until the group's end
            call(None)
            self._prune()
            return result
        finally:
            if op is not None:
                # The call resolved the op when it was issued (queued work included).
                with contextlib.suppress(GoclError):
                    self._c.destroy_op(op)

    # --------------------------------------------------------- collectives

    def all_reduce(self, x: Any, op: Any = "sum", out: np.ndarray | None = None, async_op: bool = False) -> Any:
        """Reduce x over all ranks. In place (x is overwritten and returned)
        unless out is given, in which case x is only read and out is returned."""
        # Fast path: a synchronous call on C-contiguous numpy arrays, with a
        # dtype and op already accepted once. Anything else, and every error,
        # takes the checked path below.
        if type(x) is np.ndarray and type(op) is str and not async_op and self._state == "ok":
            fast = _FAST_REDUCE.get((x.dtype, op))
            if fast is not None and x.flags.c_contiguous:
                if out is None:
                    res = x if x.flags.writeable else None
                elif (type(out) is np.ndarray and out.dtype == x.dtype and out.size == x.size
                      and out.flags.c_contiguous and out.flags.writeable):
                    res = out
                else:
                    res = None
                if res is not None:
                    keep = _group_keep()
                    if keep is not None:
                        keep.append((x, res))  # buffers must live until the group's end
                    s = _addr(x)
                    h = self._c.handle
                    _core.check(_lib.lib().goclAllReduce(s, s if res is x else _addr(res), x.size, fast[0], fast[1],
                                                         h, None), h)
                    if self._pending:
                        self._prune()
                    return res
        name = "all_reduce"
        if out is None:
            x = self._writable(name, "x", x, "; or pass out=")
            send = recv = x
        else:
            send = self._input(name, "x", x)
            recv = self._out(name, out, send.size, send.dtype, send.shape, "x")
        t, opv, scalar = self._reduction(name, send.dtype, op)
        n = send.size
        s, r = self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st, o=opv: self._c.all_reduce(s, r, n, t, o, st),
                            (send, recv), recv, async_op, scalar, t)

    def broadcast(self, x: np.ndarray, root: int = 0, async_op: bool = False) -> Any:
        """Copy root's x into x on every rank (in place); returns x."""
        name = "broadcast"
        root = index(root)
        x = self._writable(name, "x", x)
        t, k = self._movable(name, "x", x.dtype)
        n, p = x.size * k, self._ptr(x)
        return self._launch(name, lambda st: self._c.broadcast(p, p, n, t, root, st), (x,), x, async_op)

    def reduce(self, x: Any, op: Any = "sum", root: int = 0, out: np.ndarray | None = None,
               async_op: bool = False) -> Any:
        """Reduce x over all ranks into root: in place at root (x, or out if
        given, holds the result and is returned); other ranks only read x and
        get None."""
        name = "reduce"
        root = index(root)
        at_root = self._rank == root
        if at_root and out is None:
            send = recv = self._writable(name, "x", x, "; or pass out=")
        else:
            send = self._input(name, "x", x)
            recv = self._out(name, out, send.size, send.dtype, send.shape, "x") if at_root else None
        t, opv, scalar = self._reduction(name, send.dtype, op)
        n = send.size
        s, r = self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st, o=opv: self._c.reduce(s, r, n, t, o, root, st),
                            (send, recv), recv, async_op, scalar, t)

    def all_gather(self, x: Any, out: np.ndarray | None = None, async_op: bool = False) -> Any:
        """Every rank's x, stacked: an array of shape (world_size, *x.shape)
        (or out: x's dtype, world_size * x.size elements, any shape)."""
        name = "all_gather"
        send = self._input(name, "x", x)
        shape = (self._size, *send.shape)
        recv = self._out(name, out, elems(name, send.size, self._size)[1], send.dtype, shape, "the gathered result")
        t, k = self._movable(name, "x", send.dtype)
        n, s, r = send.size * k, self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st: self._c.all_gather(s, r, n, t, st), (send, recv), recv, async_op)

    def reduce_scatter(self, x: Any, op: Any = "sum", out: np.ndarray | None = None,
                       async_op: bool = False) -> Any:
        """The inverse of all_gather: x has shape (world_size, *rest); block i
        of the reduction lands on rank i, shape rest. With out, x is cut into
        world_size equal flat blocks of out.size elements."""
        name = "reduce_scatter"
        send = self._input(name, "x", x)
        if out is None:
            if send.ndim == 0 or send.shape[0] != self._size:
                raise self._err(name, f"x has shape {send.shape} but must have shape (world_size={self._size}, ...): "
                                      "block i goes to rank i (or pass out= to cut x into flat blocks)")
            count = send.size // self._size
            recv = np.empty(send.shape[1:], send.dtype)
        else:
            recv = self._writable(name, "out", out)
            if recv.dtype != send.dtype:
                raise self._err(name, f"out has dtype {recv.dtype} but x has dtype {send.dtype}")
            want = elems(name, recv.size, self._size)[0]
            if send.size != want:
                raise self._err(name, f"x has {send.size} elements but must have world_size × out.size = "
                                      f"{self._size} × {recv.size} = {want}")
            count = recv.size
        t, opv, scalar = self._reduction(name, send.dtype, op)
        s, r = self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st, o=opv: self._c.reduce_scatter(s, r, count, t, o, st),
                            (send, recv), recv, async_op, scalar, t)

    def all_to_all(self, x: Any, out: np.ndarray | None = None, async_op: bool = False) -> Any:
        """x's first axis is cut into world_size equal blocks: block j goes to
        rank j; block i of the result (same shape as x) came from rank i."""
        name = "all_to_all"
        send = self._input(name, "x", x)
        if send.ndim == 0 or send.shape[0] % self._size:
            raise self._err(name, f"x has shape {send.shape}: its first axis must be a multiple of "
                                  f"world_size={self._size} (one block per rank)")
        count = send.size // self._size
        recv = self._out(name, out, elems(name, count, self._size)[1], send.dtype, send.shape, "x")
        if out is not None and np.shares_memory(recv, send):
            raise self._err(name, "out overlaps x: all_to_all cannot run in place, pass a separate out")
        t, k = self._movable(name, "x", send.dtype)
        n, s, r = count * k, self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st: self._c.all_to_all(s, r, n, t, st), (send, recv), recv, async_op)

    def gather(self, x: Any, root: int = 0, out: np.ndarray | None = None, async_op: bool = False) -> Any:
        """Every rank's x, stacked at root: shape (world_size, *x.shape) there
        (or out); None on the other ranks."""
        name = "gather"
        root = index(root)
        send = self._input(name, "x", x)
        recv = None
        if self._rank == root:
            recv = self._out(name, out, elems(name, send.size, self._size)[1], send.dtype, (self._size, *send.shape),
                             "the gathered result")
        t, k = self._movable(name, "x", send.dtype)
        n, s, r = send.size * k, self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st: self._c.gather(s, r, n, t, root, st), (send, recv), recv, async_op)

    def scatter(self, x: Any = None, root: int = 0, out: np.ndarray | None = None, async_op: bool = False) -> Any:
        """Block i of root's x (shape (world_size, *rest)) lands on rank i and
        is returned (shape rest), or lands in out (root's x then holds
        world_size × out.size elements). Other ranks need out, or an x of
        root's shape and dtype to size the result (its contents are unused)."""
        name = "scatter"
        root = index(root)
        send = None
        if self._rank == root:
            send = self._input(name, "x", x)
            src = send
        elif out is None:
            if x is None:
                raise self._err(name, f"rank {self._rank} is not the root: pass out= (the array to receive into), "
                                      "or an x of the root's shape and dtype")
            src = np.asarray(x)
        else:
            src = None
        if out is None:
            if src.ndim == 0 or src.shape[0] != self._size:
                raise self._err(name, f"x has shape {src.shape} but must have shape (world_size={self._size}, ...): "
                                      "block i goes to rank i (or pass out=)")
            recv = np.empty(src.shape[1:], src.dtype)
        else:
            recv = self._writable(name, "out", out)
            if send is not None:
                if recv.dtype != send.dtype:
                    raise self._err(name, f"out has dtype {recv.dtype} but x has dtype {send.dtype}")
                want = elems(name, recv.size, self._size)[0]
                if send.size != want:
                    raise self._err(name, f"x has {send.size} elements but must have world_size × out.size = "
                                          f"{self._size} × {recv.size} = {want}")
        t, k = self._movable(name, "out", recv.dtype)
        n, s, r = recv.size * k, self._ptr(send), self._ptr(recv)
        return self._launch(name, lambda st: self._c.scatter(s, r, n, t, root, st), (send, recv), recv, async_op)

    def send(self, x: Any, peer: int, async_op: bool = False) -> Any:
        """Send x to peer (which calls recv with the same size and dtype).
        Sends to one peer arrive in order. Exchanges (both ranks sending) go
        inside ``with gocl.group():``. Returns None (or a Work)."""
        name = "send"
        peer = index(peer)
        send = self._input(name, "x", x)
        t, k = self._movable(name, "x", send.dtype)
        n, p = send.size * k, self._ptr(send)
        return self._launch(name, lambda st: self._c.send(p, n, t, peer, st), (send,), None, async_op)

    def recv(self, x: np.ndarray, peer: int | None = None, async_op: bool = False) -> Any:
        """Receive from peer into x (in place); returns x.

        ``peer=None`` receives from whichever rank sends first (MPI's
        ANY_SOURCE, torch's ``recv`` without ``src``) and returns that rank;
        each sender's messages still arrive in order. It blocks until the
        message is in x (after this communicator's queued work), so it takes
        neither ``async_op=True`` nor a place inside ``gocl.group()``."""
        name = "recv"
        x = self._writable(name, "x", x)
        t, k = self._movable(name, "x", x.dtype)
        n, p = x.size * k, self._ptr(x)
        if peer is None:
            where = ("async_op=True" if async_op else "gocl.group()" if _group_keep() is not None else None)
            if where is not None:
                raise InvalidUsageError(
                    f"recv(peer=None) on rank {self._rank}: a receive from any source cannot be queued "
                    f"({where}): its sender is known only when it has run; call it alone, or pass peer=")
            self._usable(name)
            return self._c.recv_any(p, n, t)
        peer = index(peer)
        return self._launch(name, lambda st: self._c.recv(p, n, t, peer, st), (x,), x, async_op)

    def barrier(self) -> None:
        """Return once every rank has called barrier (a one-byte all_reduce)."""
        self.all_reduce(np.zeros(1, np.uint8), op="max")

    # ------------------------------------------------------- lifecycle

    def split(self, color: int | None, key: int | None = None,
              timeout: float | None = None) -> "Communicator | None":
        """Collective: ranks passing the same color form a new communicator,
        ordered by key (default: this rank), then by rank. color None (or a
        negative color) takes no part and gets None. ``timeout`` as in the
        constructor; None keeps this communicator's."""
        self._usable("split")
        c = _core.SPLIT_NOCOLOR if color is None or index(color) < 0 else index(color)
        k = self._rank if key is None else index(key)
        new = self._c.split(c, k, timeout=timeout)
        return None if new is None else Communicator._wrap(new)

    # ------------------------------------------------------- recovery

    def shrink(self, exclude: "list[int] | None" = None, *, abort: bool = False,
               timeout: float | None = None) -> "Communicator":
        """A communicator of this one's ranks less ``exclude``, in the same
        order (excluded ranks do not call it). Works on a communicator that
        failed because a rank died. ``exclude=None``: the survivors agree on
        which ranks are gone and leave out exactly those; every survivor gets
        the same communicator. ``abort=True`` fails this communicator's
        operations in progress first (GOCL_SHRINK_ABORT); otherwise its
        queued work finishes first. ``timeout`` as in the constructor; None
        keeps this communicator's. This communicator stays, to be destroyed."""
        self._usable("shrink")
        ranks = None if exclude is None else [index(r) for r in exclude]
        flags = _core.SHRINK_ABORT if abort else _core.SHRINK_DEFAULT
        return Communicator._wrap(self._c.shrink(ranks, flags, timeout=timeout))

    def revoke(self) -> None:
        """Fail every operation in progress or queued, here and on every peer,
        and return once none runs here; then shrink or destroy."""
        self._usable("revoke")
        self._c.revoke()

    def grow_id(self) -> bytes:
        """On rank 0: the 128-byte id the ranks joining a :meth:`grow` pass to
        :meth:`join_grow` (hand it to them as you would gocl.unique_id())."""
        self._usable("grow_id")
        return self._c.grow_id()

    def grow(self, world_size: int, unique_id: bytes | None = None,
             timeout: float | None = None) -> "Communicator":
        """Collective over this communicator: a communicator of world_size
        ranks in which these keep their ranks and new processes join with
        :meth:`join_grow`. Only rank 0 needs the id (default: the one its
        :meth:`grow_id` made)."""
        self._usable("grow")
        uid = None if unique_id is None else bytes(unique_id)
        return Communicator._wrap(self._c.grow(index(world_size), uid, timeout=timeout))

    @classmethod
    def join_grow(cls, unique_id: bytes, rank: int, world_size: int,
                  timeout: float | None = None) -> "Communicator":
        """A new rank's side of :meth:`grow`: ``rank`` in [the old size, world_size)."""
        return cls._wrap(_core.Comm.grow_join(bytes(unique_id), index(world_size), index(rank), timeout=timeout))

    def _drain(self, error_if_pending: GoclError | None) -> None:
        for w in list(self._pending):
            if w._event is not None and w._event.done():
                self._retire(w)
        for w in list(self._pending):
            self._retire(w, error_if_pending)

    def destroy(self) -> None:
        """Wait for queued work, then free the communicator (collective in
        spirit, as in NCCL, but never blocks on peers). Idempotent."""
        if self._state != "ok":
            return
        stream_error = None
        if self._stream is not None:
            try:
                self._stream.synchronize()
            except GoclError as e:
                stream_error = e
        self._drain(stream_error)
        self._state = "destroyed"
        try:
            self._c.destroy()
        finally:
            if self._stream is not None:
                s, self._stream = self._stream, None
                with contextlib.suppress(GoclError):
                    s.destroy()

    def abort(self) -> None:
        """Fail every operation in progress (from any thread), tell the peers,
        and free the communicator. Idempotent."""
        if self._state != "ok":
            return
        for w in list(self._pending):  # what already finished keeps its own outcome
            if w._event is not None and w._event.done():
                self._retire(w)
        self._state = "aborted"
        try:
            self._c.abort()
        finally:
            for w in list(self._pending):
                self._retire(w, InvalidUsageError(
                    f"{w._name} on rank {self._rank}: the communicator was aborted before the call completed"))
            if self._stream is not None:
                s, self._stream = self._stream, None
                with contextlib.suppress(GoclError):
                    s.destroy()

    def dump_trace(self, path: str | os.PathLike | None = None) -> None:
        """Append this rank's flight recorder (its last calls, GOCL_TRACE_BUFFER)
        to ``path`` as JSON lines, or to the file GOCL_TRACE_FILE names; ``gocl
        trace FILES...`` lines the ranks' files up. Works on a failed
        communicator too; InvalidUsageError when the recorder is off."""
        if self._state != "ok":
            raise InvalidUsageError(f"dump_trace on rank {self._rank}: the communicator was {self._state}")
        self._c.dump_trace(None if path is None else os.fspath(path))

    def async_error(self) -> GoclError | None:
        """The error that broke the communicator (a failed call, a dead peer), or None."""
        self._usable("async_error")
        return self._async_error()
