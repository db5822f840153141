package kernels

// Fused steps: one pass over memory where a collective step has two
// outputs. NCCL's recvReduceCopySend reduces a received chunk with the
// local input, keeps the result and forwards it; done as a reduction then
// a copy, the result is read back from memory (often a cache level out) a
// second time. AccumulateCopy reduces block by block and copies each block
// while it is still in L1, so its inputs are read from memory once.

// fuseBlock is AccumulateCopy's unit: its output block is copied while it
// is still in the L1 cache (32 KiB and more on current x86 and arm64
// cores), and it is large enough that the per-block calls cost little. A
// multiple of every element size.
const fuseBlock = 16 << 10

// Nontemporal reports whether a collective whose result is n bytes per rank
// should write that result with non-temporal stores: from the size on which
// Accumulate writes its own result so (a result that large, with its inputs,
// no longer stays in the shared cache, so keeping it there only evicts data
// that will be read again, and non-temporal stores skip each line's read for
// ownership).
func Nontemporal(n int) bool { return n >= nontemporalBytes }

// AccumulateCopy writes final(acc ⊕ pre(in)) (Finalize applied: Avg
// divides) into out and into dst, reading acc and in once. With nontemporal, dst
// is written with non-temporal stores where the CPU has them (see Nontemporal);
// out always with ordinary stores (it is the copy that is read next, such
// as a peer's FIFO slot). All four have the same length; out and dst may be
// acc or in (same start) but must not partially overlap them or each other.
func (r *Reducer) AccumulateCopy(out, dst, acc, in []byte, nontemporal bool) {
	r.check(len(out), len(acc), len(in))
	r.check(len(dst), len(acc), len(in))
	if len(out) == 0 {
		return
	}
	one := &out[0] == &dst[0]
	for o := 0; o < len(out); o += fuseBlock {
		e := min(o+fuseBlock, len(out))
		b := out[o:e]
		r.accum(b, acc[o:e], in[o:e])
		if r.finalize != nil {
			r.finalize(b)
		}
		switch {
		case one:
		case nontemporal:
			copyNontemporal(dst[o:e], b)
		default:
			copy(dst[o:e], b)
		}
	}
	if nontemporal && !one {
		nontemporalFence()
	}
}

// Copy copies src into dst (equal lengths, not partially overlapping).
// With nontemporal it writes with non-temporal stores where the CPU has them
// (see Nontemporal); without, it always uses cached stores: Go's copy uses
// non-temporal stores from 1 MiB on, which sends memory that is read next
// (a FIFO slot, a result the caller reads) to DRAM and makes its reader
// fetch it back.
func Copy(dst, src []byte, nontemporal bool) {
	if len(dst) != len(src) {
		panic("kernels: Copy of unequal lengths")
	}
	if len(dst) == 0 || &dst[0] == &src[0] {
		return
	}
	if nontemporal {
		copyNontemporal(dst, src)
		nontemporalFence()
		return
	}
	const step = 512 << 10 // under runtime.memmove's non-temporal threshold
	for o := 0; o < len(dst); o += step {
		e := min(o+step, len(dst))
		copy(dst[o:e], src[o:e])
	}
}
