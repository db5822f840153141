"""What the "gocl" creator returns to torch, per torch version.

* ``GoclBackend`` subclasses c10d's ``Backend`` (``dist.BackendBase`` where
  torch exports it). torch wraps it in its own ProcessGroup, so group
  names, ``_device_types``, ``_get_backend``, functional collectives,
  DeviceMesh and TORCH_DISTRIBUTED_DEBUG work as for built-in backends.
  When every device of the group is gocl's, the creator builds that
  ProcessGroup itself, as a ``GoclGroup``: named "gocl", and the calls
  torch.distributed makes go to the Engine without torch's C++ dispatch.
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
import os
import sys

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from . import BACKEND_NAME, DEVICES, _internals
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
    if implementation() == "processgroup":
        return ProcessGroupGocl(engine, store)
    backend = GoclBackend(engine)
    devices = _internals.group_devices(_getframe(1)) if getattr(opts, "process_group", None) is not None else None
    if devices:
        return _whole_group(opts, backend, devices)
    return backend


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
        self._group = None  # its GoclGroup, when torch got one (see _whole_group)
        _LIVE.add(self)

    def shutdown(self):
        try:
            self._engine.shutdown()
        finally:
            self._group = None
            _LIVE.discard(self)

    def abort(self):
        try:
            self._engine.abort()
        finally:
            self._group = None
            _LIVE.discard(self)

    # dist.shrink_group (torch >= 2.10)
    @property
    def supports_shrinking(self) -> bool:
        return True

    def shrink(self, ranks_to_exclude, shrink_flags=0, opts_override=None):
        """The backend of a group without ranks_to_exclude (group ranks),
        which do not call it; this group may have failed (a rank died)."""
        return GoclBackend(self._engine.shrink(ranks_to_exclude, shrink_flags))

    def __repr__(self):
        e = self._engine
        return f"GoclBackend(group={e.group_id!r}, rank={e.rank}, size={e.size})"


# Calls torch.distributed makes on a group, by method name, with positional
# arguments (tensors, then options); C++ callers (DDP's reducer) reach the
# same names through torch's ProcessGroup trampoline.
_OPTIONS = tuple(getattr(c10d, n) for n in (
    "AllreduceOptions", "AllreduceCoalescedOptions", "BroadcastOptions", "ReduceOptions", "AllgatherOptions",
    "ReduceScatterOptions", "AllToAllOptions") if hasattr(c10d, n))
_getframe = sys._getframe
_NONE_OK_CALLERS = _internals.none_ok_callers()


def _first_tensor(x):
    while isinstance(x, (list, tuple)):
        if not x:
            return None
        x = x[0]
    return x if isinstance(x, torch.Tensor) else None


def _whole_group(opts, backend: GoclBackend, devices: list[str]):
    """The ProcessGroup for a group that is gocl on every device: torch's
    own C++ ProcessGroup (so names, DeviceMesh, functional collectives and
    DETAIL debugging work as for built-in backends) whose Python class
    answers "gocl" for its backend name (DDP's logs; torch names every
    Python Backend "custom") and routes calls on gocl tensors straight to
    the Engine."""
    torch_pg = opts.process_group
    store = getattr(opts.store, "underlying_store", opts.store)  # the group's store, without the device prefix
    registered = backend
    if dist.get_debug_level() == dist.DebugLevel.DETAIL and dist.is_gloo_available():
        # what torch does for a backend it registers itself
        registered = dist.distributed_c10d._create_process_group_wrapper(
            wrapped_pg=backend, store_prefix=opts.group_id, store=opts.store, rank=opts.group_rank,
            world_size=opts.group_size, timeout=opts.timeout)
    pg = GoclGroup(store, opts.group_rank, opts.group_size, backend if registered is backend else None)
    kind = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(kind)
    for device in devices:
        pg._register_backend(torch.device(device), kind, registered)
    bound = getattr(torch_pg, "bound_device_id", None)
    if bound is not None:
        pg.bound_device_id = bound
    backend._group = pg  # the backend keeps its group alive until shutdown (C++ may hold only the backend)
    return pg


class GoclGroup(dist.ProcessGroup):
    """torch's ProcessGroup for a group that is gocl on every device (the
    Backend route). Its methods are the ones torch.distributed calls, and
    C++ reaches them through torch's trampoline too: calls whose tensors
    are gocl's go to the Engine, which returns gocl's own Works (torch's C++
    holder of a Python Backend's Work forwards only wait() and
    get_future(), so is_completed() and _source_rank() would be lost) and
    skips torch's C++ dispatch (half the time of a small synchronous
    call). Anything else, and every call when TORCH_DISTRIBUTED_DEBUG=DETAIL
    wraps the backend, goes to torch's ProcessGroup. Each method falls back
    by calling super() from its own frame, which is how pybind11 tells a
    call from the override apart from a C++ call into it."""

    def __init__(self, store, rank: int, size: int, backend: GoclBackend | None):
        dist.ProcessGroup.__init__(self, store, rank, size)
        self._engine = backend._engine if backend is not None else None

    def getBackendName(self) -> str:  # noqa: N802
        return BACKEND_NAME

    def _routes(self, args, kwargs) -> bool:
        if self._engine is None or kwargs or len(args) < 2 or not isinstance(args[-1], _OPTIONS):
            return False
        t = _first_tensor(args)
        return t is not None and t.device.type in DEVICES

    def _routes_p2p(self, tensors) -> bool:
        t = _first_tensor(tensors)
        return self._engine is not None and t is not None and t.device.type in DEVICES

    def allreduce(self, *args, **kwargs):
        engine = self._engine
        if engine is not None and len(args) == 2 and not kwargs and type(args[1]) is c10d.AllreduceOptions:
            tensors, opts = args
            if len(tensors) == 1 and tensors[0].is_cpu and _internals.HAS_ASYNC_OP and not opts.asyncOp:
                try:
                    caller = _getframe(1).f_code
                except ValueError:  # called from C++ on a thread without Python frames (DDP's backward)
                    caller = None
                return engine.allreduce(tensors, opts, caller in _NONE_OK_CALLERS)
        if self._routes(args, kwargs):
            return engine.allreduce(*args)
        return super().allreduce(*args, **kwargs)

    def allreduce_coalesced(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.allreduce_coalesced(*args)
        return super().allreduce_coalesced(*args, **kwargs)

    def broadcast(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.broadcast(*args)
        return super().broadcast(*args, **kwargs)

    def reduce(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.reduce(*args)
        return super().reduce(*args, **kwargs)

    def allgather(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.allgather(*args)
        return super().allgather(*args, **kwargs)

    def all_gather_single(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.all_gather_single(*args)
        return super().all_gather_single(*args, **kwargs)

    def reduce_scatter(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.reduce_scatter(*args)
        return super().reduce_scatter(*args, **kwargs)

    def reduce_scatter_single(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.reduce_scatter_single(*args)
        return super().reduce_scatter_single(*args, **kwargs)

    def all_to_all_single(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.all_to_all_single(*args)
        return super().all_to_all_single(*args, **kwargs)

    def alltoall(self, *args, **kwargs):
        if self._routes(args, kwargs):
            return self._engine.alltoall(*args)
        return super().alltoall(*args, **kwargs)

    def send(self, tensors, *args, **kwargs):
        if self._routes_p2p(tensors):
            return self._engine.send(tensors, *args, **kwargs)
        return super().send(tensors, *args, **kwargs)

    def recv(self, tensors, *args, **kwargs):
        if self._routes_p2p(tensors):
            return self._engine.recv(tensors, *args, **kwargs)
        return super().recv(tensors, *args, **kwargs)

    def recv_anysource(self, tensors, *args, **kwargs):
        if self._routes_p2p(tensors):
            return self._engine.recv_anysource(tensors, *args, **kwargs)
        return super().recv_anysource(tensors, *args, **kwargs)


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
