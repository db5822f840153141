"""The data-movement c10d operations of an Engine: broadcast, all_gather,
gather, scatter, all_to_all. Every dtype moves as raw bytes; uneven splits
and lists of tensors of different sizes are grouped sends and receives
(``Calls._p2p_exchange``)."""

from __future__ import annotations


import torch
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllToAllOptions,
    BroadcastOptions,
    GatherOptions,
    ScatterOptions,
)

from .. import _core
from .._sizes import elems
from ._staging import Host, as_bytes, copy_out, direct, overlaps
from ._work import GoclWork, Task

from ._calls import U8, Calls, _host


class DataMovement(Calls):
    """broadcast, all_gather, gather, scatter, all_to_all."""

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
