"""gocl for torchft: :class:`ProcessGroupGocl`, a reconfigurable process group.

torchft's ``Manager`` calls ``configure(store_addr, replica_id, rank,
world_size, ...)`` at every new quorum; this group then aborts the
communicator it had and makes a gocl communicator for the new quorum through
the quorum's store (``host:port/prefix``), in the calling process::

    from gocl.torchft import ProcessGroupGocl
    manager = torchft.Manager(pg=ProcessGroupGocl(), ...)

torchft runs gloo in a subprocess (``ProcessGroupBabyGloo``) so that a
collective stuck on a dead peer can be killed with its process; gloo's
``abort()`` does not end it. gocl's does: :meth:`abort` (from any thread)
ends every call in progress within a second, with an error, so this group
needs no subprocess, no shared-memory copies of tensors and no pipe.

What torchft gets:

* every collective torchft's wrappers forward (``allreduce``,
  ``allreduce_coalesced``, ``allgather``, ``allgather_into_tensor_coalesced``,
  ``broadcast``, ``barrier``, ``send``, ``recv``) and also ``reduce_scatter``,
  ``reduce_scatter_tensor_coalesced`` and ``alltoall_base``, which torchft's
  gloo groups refuse;
* Works whose ``wait()`` returns False when the call failed, and whose
  ``get_future()`` completes with the error (torchft's Manager learns of a
  failed step from the future: see ``_Work``);
* ``errored()``: the first error of the current communicator (a call that
  failed, a peer that failed or timed out, ``abort()``), None while it is
  healthy; ``configure`` clears it;
* ``set_timeout(t)``: bounds the next ``configure`` (the store and the
  unique id's exchange) and every wait of the communicators made from then
  on (a gocl communicator keeps its timeout for life, as NCCL's);
* ``abort()``: ends calls in progress (their Works fail), the group is
  unusable until the next ``configure``; ``shutdown()`` destroys the
  communicator once its queued work is done, aborting work another thread
  is stuck in (as ``dist.destroy_process_group`` on gocl).

Importing this module needs torchft (``pip install "gocl[torchft]"``).
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Optional

try:
    from torchft.process_group import ProcessGroupWrapper, create_store_client
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gocl.torchft needs torchft, which is not installed: pip install \"gocl[torchft]\" "
        f"(torchft>=0.2). ({_exc})") from _exc

import torch.distributed as dist

from . import _core  # noqa: E402
from .torch_backend import GoclBackend, new_backend  # noqa: E402

__all__ = ["ProcessGroupGocl"]


class ProcessGroupGocl(ProcessGroupWrapper):
    """A gocl process group that torchft's Manager reconfigures at every
    quorum, in process (see the module docstring).

    Args:
        timeout: bound of the store and rendezvous in ``configure`` and of
            every wait on a peer in the communicator's calls (a peer that
            died is reported at once, not after the timeout).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._backend: Optional[GoclBackend] = None
        self._errored: Optional[Exception] = None
        self._lock = threading.Lock()  # configure / abort / shutdown against each other
        self._generation = 0  # configures and aborts so far

    def getBackendName(self) -> str:  # noqa: N802
        return "torchft-gocl"

    # ------------------------------------------------------------ lifecycle
    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                  quorum_id: Optional[int] = None, group_rank: Optional[int] = None,
                  group_world_size: Optional[int] = None, global_ranks: Optional[list[int]] = None) -> None:
        """Abort the current communicator (if any) and make one for ``rank``
        of ``world_size`` through the store at ``store_addr``
        (``host:port/prefix``, unique per call, as torchft's Manager makes
        it). Blocks until every rank of the new group has joined or the
        timeout passes (then raises)."""
        self._replica_id, self._quorum_id = replica_id, quorum_id
        self._group_rank, self._group_world_size = group_rank, group_world_size
        self._rank, self._global_ranks = rank, global_ranks
        self.abort(errored=False)
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._errored = None
        store = create_store_client(store_addr, timeout=self._timeout)
        backend = self._create_pg(store, rank, world_size)
        with self._lock:
            if generation == self._generation:
                self._backend = self._pg = backend
                return
        backend.abort()  # abort() or another configure came in while this one waited for its peers
        raise RuntimeError(f"gocl: configure for quorum {quorum_id} rank {rank} was aborted while it ran")

    def _create_pg(self, store, rank: int, world_size: int) -> GoclBackend:
        ranks = list(self._global_ranks or ())
        if len(ranks) != world_size:
            ranks = list(range(world_size))
        if self._quorum_id is not None:
            group_id = f"torchft_quorum_{self._quorum_id}"
            if self._group_rank is not None:
                group_id += f"_rank_{self._group_rank}"
        else:
            group_id = "torchft"
        self._backend = new_backend(store, rank, world_size, self._timeout, ranks, group_id)
        return self._backend

    def abort(self, errored: bool = True) -> None:
        """Abort the communicator: calls in progress in any thread end with
        an error within a second, and so do later calls until the next
        configure."""
        if errored:
            self.errors_logger.info("", extra={
                "job_id": os.environ.get("JOB_ID", "unknown"), "replica_id": self._replica_id,
                "rank": self._rank, "quorum_id": self._quorum_id, "error": "process_group_abort"})
        with self._lock:
            self._generation += 1
            backend, self._backend, self._pg = self._backend, None, None
            if backend is None:
                return
            if errored and self._errored is None:
                self._errored = RuntimeError(f"gocl: the torchft process group of quorum {self._quorum_id} "
                                             f"(rank {backend.engine.rank} of {backend.engine.size}) was aborted")
        backend.abort()

    def shutdown(self) -> None:
        """Destroy the communicator once its queued work is done (work
        another thread is stuck in is aborted). configure may follow."""
        with self._lock:
            self._generation += 1
            backend, self._backend, self._pg = self._backend, None, None
        if backend is not None:
            backend.shutdown()

    def errored(self) -> Optional[Exception]:
        """The error that makes this communicator unusable, else None: the
        first exception a call raised, the communicator's asynchronous error
        (a peer died, timed out or aborted, with gocl's message naming the
        rank), or the abort."""
        err = self._errored
        if err is not None:
            return err
        backend = self._backend
        if backend is None:
            return None
        comm = backend.engine.comm
        try:
            rc = comm.async_error()
        except Exception as exc:  # noqa: BLE001 - the handle went away under us (abort in another thread)
            return exc
        if rc in (_core.SUCCESS, _core.IN_PROGRESS):
            return None
        try:
            _core.check(rc, comm.handle)
        except Exception as exc:  # noqa: BLE001 - the GoclError subclass for rc
            self._errored = exc
            return exc
        return None  # pragma: no cover - check raises for every rc but SUCCESS

    def set_timeout(self, timeout: timedelta) -> None:
        """The timeout of the next configure and of the communicators made
        from then on."""
        self._timeout = timeout

    # ------------------------------------------------------------ operations
    @property
    def parent(self) -> GoclBackend:
        pg = self._pg
        if pg is None:
            raise RuntimeError(f"gocl: {self!r} is not configured (call configure first; "
                               "abort() and shutdown() leave it unconfigured)")
        return pg

    def _failed(self, exc: Exception) -> None:
        if self._errored is None:
            self._errored = exc

    def _wrap(self, work):
        return _Work(self, work) if work is not None else work

    def _call(self, name: str, *args):
        """The parent's collective name(*args), its Work wrapped; an error it
        raises is this group's error too (errored())."""
        try:
            return self._wrap(getattr(self.parent, name)(*args))
        except Exception as exc:
            self._failed(exc)
            raise

    def allreduce(self, tensors, opts):
        return self._call("allreduce", tensors, opts)

    def allreduce_coalesced(self, tensors, opts):
        return self._call("allreduce_coalesced", tensors, opts)

    def allgather(self, output_tensors, input_tensor, opts):
        return self._call("allgather", output_tensors, input_tensor, opts)

    def allgather_into_tensor_coalesced(self, output_tensors, input_tensors, opts):
        return self._call("allgather_into_tensor_coalesced", output_tensors, input_tensors, opts)

    def alltoall_base(self, output_buffer, input_buffer, output_split_sizes, input_split_sizes, opts):
        return self._call("alltoall_base", output_buffer, input_buffer, list(output_split_sizes or []),
                          list(input_split_sizes or []), opts)

    def barrier(self, opts=None):
        return self._call("barrier", opts)

    def broadcast(self, tensor_list, opts):
        return self._call("broadcast", tensor_list, opts)

    def recv(self, tensors, src_rank: int, tag: int):
        return self._call("recv", tensors, src_rank, tag)

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        return self._call("reduce_scatter", output_tensors, input_tensors, opts)

    def reduce_scatter_tensor_coalesced(self, output_tensors, input_tensors, opts):
        return self._call("reduce_scatter_tensor_coalesced", output_tensors, input_tensors, opts)

    def send(self, tensors, dst_rank: int, tag: int):
        return self._call("send", tensors, dst_rank, tag)

    def size(self) -> int:
        return self.parent.size()

    def __repr__(self) -> str:
        b = self._backend
        if b is None:
            return "ProcessGroupGocl(unconfigured)"
        e = b.engine
        return f"ProcessGroupGocl(quorum={self._quorum_id}, rank={e.rank}, size={e.size})"



