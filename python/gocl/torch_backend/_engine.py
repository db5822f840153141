"""One process group's gocl communicator and every c10d operation on it.

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

import functools
import logging
import os

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from .. import _core, _lib, _rendezvous
from .._sizes import elems
from . import _info, _monitored_barrier, _staging, _types
from ._internals import HAS_ASYNC_OP, caller_async
from ._staging import Host, as_bytes, copy_out, direct, overlaps
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


class Engine:
    """A group's communicator, its executor, and the c10d operations."""

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

    # ------------------------------------------------------------ helpers
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

    def _reduction(self, dtype, op):
        return _types.reduction(dtype, op, self.rank)

    def _check_root(self, root: int, what: str) -> int:
        if not 0 <= root < self.size:
            raise self._err(f"{what}: root {root} is not a rank of this group of {self.size}")
        return root

    def _check_peer(self, peer: int, what: str) -> int:
        if not 0 <= peer < self.size:
            raise self._err(f"{what}: peer {peer} is not a rank of this group of {self.size}")
        return peer

    @staticmethod
    def _red_view(t: torch.Tensor, red: _types.Reduction) -> torch.Tensor:
        """The flat view gocl reduces (bool -> uint8, complex -> real pairs)."""
        if red.view is None:
            return t.reshape(-1)
        if t.dtype.is_complex:
            return torch.view_as_real(t).reshape(-1)
        return t.reshape(-1).view(red.view)

    def _reduce_call(self, red: _types.Reduction, call) -> None:
        """Run call(op) with the gocl op for red, creating (and freeing) a
        PreMulSum op when needed. gocl resolves the op when the call is made
        or recorded, so freeing right after is safe inside a group too."""
        if red.kind != "premul":
            call(red.gocl_op)
            return
        op = self.comm.premul_sum(_types.scalar_bytes(red.factor, red.gocl_dtype), red.gocl_dtype)
        try:
            call(op)
        finally:
            self.comm.destroy_op(op)

    def _local_reduce(self, gathered: torch.Tensor, red: _types.Reduction, dtype) -> torch.Tensor:
        """Reduce gathered bytes (one block per rank) of dtype with a torch
        bitwise function; returns a flat tensor of dtype."""
        flat = gathered.view(dtype)
        rows = flat.view(self.size, flat.numel() // self.size)
        twin = _SIGNED_TWIN.get(dtype)
        if twin is not None:  # same bits; torch lacks bitwise kernels for uint32/64
            rows = rows.view(twin)
        fn = getattr(torch, red.local)
        out = functools.reduce(fn, rows.unbind(0))
        return out.view(dtype) if twin is not None else out

    def _consecutive(self, tensors, nbytes: int):
        """The address of tensors if they are host-direct and lie back to back
        (e.g. all_gather_object's views of one buffer), else None."""
        if not tensors:
            return None
        base = tensors[0].data_ptr() if direct(tensors[0]) else None
        if base is None:
            return None
        for i, t in enumerate(tensors):
            if not direct(t) or t.numel() * t.element_size() != nbytes or t.data_ptr() != base + i * nbytes:
                return None
        return base

    def _native(self, dtype, op):
        """(gocl dtype, gocl op) when gocl reduces dtype with op natively on
        the tensor's own memory, else a false value; cached per (dtype,
        op type). PREMUL_SUM (its factor varies) is never cached."""
        key = (dtype, _op_key(op))
        fast = self._fast.get(key)
        if fast is None:
            if _types.op_type(op) == _types.R.PREMUL_SUM:
                return None
            try:
                red = self._reduction(dtype, op)
            except _types.UnsupportedError:
                return None  # the general path raises it
            fast = self._fast[key] = (red.gocl_dtype, red.gocl_op) if red.kind == "native" and red.view is None \
                else False
        return fast

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

    # ------------------------------------------------------------ allreduce
    def _allreduce_steps(self, t: torch.Tensor, red: _types.Reduction):
        st = {}
        if red.kind == "bitwise":
            def issue(stream):
                h = st["h"] = Host(t)
                n = h.nbytes
                tmp = st["tmp"] = torch.empty(self.size * n, dtype=torch.uint8)
                self.comm.all_gather(h.bytes().data_ptr(), tmp.data_ptr(), n, U8, stream)

            def finish():
                h = st["h"]
                out = self._local_reduce(st["tmp"], red, t.dtype)
                h.t.copy_(out.view(h.t.shape))
                h.write_back()
            return issue, finish

        def issue(stream):
            h = st["h"] = Host(t)
            v = self._red_view(h.t, red)
            self._reduce_call(red, lambda op: self.comm.all_reduce(v.data_ptr(), v.data_ptr(), v.numel(),
                                                                   red.gocl_dtype, op, stream))

        def finish():
            st["h"].write_back()
        return issue, finish

    def allreduce(self, tensors, opts=None, none_ok: bool = False) -> GoclWork | None:
        # The latency path: one dense host tensor, a reduction gocl has
        # natively for its dtype (decided once per (dtype, op), see _fast).
        # Every lookup here is a measured cost: a ReduceOp property read
        # alone is ~0.5 us, so it is read once and keyed by _op_key (its
        # RedOpType; PREMUL_SUM, which carries a factor, is never cached).
        # none_ok: the caller takes None for a synchronous call that is done
        # (torch.distributed's wrappers; a completed Work costs ~1.5 us).
        if opts is not None and len(tensors) == 1:
            t = tensors[0]
            fast = self._fast.get((t.dtype, _op_key(opts.reduceOp)))
            if (fast and t.layout is _STRIDED and t.is_cpu and t.is_contiguous()
                    and not (t.is_neg() or t.is_conj() or _staging._FORCE)):
                # _now written out: through it this path costs 0.6-0.9 µs more
                # (bench/torch_overhead.py, pg.allreduce sync 5.7 -> 6.6 µs).
                ex = self.executor
                if ex.inline_ok():
                    self.seq += 1
                    p = t.data_ptr()
                    h = self.comm.handle
                    if not (opts.asyncOp if HAS_ASYNC_OP else caller_async(opts)):
                        rc = self._c_all_reduce(p, p, t.numel(), fast[0], fast[1], h, None)
                        if rc:
                            _core.check(rc, h)
                        return None if none_ok else completed_work([t])
                    with ex.lock:  # queued on the group's stream; the Work holds t until done
                        rc = self._c_all_reduce(p, p, t.numel(), fast[0], fast[1], h, ex.stream_handle())
                        if rc:
                            _core.check(rc, h)
                        return ex.queued([t], name="allreduce")
        return self._allreduce(tensors, opts if opts is not None else AllreduceOptions())

    def _allreduce(self, tensors, opts) -> GoclWork:
        t = self._one(tensors, "allreduce")
        if t.layout == torch.sparse_coo:
            return self.allreduce_sparse(tensors, opts)
        red = self._reduction(t.dtype, opts.reduceOp)
        is_async = caller_async(opts)
        self._native(t.dtype, opts.reduceOp)  # the next call with these takes the latency path
        # a synchronous call on a host tensor (gocl's NULL stream orders it
        # after the group's queued work)
        if red.kind == "native" and direct(t) and self.executor.inline_ok():
            v = t if red.view is None else self._red_view(t, red)
            p = v.data_ptr()
            return self._now(opts, self._c_all_reduce, (p, p, v.numel(), red.gocl_dtype, red.gocl_op), [t],
                             name="allreduce", is_async=is_async)
        issue, finish = self._allreduce_steps(t, red)
        return self._submit(Task("allreduce", issue, finish, [t], [t]), opts, is_async)

    def allreduce_sparse(self, tensors, opts=None) -> GoclWork:
        """SUM of sparse COO tensors, as gloo does it: every rank's indices
        and values are gathered, concatenated and coalesced (the result is
        written into the tensor, whose nnz may change)."""
        opts = opts if opts is not None else AllreduceOptions()
        t = self._one(tensors, "allreduce")
        if t.layout != torch.sparse_coo:
            raise self._err(f"sparse allreduce: the tensor's layout is {t.layout}, not torch.sparse_coo")
        if _types.op_type(opts.reduceOp) != _types.R.SUM:
            raise _types.UnsupportedError(f"gocl: sparse allreduce supports only SUM, not "
                                          f"{_types.op_name(opts.reduceOp).upper()} (rank {self.rank})")

        def gather(x):  # every rank's x (sizes differ in dim 0 after moving it first)
            x = x.contiguous()
            n = torch.tensor([x.shape[0]], dtype=torch.int64)
            counts = torch.empty(self.size, dtype=torch.int64)
            self.comm.all_gather(n.data_ptr(), counts.data_ptr(), 1, _core.INT64)
            outs = [torch.empty((int(c), *x.shape[1:]), dtype=x.dtype) for c in counts]
            issue, finish = self._allgather_list_steps(outs, x)
            issue(None)
            finish()
            return torch.cat(outs, 0)

        def issue(_stream):  # every step on the NULL stream: each reads the one before
            s = t.detach().cpu().coalesce()
            idx = gather(s.indices().t())
            val = gather(s.values())
            total = torch.sparse_coo_tensor(idx.t(), val, s.shape).coalesce()
            with torch.no_grad():
                t.copy_(total.to(t.device))
        return self._submit(Task("allreduce_sparse", issue, None, [t], blocking=True), opts)

    def allreduce_coalesced(self, tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else AllreduceCoalescedOptions()
        tensors = list(tensors)
        if not tensors:
            return self._submit(Task("allreduce_coalesced", lambda stream: None), opts)
        reds = [self._reduction(t.dtype, opts.reduceOp) for t in tensors]
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) == 1 and reds[0].kind != "bitwise" and len(tensors) > 1:
            # One flat buffer, one gocl call (DDP-style bucketing).
            red = reds[0]
            st = {}

            def issue(stream):
                flat = st["flat"] = torch.cat([t.detach().reshape(-1).cpu() for t in tensors])
                v = self._red_view(flat, red)
                self._reduce_call(red, lambda op: self.comm.all_reduce(v.data_ptr(), v.data_ptr(), v.numel(),
                                                                       red.gocl_dtype, op, stream))

            def finish():
                off = 0
                for t in tensors:
                    n = t.numel()
                    copy_out(t, st["flat"][off:off + n].view(t.shape))
                    off += n
            return self._submit(Task("allreduce_coalesced", issue, finish, tensors, tensors), opts)
        steps = [self._allreduce_steps(t, r) for t, r in zip(tensors, reds)]
        return self._submit(self._combined("allreduce_coalesced", steps, tensors, tensors), opts)

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

    # ------------------------------------------------------------ broadcast, reduce
    def broadcast(self, tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else BroadcastOptions()
        t = self._one(tensors, "broadcast")
        root = self._check_root(opts.rootRank, "broadcast")
        st = {}

        def issue(stream):
            h = st["h"] = Host(t, read=self.rank == root)
            b = h.bytes()
            self.comm.broadcast(b.data_ptr(), b.data_ptr(), b.numel(), U8, root, stream)

        def finish():
            if self.rank != root:
                st["h"].write_back()
        return self._submit(Task("broadcast", issue, finish, [t], [t]), opts)

    def _reduce_steps(self, send: torch.Tensor, out: torch.Tensor | None, red, root: int):
        """Reduce send (every rank) into out (at root only; None elsewhere)."""
        st = {}
        me_root = self.rank == root
        if red.kind == "bitwise":
            def issue(stream):
                h = st["h"] = Host(send)
                n = h.nbytes
                tmp = st["tmp"] = torch.empty(self.size * n if me_root else 0, dtype=torch.uint8)
                self.comm.gather(h.bytes().data_ptr(), tmp.data_ptr() if me_root else None, n, U8, root, stream)

            def finish():
                if me_root:
                    res = self._local_reduce(st["tmp"], red, send.dtype)
                    copy_out(out, res.view(out.shape))
            return issue, finish

        def issue(stream):
            h = st["h"] = Host(send)
            if out is send or not me_root:
                o = h
            else:
                o = Host(out, read=False)
            st["o"] = o
            sv = self._red_view(h.t, red)
            ov = self._red_view(o.t, red)
            self._reduce_call(red, lambda op: self.comm.reduce(sv.data_ptr(), ov.data_ptr(), sv.numel(),
                                                               red.gocl_dtype, op, root, stream))

        def finish():
            if me_root:
                st["o"].write_back()
        return issue, finish

    def reduce(self, tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else ReduceOptions()
        t = self._one(tensors, "reduce")
        root = self._check_root(opts.rootRank, "reduce")
        red = self._reduction(t.dtype, opts.reduceOp)
        issue, finish = self._reduce_steps(t, t, red, root)
        return self._submit(Task("reduce", issue, finish, [t], [t]), opts)

    # ------------------------------------------------------------ all-gather
    def _same_shape_bytes(self, tensors, dtype, nbytes) -> bool:
        return all(x.dtype == dtype and x.numel() * x.element_size() == nbytes for x in tensors)

    def allgather(self, output_tensors, input_tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else AllgatherOptions()
        inp = self._one(input_tensors, "allgather")
        outs = list(self._one(output_tensors, "allgather"))
        if len(outs) != self.size:
            raise self._err(f"allgather: the output list has {len(outs)} tensors for {self.size} ranks")
        issue, finish = self._allgather_list_steps(outs, inp)
        return self._submit(Task("allgather", issue, finish, [outs], [inp, *outs]), opts)

    def _allgather_list_steps(self, outs, inp):
        n = inp.numel() * inp.element_size()
        st = {}
        if self._same_shape_bytes(outs, inp.dtype, n):
            def issue(stream):
                h = Host(inp)
                base = self._consecutive(outs, n)
                if base is None:
                    tmp = st["tmp"] = torch.empty(self.size * n, dtype=torch.uint8)
                    base = tmp.data_ptr()
                lo, hi = base, base + self.size * n
                p = h.t.data_ptr()
                if n and p < hi and lo < p + n and p != base + self.rank * n:  # overlapping, not in place
                    h = Host(inp, copy=True)
                st["h"] = h
                self.comm.all_gather(h.bytes().data_ptr(), base, n, U8, stream)

            def finish():
                tmp = st.get("tmp")
                if tmp is None:
                    return
                for i, o in enumerate(outs):
                    copy_out(o, tmp[i * n:(i + 1) * n].view(o.dtype).view(o.shape))
            return issue, finish

        # Tensors of different sizes: every rank sends its input to every
        # other rank and receives each peer's block into that peer's output.
        if outs[self.rank].numel() != inp.numel() or any(o.dtype != inp.dtype for o in outs):
            raise self._err("allgather: output tensors must have the input's dtype, and this rank's "
                            "output the input's size")

        def issue(stream):
            h = st["h"] = Host(inp)
            hs = st["hs"] = [Host(o, read=False) for o in outs]
            with _core.group():
                for p in range(self.size):
                    if p == self.rank:
                        continue
                    if n:
                        self.comm.send(h.bytes().data_ptr(), n, U8, p, stream)
                    if hs[p].nbytes:
                        self.comm.recv(hs[p].bytes().data_ptr(), hs[p].nbytes, U8, p, stream)
            as_bytes(hs[self.rank].t).copy_(h.bytes())

        def finish():
            for x in st["hs"]:
                x.write_back()
        return issue, finish

    def allgather_coalesced(self, output_lists, input_tensors, opts=None) -> GoclWork:
        """torch's layout (as gloo's): output_lists[r] is rank r's list,
        holding one tensor per input tensor."""
        opts = opts if opts is not None else AllgatherOptions()
        output_lists = [list(outs) for outs in output_lists]
        inputs = list(input_tensors)
        if len(output_lists) != self.size:
            raise self._err(f"allgather_coalesced: output_tensor_lists has {len(output_lists)} lists; it needs "
                            f"one per rank ({self.size}), each holding one tensor per input tensor")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(inputs):
                raise self._err(f"allgather_coalesced: output_tensor_lists[{r}] has {len(outs)} tensors for "
                                f"{len(inputs)} input tensors")
        steps = [self._allgather_list_steps([output_lists[r][j] for r in range(self.size)], inp)
                 for j, inp in enumerate(inputs)]
        every = [x for outs in output_lists for x in outs] + inputs
        return self._submit(self._combined("allgather_coalesced", steps, output_lists, every), opts)

    def _allgather_base_steps(self, out, inp):
        if out.dtype != inp.dtype or out.numel() != elems("all_gather", inp.numel(), self.size)[1]:
            raise self._err(f"all_gather_into_tensor: output has {out.numel()} {out.dtype} elements, "
                            f"expected {self.size} x {inp.numel()} {inp.dtype}")
        st = {}

        def issue(stream):
            o = st["o"] = Host(out, read=False)
            h = Host(inp)
            n = h.nbytes
            if overlaps(h.t, o.t) and h.t.data_ptr() != o.t.data_ptr() + self.rank * n:
                h = Host(inp, copy=True)
            st["h"] = h
            self.comm.all_gather(h.bytes().data_ptr(), o.bytes().data_ptr(), n, U8, stream)

        def finish():
            st["o"].write_back()
        return issue, finish

    def all_gather_single(self, output, input, opts=None) -> GoclWork:  # noqa: A002
        if opts is not None and self.executor.inline_ok() and output.dtype == input.dtype and _host(output) \
                and _host(input) and output.numel() == self.size * input.numel():
            n = input.numel() * input.element_size()
            p, q = input.data_ptr(), output.data_ptr()
            if p + n <= q or q + self.size * n <= p or p == q + self.rank * n:  # apart, or in place
                return self._now(opts, self._c_all_gather, (p, q, n, U8), [output], input)
        opts = opts if opts is not None else AllgatherOptions()
        issue, finish = self._allgather_base_steps(output, input)
        return self._submit(Task("all_gather_into_tensor", issue, finish, [output], [output, input]), opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None) -> GoclWork:
        opts = opts if opts is not None else AllgatherOptions()
        if len(outputs) != len(inputs):
            raise self._err("all_gather_into_tensor_coalesced: as many outputs as inputs are needed")
        steps = [self._allgather_base_steps(o, i) for o, i in zip(outputs, inputs)]
        return self._submit(self._combined("all_gather_into_tensor_coalesced", steps, list(outputs),
                                           [*outputs, *inputs]), opts)

    # ------------------------------------------------------------ reduce-scatter
    def _reduce_scatter_flat_steps(self, out, src_fill, red, dtype):
        """Reduce-scatter a flat host buffer made by src_fill() (size x n
        elements of dtype) into out."""
        st = {}
        if red.kind == "bitwise":
            def issue(stream):
                src = src_fill()
                n = out.numel() * src.element_size()
                tmp = st["tmp"] = torch.empty(self.size * n, dtype=torch.uint8)
                st["src"] = src
                self.comm.all_to_all(as_bytes(src).data_ptr(), tmp.data_ptr(), n, U8, stream)

            def finish():
                res = self._local_reduce(st["tmp"], red, dtype)
                copy_out(out, res.view(out.shape))
            return issue, finish

        def issue(stream):
            src = st["src"] = src_fill()
            o = Host(out, read=False)
            if overlaps(src, o.t) and src.data_ptr() + self.rank * o.nbytes != o.t.data_ptr():
                src = st["src"] = src.clone()
            st["o"] = o
            sv = self._red_view(src, red)
            ov = self._red_view(o.t, red)
            self._reduce_call(red, lambda op: self.comm.reduce_scatter(sv.data_ptr(), ov.data_ptr(), ov.numel(),
                                                                       red.gocl_dtype, op, stream))

        def finish():
            st["o"].write_back()
        return issue, finish

    def _reduce_scatter_base_steps(self, out, inp, op):
        if out.dtype != inp.dtype or inp.numel() != elems("reduce_scatter", out.numel(), self.size)[0]:
            raise self._err(f"reduce_scatter_tensor: input has {inp.numel()} {inp.dtype} elements, "
                            f"expected {self.size} x {out.numel()} {out.dtype}")
        red = self._reduction(inp.dtype, op)
        return self._reduce_scatter_flat_steps(out, lambda: Host(inp).t, red, inp.dtype)

    def reduce_scatter_single(self, output, input, opts=None) -> GoclWork:  # noqa: A002
        if opts is not None and self.executor.inline_ok() and output.dtype == input.dtype \
                and input.numel() == self.size * output.numel():
            fast = self._native(input.dtype, opts.reduceOp)
            if fast and _host(output) and _host(input):
                n = output.numel()
                p, q = input.data_ptr(), output.data_ptr()
                m = n * output.element_size()
                if p + self.size * m <= q or q + m <= p or q == p + self.rank * m:  # apart, or in place
                    return self._now(opts, self._c_reduce_scatter, (p, q, n, fast[0], fast[1]), [output], input)
        opts = opts if opts is not None else ReduceScatterOptions()
        issue, finish = self._reduce_scatter_base_steps(output, input, opts.reduceOp)
        return self._submit(Task("reduce_scatter_tensor", issue, finish, [output], [output, input]), opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None) -> GoclWork:
        opts = opts if opts is not None else ReduceScatterOptions()
        if len(outputs) != len(inputs):
            raise self._err("reduce_scatter_tensor_coalesced: as many outputs as inputs are needed")
        steps = [self._reduce_scatter_base_steps(o, i, opts.reduceOp) for o, i in zip(outputs, inputs)]
        return self._submit(self._combined("reduce_scatter_tensor_coalesced", steps, list(outputs),
                                           [*outputs, *inputs]), opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else ReduceScatterOptions()
        out = self._one(output_tensors, "reduce_scatter")
        ins = list(self._one(input_tensors, "reduce_scatter"))
        if len(ins) != self.size:
            raise self._err(f"reduce_scatter: the input list has {len(ins)} tensors for {self.size} ranks")
        if any(x.dtype != out.dtype for x in ins):
            raise self._err("reduce_scatter: input tensors must have the output's dtype")
        red = self._reduction(out.dtype, opts.reduceOp)
        n = out.numel()
        if all(x.numel() == n for x in ins):
            def fill():
                flat = torch.empty(self.size * n, dtype=out.dtype)
                for i, x in enumerate(ins):
                    flat[i * n:(i + 1) * n].view(x.shape).copy_(x)
                return flat
            issue, finish = self._reduce_scatter_flat_steps(out, fill, red, out.dtype)
            return self._submit(Task("reduce_scatter", issue, finish, [out], [out, *ins]), opts)
        # Uneven blocks: one reduce per rank (rank r is root of block r), in one group.
        if ins[self.rank].numel() != n:
            raise self._err("reduce_scatter: this rank's input block must have the output's size")
        steps = [self._reduce_steps(x, out if r == self.rank else None, red, r) for r, x in enumerate(ins)]
        return self._submit(self._combined("reduce_scatter", steps, [out], [out, *ins]), opts)

    # ------------------------------------------------------------ all-to-all
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

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                          opts=None) -> GoclWork:
        opts = opts if opts is not None else AllToAllOptions()
        out, inp = output, input
        if out.dtype != inp.dtype:
            raise self._err(f"all_to_all_single: output dtype {out.dtype} != input dtype {inp.dtype}")
        out_splits, in_splits = list(output_split_sizes or []), list(input_split_sizes or [])
        st = {}
        if not out_splits and not in_splits:
            if inp.numel() % self.size or elems("all_to_all", inp.numel() // self.size, self.size)[1] != out.numel():
                raise self._err(f"all_to_all_single: {inp.numel()} input and {out.numel()} output elements "
                                f"do not split evenly over {self.size} ranks")

            def issue(stream):
                o = st["o"] = Host(out, read=False)
                h = Host(inp)
                if overlaps(h.t, o.t):
                    h = Host(inp, copy=True)
                st["h"] = h
                self.comm.all_to_all(h.bytes().data_ptr(), o.bytes().data_ptr(), h.nbytes // self.size, U8, stream)

            def finish():
                st["o"].write_back()
            return self._submit(Task("all_to_all_single", issue, finish, [out], [out, inp]), opts)

        in_splits = self._splits(in_splits, inp, "input")
        out_splits = self._splits(out_splits, out, "output")
        in_row = self._row_bytes(inp)
        out_row = self._row_bytes(out)

        def issue(stream):
            o = st["o"] = Host(out, read=False)
            h = Host(inp)
            if overlaps(h.t, o.t):
                h = Host(inp, copy=True)
            st["h"] = h
            hb, ob = h.bytes(), o.bytes()
            sends, recvs = [], []
            si = so = 0
            for p in range(self.size):
                a, b = in_splits[p] * in_row, out_splits[p] * out_row
                sends.append(hb[si:si + a])
                recvs.append(ob[so:so + b])
                si += a
                so += b
            if sends[self.rank].numel() != recvs[self.rank].numel():
                raise self._err(f"all_to_all_single: this rank sends itself {sends[self.rank].numel()} bytes "
                                f"but expects {recvs[self.rank].numel()}")
            self._p2p_exchange(sends, recvs, stream)

        def finish():
            st["o"].write_back()
        return self._submit(Task("all_to_all_single", issue, finish, [out], [out, inp]), opts)

    def _splits(self, splits, t, what):
        rows = t.shape[0] if t.dim() > 0 else 1
        if not splits:
            if rows % self.size:
                raise self._err(f"all_to_all_single: {what} dim 0 ({rows}) does not split evenly over "
                                f"{self.size} ranks")
            return [rows // self.size] * self.size
        if len(splits) != self.size or sum(splits) != rows or any(s < 0 for s in splits):
            raise self._err(f"all_to_all_single: {what} splits {splits} must be {self.size} sizes "
                            f"summing to dim 0 ({rows})")
        return splits

    @staticmethod
    def _row_bytes(t):
        rows = t.shape[0] if t.dim() > 0 else 1
        return (t.numel() // rows) * t.element_size() if rows else 0

    def alltoall(self, output_tensors, input_tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else AllToAllOptions()
        outs, ins = list(output_tensors), list(input_tensors)
        if len(outs) != self.size or len(ins) != self.size:
            raise self._err(f"all_to_all: need {self.size} input and output tensors, got {len(ins)} and "
                            f"{len(outs)}")
        dtype = ins[0].dtype
        if any(x.dtype != dtype for x in outs + ins):
            raise self._err("all_to_all: every tensor must have the same dtype")
        st = {}
        n = ins[0].numel() * ins[0].element_size()
        if self._same_shape_bytes(outs + ins, dtype, n):
            def issue(stream):
                src = torch.empty(self.size * n, dtype=torch.uint8)
                for i, x in enumerate(ins):
                    src[i * n:(i + 1) * n].view(dtype).view(x.shape).copy_(x)
                dst = st["dst"] = torch.empty(self.size * n, dtype=torch.uint8)
                st["src"] = src
                self.comm.all_to_all(src.data_ptr(), dst.data_ptr(), n, U8, stream)

            def finish():
                dst = st["dst"]
                for i, o in enumerate(outs):
                    copy_out(o, dst[i * n:(i + 1) * n].view(dtype).view(o.shape))
            return self._submit(Task("all_to_all", issue, finish, [outs], outs + ins), opts)

        def issue(stream):
            hs = st["hs"] = [Host(x) for x in ins]
            os_ = st["os"] = [Host(x, read=False) for x in outs]
            self._p2p_exchange([h.bytes() for h in hs], [o.bytes() for o in os_], stream)

        def finish():
            for o in st["os"]:
                o.write_back()
        return self._submit(Task("all_to_all", issue, finish, [outs], outs + ins), opts)

    # ------------------------------------------------------------ gather, scatter
    # Point-to-point inside one group: the same traffic as gocl's direct
    # gather/scatter, and it also takes blocks of different sizes.
    def _rooted_list(self, tensors, root: int, mine, what: str, side: str) -> list:
        """The root's list of one tensor per rank (gather's outputs, scatter's
        inputs), checked against the other side's tensor; [] off the root."""
        if self.rank != root:
            return []
        ts = list(tensors[0]) if tensors else []
        if len(ts) != self.size:
            raise self._err(f"{what}: the root's {side} list has {len(ts)} tensors for {self.size} ranks")
        if any(t.dtype != mine.dtype for t in ts):
            other = "input" if side == "output" else "output"
            raise self._err(f"{what}: {side} tensors must have the {other}'s dtype")
        return ts

    def _at(self, rank: int, x) -> list:
        """A per-peer list holding x for rank and None for the others."""
        out = [None] * self.size
        out[rank] = x
        return out

    def gather(self, output_tensors, input_tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else GatherOptions()
        inp = self._one(input_tensors, "gather")
        root = self._check_root(opts.rootRank, "gather")
        me_root = self.rank == root
        outs = self._rooted_list(output_tensors, root, inp, "gather", "output")
        st = {}

        def issue(stream):
            h = st["h"] = Host(inp)
            if me_root:
                os_ = st["os"] = [Host(o, read=False) for o in outs]
                self._p2p_exchange(self._at(self.rank, h.bytes()), [o.bytes() for o in os_], stream)
            else:
                self._p2p_exchange(self._at(root, h.bytes()), [None] * self.size, stream)

        def finish():
            for o in st.get("os", ()):
                o.write_back()
        return self._submit(Task("gather", issue, finish, [outs] if me_root else [], [inp, *outs]), opts)

    def scatter(self, output_tensors, input_tensors, opts=None) -> GoclWork:
        opts = opts if opts is not None else ScatterOptions()
        out = self._one(output_tensors, "scatter")
        root = self._check_root(opts.rootRank, "scatter")
        me_root = self.rank == root
        ins = self._rooted_list(input_tensors, root, out, "scatter", "input")
        st = {}

        def issue(stream):
            o = st["o"] = Host(out, read=False)
            if me_root:
                hs = st["hs"] = [Host(x) for x in ins]
                self._p2p_exchange([h.bytes() for h in hs], self._at(root, o.bytes()), stream)
            else:
                self._p2p_exchange([None] * self.size, self._at(root, o.bytes()), stream)

        def finish():
            st["o"].write_back()
        return self._submit(Task("scatter", issue, finish, [out], [out, *ins]), opts)

    # ------------------------------------------------------------ point to point
    # gocl delivers a pair's messages in the order they were sent. A tag
    # travels with its message so that a receive can never take a message
    # sent with another tag silently: tag 0 sends the tensor's bytes as
    # they are (uint8, no copy); a nonzero tag sends the tag (8 bytes)
    # then them, as int8, and the receive checks the tag. So
    # equal tags posted in the order sent work, a receive that meets a
    # message of another tag fails naming both tags (gloo would reorder:
    # gocl cannot, as a receive must know a message's size before it is
    # posted), and a tag on one side only fails as a datatype mismatch.
    _TAG_BYTES = 8

    def _tagged(self, tag) -> int:
        tag = int(tag)
        if not -(1 << 63) <= tag < (1 << 63):
            raise self._err(f"send/recv: tag {tag} does not fit in 64 bits")
        return tag

    def send(self, tensors, dstRank: int, tag: int = 0) -> GoclWork:  # noqa: N803
        t = self._one(tensors, "send")
        peer = self._check_peer(dstRank, "send")
        tag = self._tagged(tag)
        st = {}

        if tag == 0:
            def issue(stream):
                h = st["h"] = Host(t)
                self.comm.send(h.bytes().data_ptr(), h.nbytes, U8, peer, stream)
        else:
            def issue(stream):
                b = Host(t).bytes()
                n = b.numel()
                buf = st["buf"] = torch.empty(n + self._TAG_BYTES, dtype=torch.uint8)
                buf[:self._TAG_BYTES].view(torch.int64)[0] = tag  # first: aligned
                buf[self._TAG_BYTES:].copy_(b)
                self.comm.send(buf.data_ptr(), buf.numel(), _core.INT8, peer, stream)
        self.seq += 1
        return self.executor.submit(Task("send", issue, None, [t], [t], p2p=True), async_op=True)

    def _recv_steps(self, t, tag: int, peer, call):
        """issue and finish of a receive into t; call(ptr, nbytes, dtype, stream)
        makes the gocl call; peer() is the sender (known once it ran)."""
        st = {}
        if tag == 0:
            def issue(stream):
                h = st["h"] = Host(t, read=False)
                call(h.bytes().data_ptr(), h.nbytes, U8, stream)

            def finish():
                st["h"].write_back()
            return issue, finish

        def issue(stream):
            h = st["h"] = Host(t, read=False)
            buf = st["buf"] = torch.empty(h.nbytes + self._TAG_BYTES, dtype=torch.uint8)
            call(buf.data_ptr(), buf.numel(), _core.INT8, stream)

        def finish():
            h, buf = st["h"], st["buf"]
            got = int(buf[:self._TAG_BYTES].view(torch.int64)[0])
            if got != tag:
                raise RuntimeError(
                    f"gocl recv on {self.where()}: the next message from rank {peer()} was sent with tag {got}, "
                    f"but this receive (tag={tag}) expects tag {tag}; the message was not delivered. gocl "
                    f"delivers each rank's messages in the order sent and does not reorder them by tag (gloo "
                    f"does): post the receives from a rank in the order that rank sends, with the same tags")
            h.bytes().copy_(buf[self._TAG_BYTES:])
            h.write_back()
        return issue, finish

    def recv(self, tensors, srcRank: int, tag: int = 0) -> GoclWork:  # noqa: N803
        t = self._one(tensors, "recv")
        peer = self._check_peer(srcRank, "recv")
        tag = self._tagged(tag)
        issue, finish = self._recv_steps(
            t, tag, lambda: peer, lambda p, n, dt, stream: self.comm.recv(p, n, dt, peer, stream))
        self.seq += 1
        return self.executor.submit(Task("recv", issue, finish, [t], [t], p2p=True), async_op=True)

    def recv_anysource(self, tensors, tag: int = 0) -> GoclWork:
        """Receive from whichever rank sends first (gloo's recvAnysource):
        the Work's _source_rank() is that rank. It runs alone, after the
        group's queued work (its peer is known only once it has run)."""
        t = self._one(tensors, "recv")
        tag = self._tagged(tag)

        def call(p, n, dt, _stream):
            work.source = self.comm.recv_any(p, n, dt)

        issue, finish = self._recv_steps(t, tag, lambda: work.source, call)
        self.seq += 1
        # held back with the group's isend/irecv (program order), then run alone
        work = self.executor.submit(Task("recvAnySource", issue, finish, [t], [t], p2p=True, blocking=True),
                                    async_op=True)
        return work

    # ------------------------------------------------------------ barrier
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

    # ------------------------------------------------------------ coalescing, lifetime
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
