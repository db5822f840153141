"""One process group's gocl communicator and every c10d operation on it:
the operations by family in ``_reductions``, ``_movement`` and ``_p2p``,
what they share in ``_calls``, the group's lifetime (create, barrier,
coalescing, shutdown, abort, shrink) here.

The front ends in ``_frontends`` (a c10d ``Backend`` subclass or a
``ProcessGroup`` subclass, depending on the torch version) only forward to
an :class:`Engine`. Each operation builds a :class:`Task` whose
``issue(stream)`` stages tensors to host memory (see ``_staging``) and
makes the gocl calls on the stream the group's :class:`Executor` gives it,
and whose ``finish`` copies results back; the executor runs them in order.

What gocl lacks is built here from what it has:

* bitwise reductions (BAND/BOR/BXOR on integers): gocl has no bitwise
  op, so every rank's data is gathered (all_gather / gather / all_to_all)
  and reduced locally with torch's bitwise functions;
* uneven all_to_all_single splits, all_to_all / all_gather with tensors
  of different sizes, gather and scatter: grouped send/recv inside one
  goclGroupStart/End (gocl's own alltoall takes equal counts only);
* bool as uint8 0/1 with SUM/MAX = or and PRODUCT/MIN = and (as NCCL);
  complex as the real view, for SUM/AVG/PREMUL_SUM (real factor) only;
* every dtype moves as raw bytes in data-movement collectives.
"""

from __future__ import annotations

import os

import torch
from torch._C._distributed_c10d import BarrierOptions

from .. import _core, _rendezvous
from . import _info, _monitored_barrier, _staging
from ._calls import U8, log
from ._movement import DataMovement
from ._p2p import PointToPoint
from ._reductions import Reductions
from ._work import GoclWork, Task


def connect(store, rank: int, size: int, timeout, global_ranks: list[int], group_id: str) -> _core.Comm:
    """Create this rank's gocl communicator for a group: the group's rank 0
    makes the unique id and publishes it in the group's store (see
    gocl._rendezvous: one key scheme, a round per incarnation of the group);
    the others wait for it up to the group timeout, then everyone joins. The
    group's global ranks in the key make it self-describing in store dumps."""
    ranks = ",".join(map(str, global_ranks))
    if len(ranks) > 64:
        ranks = f"{global_ranks[0]}..{global_ranks[-1]}({len(global_ranks)})"
    uid = _rendezvous.store_exchange(
        store, rank, size, f"{group_id}/[{ranks}]", timeout,
        f"gocl: rank {rank} of group {group_id!r} (global rank {global_ranks[rank]})",
        f"the group's rank 0 (global rank {global_ranks[0]})")
    return _core.Comm.init_rank(uid, size, rank, timeout=op_timeout(timeout))


def op_timeout(timeout) -> float | None:
    """The communicator's operation timeout in seconds from the group's: a
    timeout the program gave (init_process_group / new_group(timeout=...))
    bounds every gocl wait; torch's default (what every group gets when none
    is given) yields to GOCL_TIMEOUT / NCCL_TIMEOUT when one is set, so an
    exported GOCL_TIMEOUT keeps working for unchanged scripts."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    try:
        from torch.distributed.constants import default_pg_timeout
        is_default = abs(seconds - default_pg_timeout.total_seconds()) < 1e-6
    except ImportError:  # pragma: no cover - every supported torch has it
        is_default = False
    if is_default and (os.environ.get("GOCL_TIMEOUT") or os.environ.get("NCCL_TIMEOUT")):
        return None
    return max(seconds, 0.0)


def _short(ranks: list[int]) -> str:
    if len(ranks) > 16:
        return f"[{', '.join(map(str, ranks[:8]))}, ... {ranks[-1]}] ({len(ranks)})"
    return str(ranks)


class Engine(Reductions, DataMovement, PointToPoint):
    """A group's communicator, its executor, and the c10d operations (by
    family: _reductions, _movement, _p2p; what they share: _calls)."""

    @classmethod
    def create(cls, store, rank, size, timeout, global_ranks, group_id) -> Engine:
        _staging.refresh()
        comm = connect(store, rank, size, timeout, global_ranks, group_id)
        line = f"torch group {group_id!r}: rank {rank} of {size}, global ranks {_short(global_ranks)}"
        log.debug("gocl: %s", line)
        _info(line, global_ranks[rank])
        engine = cls(comm, rank, size, global_ranks, group_id)
        engine.store = store
        engine.comm_timeout = op_timeout(timeout)
        return engine

    def barrier(self, opts=None) -> GoclWork:
        opts = opts if opts is not None else BarrierOptions()
        flag = torch.zeros(1, dtype=torch.uint8)

        def issue(stream):
            self.comm.all_reduce(flag.data_ptr(), flag.data_ptr(), 1, U8, _core.MAX, stream)
        return self._submit(Task("barrier", issue, None, [flag]), opts)

    def monitored_barrier(self, opts=None, wait_all_ranks: bool = False) -> GoclWork:
        """gloo's monitored barrier (see _monitored_barrier)."""
        self.executor.drain()  # a barrier orders everything before it
        self._monitored += 1
        return _monitored_barrier.run(self, self._monitored, opts, wait_all_ranks)

    def start_coalescing(self) -> None:
        self.executor.start_coalescing()

    def end_coalescing(self) -> GoclWork:
        return self.executor.end_coalescing(async_op=True)

    # How long shutdown() lets queued work that another thread waits on go
    # without a launch finishing before it aborts (Comm.Destroy's grace for a
    # call in progress).
    _SHUTDOWN_GRACE = 0.1

    def shutdown(self) -> None:
        """Destroy the group once its queued work is done (what
        destroy_process_group needs). Work another thread is stuck in is not
        waited for: when another thread is inside one of the group's calls
        (it holds the executor's lock), or blocked in a wait on the group's
        queued work that has not finished a launch for _SHUTDOWN_GRACE, the
        group is aborted, which ends that work at once with the abort's
        error, as abort() does."""
        if self._shut:
            return
        self._shut = True
        ex = self.executor
        if not ex.lock.acquire(blocking=False):
            self.comm.abort()
            return
        aborted = False
        try:
            ex.flush()  # held-back sends and receives go out, as destroying the group promises
            if not ex.settle(self._SHUTDOWN_GRACE):
                self.comm.abort()
                aborted = True
            try:
                ex.close()
            except Exception:  # noqa: BLE001
                if not aborted:  # the stream's error after an abort is the aborted work's, told by its Works
                    raise
        finally:
            ex.lock.release()
            self.comm.destroy()  # nothing to do after an abort

    def abort(self) -> None:
        if self._shut:
            return
        self._shut = True
        self.comm.abort()

    def shrink(self, exclude: list[int], flags: int) -> Engine:
        """The Engine of this group's ranks less exclude (group ranks), made
        by gocl's shrink, which works on a group that failed because a rank
        died; this one stays to be shut down."""
        if self._shut:
            raise RuntimeError(f"gocl shrink on {self.where()}: the group was shut down or aborted")
        comm = self.comm.shrink(list(exclude), flags, timeout=self.comm_timeout)
        keep = [r for r in range(self.size) if r not in set(exclude)]
        group_id = f"{self.group_id}:shrunk"
        engine = Engine(comm, comm.rank, comm.size, [self.global_ranks[r] for r in keep], group_id)
        engine.comm_timeout = self.comm_timeout
        if self.store is not None:  # its own keys (monitored_barrier counts from 0 again)
            engine.store = torch.distributed.PrefixStore(f"{group_id}/", self.store)
        return engine