class _Work(dist.Work):
    """A call's Work as torchft's Manager needs it: ``wait()`` returns
    False when the call failed (the group's ``errored()`` then holds the
    error) instead of raising, and ``get_future()`` completes with the
    error. torchft's ``_ManagedWork.wait`` reports an exception from the
    underlying ``wait()`` but then never builds its future chain, so torchft
    0.2's DistributedDataParallel comm hook fails an assertion (``assert
    fut._fut``) and the backward pass raises; with the error on the future
    instead, the Manager's ``wrap_future`` reports it and the step is not
    committed, which is how torchft means a failed step to end."""

    def __init__(self, pg: ProcessGroupGocl, work) -> None:
        super().__init__()
        self._pg = pg
        self._work = work

    def wait(self, timeout=None) -> bool:
        try:
            return bool(self._work.wait() if timeout is None else self._work.wait(timeout))
        except Exception as exc:  # noqa: BLE001 - told by errored() and the future
            self._pg._failed(exc)
            return False

    def get_future(self):
        fut = self._work.get_future()
        pg = self._pg

        def seen(f) -> None:
            try:
                f.value()
            except Exception as exc:  # noqa: BLE001
                pg._failed(exc)

        fut.add_done_callback(seen)
        return fut

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def result(self):
        return self._work.result()

    def source_rank(self) -> int:
        return self._work.source_rank()

    def synchronize(self) -> None:
        self._work.synchronize()
