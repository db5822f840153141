"""The reducing c10d operations of an Engine: all_reduce (and its coalesced
and sparse forms), reduce, reduce_scatter. Reductions gocl lacks (bitwise
ops) are an all-gather of every rank's data (``_movement``'s steps) reduced
locally with torch's bitwise functions."""

from __future__ import annotations

import functools

import torch
from torch._C._distributed_c10d import (
    AllreduceCoalescedOptions,
    AllreduceOptions,
    ReduceOptions,
    ReduceScatterOptions,
)

from .. import _core
from .._sizes import elems
from . import _staging, _types
from ._internals import HAS_ASYNC_OP, caller_async
from ._staging import Host, as_bytes, copy_out, direct, overlaps
from ._work import GoclWork, Task, completed_work

from ._calls import _SIGNED_TWIN, _STRIDED, U8, Calls, _host, _op_key


class Reductions(Calls):
    """all_reduce, reduce, reduce_scatter."""

    def _reduction(self, dtype, op):
        return _types.reduction(dtype, op, self.rank)

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
