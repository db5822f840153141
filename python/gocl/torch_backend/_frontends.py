"""What the "gocl" creator returns to torch, per torch version.

* ``GoclBackend`` subclasses c10d's ``Backend`` (``dist.BackendBase`` where
  torch exports it). torch wraps it in its own ProcessGroup, so group
  names, ``_device_types``, ``_get_backend``, functional collectives,
  DeviceMesh and TORCH_DISTRIBUTED_DEBUG work as for built-in backends.
  It needs torch's "PyBackend" trampoline (C++ calls reaching Python
  overrides), which torch 2.14+ builds have: detected by constructing a
  probe subclass and checking that a C++ virtual call reaches it.
* ``ProcessGroupGocl`` subclasses ``dist.ProcessGroup`` for older torch
  (2.5 ... 2.13): torch then uses the object as the whole process group.
  It implements the old and new method names, the group-name accessors,
  ``_get_backend`` (returning itself) and coalescing, because C++ callers
  (DDP's reducer, functional collectives) only reach the methods torch's
  PyProcessGroup trampoline forwards.

Both forward every operation to the group's ``Engine``.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import weakref

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from . import BACKEND_NAME
from ._engine import Engine


@functools.lru_cache(maxsize=1)
def _has_py_backend() -> bool:
    if hasattr(dist, "BackendBase"):
        return True
    base = getattr(c10d, "Backend", None)
    if base is None:
        return False

    class _Probe(base):
        def getBackendName(self):  # noqa: N802
            return "gocl-probe"

    try:
        return _Probe(0, 1).name() == "gocl-probe"
    except Exception:  # noqa: BLE001  (no constructor / no trampoline)
        return False


def implementation() -> str:
    """"backend" or "processgroup": what the creator will return.
    GOCL_TORCH_IMPL forces one (processgroup works on every torch >= 2.5)."""
    forced = os.environ.get("GOCL_TORCH_IMPL", "").strip().lower()
    if forced in ("backend", "processgroup"):
        if forced == "backend" and not _has_py_backend():
            raise RuntimeError(f"GOCL_TORCH_IMPL=backend, but torch {torch.__version__} cannot dispatch to "
                               "Python subclasses of c10d Backend; unset it or use processgroup")
        return forced
    if forced:
        raise ValueError(f"GOCL_TORCH_IMPL={forced!r}: use 'backend' or 'processgroup'")
    return "backend" if _has_py_backend() else "processgroup"


def create(opts, backend_options=None):
    """The creator registered for "gocl" (extended_api=True)."""
    store = opts.store
    rank, size = opts.group_rank, opts.group_size
    timeout = opts.timeout
    group_id = str(getattr(opts, "group_id", "") or "0")
    global_ranks = [int(r) for r in (getattr(opts, "global_ranks_in_group", None) or [])]
    if len(global_ranks) != size:
        global_ranks = list(range(size))  # the default group (torch passes [])
    engine = Engine.create(store, rank, size, timeout, global_ranks, group_id)
    if implementation() == "backend":
        return GoclBackend(engine)
    return ProcessGroupGocl(engine, store)


class _Ops:
    """Every c10d operation, under every name torch versions use, forwarded
    to self._engine. Mixed into both front ends."""

    _engine: Engine

    def getBackendName(self) -> str:  # noqa: N802
        return BACKEND_NAME

    # all-reduce
    def allreduce(self, tensors, opts=None):
        return self._engine.allreduce(tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._engine.allreduce_coalesced(tensors, opts)

    def allreduce_sparse(self, tensors, opts=None):
        return self._engine.allreduce_sparse(tensors, opts)

    # broadcast, reduce
    def broadcast(self, tensors, opts=None):
        return self._engine.broadcast(tensors, opts)

    def reduce(self, tensors, opts=None):
        return self._engine.reduce(tensors, opts)

    # all-gather
    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._engine.allgather(output_tensors, input_tensors, opts)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        return self._engine.allgather_coalesced(output_lists, input_tensors, opts)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002
        return self._engine.all_gather_single(output, input, opts)

    _allgather_base = all_gather_single  # torch <= 2.13 name

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._engine.all_gather_single_coalesced(outputs, inputs, opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # reduce-scatter
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        return self._engine.reduce_scatter(output_tensors, input_tensors, opts)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002
        return self._engine.reduce_scatter_single(output, input, opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._engine.reduce_scatter_single_coalesced(outputs, inputs, opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # all-to-all
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        return self._engine.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._engine.alltoall(output_tensors, input_tensors, opts)

    # gather, scatter
    def gather(self, output_tensors, input_tensors, opts=None):
        return self._engine.gather(output_tensors, input_tensors, opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        return self._engine.scatter(output_tensors, input_tensors, opts)

    # point to point
    def send(self, tensors, dstRank, tag=0):  # noqa: N803
        return self._engine.send(tensors, dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        return self._engine.recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._engine.recv_anysource(tensors, tag)

    # barrier
    def barrier(self, opts=None):
        return self._engine.barrier(opts)

    def monitored_barrier(self, *args, **kwargs):
        return self._engine.monitored_barrier(*args, **kwargs)

    # coalescing (batch_isend_irecv, _coalescing_manager with a device)
    @property
    def supports_coalescing(self) -> bool:
        return True

    def start_coalescing(self, device=None):
        self._engine.start_coalescing()

    def end_coalescing(self, device=None):
        return self._engine.end_coalescing()

    # sequence numbers (TORCH_DISTRIBUTED_DEBUG=DETAIL's ProcessGroupWrapper
    # fingerprints every collective with them)
    def _set_sequence_number_for_group(self):
        self._engine.seq = 0

    def _get_sequence_number_for_group(self):
        return self._engine.seq

    # lifetime
    def shutdown(self):
        self._engine.shutdown()

    def abort(self):
        self._engine.abort()

    @property
    def engine(self) -> Engine:
        """The gocl engine (communicator, executor) behind this group."""
        return self._engine


_BackendBase = getattr(dist, "BackendBase", None) or c10d.Backend


# Python Backend objects that torch holds only from C++ (TORCH_DISTRIBUTED_DEBUG=DETAIL
# wraps them in a C++ ProcessGroupWrapper) would lose their Python half, and with it
# every override; keep them alive until the group shuts down.
_LIVE: set = set()


class GoclBackend(_Ops, _BackendBase):
    """gocl as a c10d Backend (torch with the Python Backend trampoline)."""

    def __init__(self, engine: Engine):
        _BackendBase.__init__(self, engine.rank, engine.size)
        self._engine = engine
        _LIVE.add(self)
        _route_p2p_to_python()

    def shutdown(self):
        try:
            self._engine.shutdown()
        finally:
            _LIVE.discard(self)

    def abort(self):
        try:
            self._engine.abort()
        finally:
            _LIVE.discard(self)

    def __repr__(self):
        e = self._engine
        return f"GoclBackend(group={e.group_id!r}, rank={e.rank}, size={e.size})"


_P2P = ("send", "recv", "recv_anysource")
# what torch.distributed calls on the group, by method name (with positional
# arguments: tensors, then options)
_COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "all_gather_single", "reduce_scatter",
                "reduce_scatter_single", "all_to_all_single", "alltoall", "allreduce_coalesced")
_routed = False
_OPTIONS = tuple(getattr(c10d, n) for n in (
    "AllreduceOptions", "AllreduceCoalescedOptions", "BroadcastOptions", "ReduceOptions", "AllgatherOptions",
    "ReduceScatterOptions", "AllToAllOptions") if hasattr(c10d, n))


def _first_tensor(x):
    while isinstance(x, (list, tuple)):
        if not x:
            return None
        x = x[0]
    return x if isinstance(x, torch.Tensor) else None


def _route_p2p_to_python() -> None:
    """Make torch's ProcessGroup hand send/recv/recv_anysource, and the
    collectives torch.distributed calls, of gocl groups straight to GoclBackend, so
    Python gets gocl's own Work.

    On the Backend route torch wraps every Work a Python backend returns in a
    C++ holder that forwards only wait() and get_future(): is_completed()
    stays False after wait() and _source_rank() raises, which breaks
    isend/irecv users, polling of async collectives and ``dist.recv(t)``
    without src. torch.distributed calls these methods on the group from
    Python, so routing them here returns the Work itself (and skips torch's
    C++ dispatch and trampoline: half the time of a small synchronous call).
    Other backends' groups and C++ callers (DDP, functional collectives) are
    untouched."""
    global _routed
    if _routed:
        return
    _routed = True
    pg_cls = dist.ProcessGroup

    def backend_of(pg, tensors):
        t = _first_tensor(tensors)
        if t is None:
            return None
        try:
            b = pg._get_backend(t.device)
        except Exception:  # noqa: BLE001  (no backend for that device: torch's own error follows)
            return None
        return b if isinstance(b, GoclBackend) else None

    def cpu_engine(pg):
        """The Engine behind pg's CPU backend (None: not gocl), cached per
        group: _get_backend alone costs more than a small call's C work.
        Weak, so a destroyed group goes; a recycled id misses the check."""
        hit = _cpu_engines.get(id(pg))
        if hit is not None and hit[0]() is pg:
            return hit[1]
        b = backend_of(pg, [_CPU_PROBE])
        engine = b._engine if b is not None else None
        _cpu_engines[id(pg)] = (weakref.ref(pg, lambda _, k=id(pg): _cpu_engines.pop(k, None)), engine)
        return engine

    for name in _P2P + _COLLECTIVES:
        original = getattr(pg_cls, name, None)
        if original is None:
            continue
        if name in _P2P:
            def routed(self, tensors, *args, _name=name, _original=original, **kwargs):
                if type(self) is pg_cls:
                    backend = backend_of(self, tensors)
                    if backend is not None:
                        return getattr(backend, _name)(tensors, *args, **kwargs)
                return _original(self, tensors, *args, **kwargs)
        else:
            def routed(self, *args, _name=name, _original=original, **kwargs):
                if type(self) is pg_cls and len(args) >= 2 and not kwargs and isinstance(args[-1], _OPTIONS):
                    t = _first_tensor(args)
                    if t is not None and t.is_cpu:
                        engine = cpu_engine(self)
                        if engine is not None:
                            return getattr(engine, _name)(*args)
                    else:
                        backend = backend_of(self, args)
                        if backend is not None:
                            return getattr(backend, _name)(*args)
                return _original(self, *args, **kwargs)

        if name == "allreduce":
            routed = _routed_allreduce(routed, cpu_engine)
        routed.__name__ = name
        routed.__doc__ = original.__doc__
        setattr(pg_cls, name, routed)


def _routed_allreduce(general, cpu_engine):
    """The routing of pg.allreduce([t], opts), the latency path's caller,
    with the fewest checks; anything else goes to general. A synchronous
    call from a torch.distributed wrapper that takes None (see
    _none_ok_caller) gets None instead of a completed Work."""
    pg_cls, opts_cls, getframe = dist.ProcessGroup, c10d.AllreduceOptions, sys._getframe

    def allreduce(self, *args, **kwargs):
        if type(self) is pg_cls and len(args) == 2 and not kwargs and type(args[1]) is opts_cls:
            tensors, opts = args
            if len(tensors) == 1 and tensors[0].is_cpu:
                engine = cpu_engine(self)
                if engine is not None:
                    none_ok = not opts.asyncOp and _none_ok_caller(getframe(1).f_code) if _HAS_ASYNC_OP else False
                    return engine.allreduce(tensors, opts, none_ok)
        return general(self, *args, **kwargs)
    return allreduce


_HAS_ASYNC_OP = hasattr(c10d.AllreduceOptions(), "asyncOp")  # torch >= 2.8 tells the backend
_none_ok: dict = {}  # code object -> whether that caller takes None from a synchronous call


def _none_ok_caller(code) -> bool:
    """Whether code, calling pg.allreduce, is a torch.distributed wrapper
    that waits on the Work only when there is one (``elif work is not None:
    work.wait()``, torch >= 2.8, and no other wait), read from its source
    once per caller."""
    ok = _none_ok.get(code)
    if ok is None:
        ok = False
        if code.co_filename.endswith(_C10D_PY):
            try:
                src = inspect.getsource(code)
            except (OSError, TypeError):
                src = ""
            guarded = len(re.findall(r"\bwork is not None\s*\)?\s*:[^\n]*(?:\n\s*#[^\n]*)*\n\s*work\.wait\(\)", src))
            ok = guarded > 0 and guarded == src.count(".wait(")  # every wait in it is guarded
        _none_ok[code] = ok
    return ok


_C10D_PY = os.path.join("torch", "distributed", "distributed_c10d.py")


_cpu_engines: dict = {}  # id(ProcessGroup) -> (weakref to it, its CPU Engine or None)
_CPU_PROBE = torch.empty(0)


class ProcessGroupGocl(_Ops, dist.ProcessGroup):
    """gocl as a whole ProcessGroup (torch without the Backend trampoline)."""

    def __init__(self, engine: Engine, store=None):
        dist.ProcessGroup.__init__(self, engine.rank, engine.size)
        self._engine = engine
        self._store = store
        self._gocl_group_name = engine.group_id
        self._gocl_group_desc = "undefined"

    def __repr__(self):
        e = self._engine
        return f"ProcessGroupGocl(group={e.group_id!r}, rank={e.rank}, size={e.size})"

    # group name and description: the C++ base keeps them in a backend this
    # group does not have, so keep them here, under the C++ (trampolined)
    # and the Python names.
    def getGroupName(self):  # noqa: N802
        return self._gocl_group_name

    def setGroupName(self, name):  # noqa: N802
        self._gocl_group_name = name

    def _set_group_name(self, name):
        self._gocl_group_name = name

    @property
    def group_name(self):
        return self._gocl_group_name

    def getGroupDesc(self):  # noqa: N802
        return self._gocl_group_desc

    def setGroupDesc(self, desc):  # noqa: N802
        self._gocl_group_desc = desc

    def _set_group_desc(self, desc):
        self._gocl_group_desc = desc

    @property
    def group_desc(self):
        return self._gocl_group_desc

    def name(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def _get_backend(self, device=None):
        return self

    def _start_coalescing(self, device=None):
        self._engine.start_coalescing()

    def _end_coalescing(self, device=None):
        return self._engine.end_coalescing()
