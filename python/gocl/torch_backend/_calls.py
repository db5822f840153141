"""What every c10d operation of a group's Engine shares: the communicator,
its executor, argument checks, and the one way a call is made and checked
(``_now`` inline, ``_submit`` as a queued Task). The operations themselves
live by family in ``_reductions``, ``_movement`` and ``_p2p``; ``_engine``
puts them together with the group's lifetime."""

from __future__ import annotations

import logging

import torch
from torch._C._distributed_c10d import AllreduceOptions

from .. import _core, _lib
from . import _staging, _types
from ._internals import HAS_ASYNC_OP, caller_async
from ._work import Executor, GoclWork, Task, completed_work

log = logging.getLogger("gocl.torch")
_STRIDED = torch.strided


def _host(t: torch.Tensor) -> bool:
    """_staging.direct, inlined for the latency paths: a dense contiguous
    CPU tensor gocl can use as it is."""
    return (t.layout is _STRIDED and t.is_cpu and t.is_contiguous()
            and not (t.is_neg() or t.is_conj() or _staging._FORCE))


def _op_type_key(op) -> int:
    return int(_types.op_type(op))


def _pick_op_key():
    """What keys the latency paths' (dtype, op) cache: hash(ReduceOp) where
    it is the op type's value for every fresh ReduceOp object (torch 2.5 ...
    2.15; a tenth of reading .op), else the op type itself."""
    o = AllreduceOptions()
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        o.reduceOp = getattr(torch.distributed.ReduceOp, name)
        want = int(getattr(_types.R, name))
        if hash(o.reduceOp) != want or hash(o.reduceOp) != want:
            return _op_type_key
    return hash


_op_key = _pick_op_key()

U8 = _core.UINT8
_SIGNED_TWIN = {}
for _u, _s in (("uint32", torch.int32), ("uint64", torch.int64)):
    if hasattr(torch, _u):
        _SIGNED_TWIN[getattr(torch, _u)] = _s


class Calls:
    """A group's communicator and executor, and the helpers every family of
    operations uses."""

    def __init__(self, comm: _core.Comm, rank: int, size: int, global_ranks: list[int], group_id: str):
        self.comm = comm
        self.rank = rank
        self.size = size
        self.global_ranks = global_ranks
        self.group_id = group_id
        self.executor = Executor(f"{group_id}:{rank}", self.where())
        self._shut = False
        self.seq = 0  # operations issued (torch's "sequence number for group")
        self.store = None  # the group's store (monitored_barrier); set by create()
        self.comm_timeout = None  # the communicator's timeout in seconds (op_timeout); set by create()
        self._monitored = 0  # monitored_barrier calls so far
        lib = _lib.lib()  # the latency paths call these directly
        self._c_all_reduce, self._c_all_gather, self._c_reduce_scatter = (
            lib.goclAllReduce, lib.goclAllGather, lib.goclReduceScatter)
        self._fast = {}  # (dtype, _op_key(ReduceOp)) -> (gocl dtype, gocl op) of native reductions

    def where(self) -> str:
        return f"group {self.group_id!r} rank {self.rank} (global rank {self.global_ranks[self.rank]})"

    def _err(self, what: str) -> ValueError:
        return ValueError(f"gocl {what} on {self.where()}")

    def _one(self, tensors, what: str):
        if len(tensors) != 1:
            raise self._err(f"{what}: expected one tensor per process, got {len(tensors)} "
                            "(multi-device lists are not supported)")
        return tensors[0]

    def _submit(self, task: Task, opts, async_op: bool | None = None) -> GoclWork:
        self.seq += 1
        return self.executor.submit(task, caller_async(opts) if async_op is None else async_op)

    def _check_root(self, root: int, what: str) -> int:
        if not 0 <= root < self.size:
            raise self._err(f"{what}: root {root} is not a rank of this group of {self.size}")
        return root

    def _check_peer(self, peer: int, what: str) -> int:
        if not 0 <= peer < self.size:
            raise self._err(f"{what}: peer {peer} is not a rank of this group of {self.size}")
        return peer

    def _now(self, opts, fn, args, result, keep=None, name=None, is_async=None):
        """Call gocl's fn(*args, comm, stream) on host tensors: inline for a
        synchronous call (the NULL stream orders it after the group's queued
        work), else queued on the group's stream: the one way every inline
        call is made and checked. keep: what else the Work must hold until
        the call is done (its input); name: the Work's (default: fn's);
        is_async: the caller's answer, when it has one. A done call's Work
        holds the real outputs: C++ callers such as DDP's reducer read the
        future's value."""
        self.seq += 1
        h = self.comm.handle
        if is_async is None:
            is_async = opts.asyncOp if HAS_ASYNC_OP else caller_async(opts)
        if not is_async:
            rc = fn(*args, h, None)
            if rc:
                _core.check(rc, h)
            return completed_work(result)
        ex = self.executor
        with ex.lock:
            rc = fn(*args, h, ex.stream_handle())
            if rc:
                _core.check(rc, h)
            return ex.queued(result, keep, name or getattr(fn, "__name__", None))

    def _combined(self, name, steps, result, tensors) -> Task:
        """One task running several (issue, finish) pairs inside one gocl group."""
        def issue(stream):
            with _core.group():
                for i, _ in steps:
                    i(stream)

        def finish():
            for _, f in steps:
                if f is not None:
                    f()
        return Task(name, issue, finish, result, tensors)

    def _p2p_exchange(self, sends, recvs, stream) -> None:
        """Grouped send/recv: sends[p] / recvs[p] are host byte tensors (or
        None) for peer p; this rank's own block is copied locally."""
        with _core.group():
            for p in range(self.size):
                if p == self.rank:
                    continue
                s, r = sends[p], recvs[p]
                if s is not None and s.numel():
                    self.comm.send(s.data_ptr(), s.numel(), U8, p, stream)
                if r is not None and r.numel():
                    self.comm.recv(r.data_ptr(), r.numel(), U8, p, stream)
        s, r = sends[self.rank], recvs[self.rank]
        if s is not None and r is not None and r.numel():
            r.copy_(s)
