package kernels

import (
	"math"
	"unsafe"

	"gocl/abi"
)

// Vector kernels (generated per architecture, see gen/) process whole
// simdBlock-byte blocks; the portable loops finish the tail, so every
// length and alignment works and tiny buffers cost one extra call.

const simdBlock = 32

// nontemporalBytes is the Accumulate length from which the result is written
// with non-temporal stores, past the caches: a result this large, with its
// two inputs, fills much of a last-level cache anyway, so keeping it there
// only evicts other data, and non-temporal stores skip the read-for-ownership of
// every destination line (bench/CALLPATH.md, "Kernels"). glibc's memcpy likewise bypasses the caches for copies that are a sizeable
// fraction of the shared cache.
var nontemporalBytes = 8 << 20 // a variable so tests can lower it

// binaryKernel computes d = a op b over n bytes (a multiple of simdBlock);
// k points at the op's scalar, if any. unaryKernel computes d = f(s).
type (
	binaryKernel func(d, a, b *byte, n int, k *byte)
	unaryKernel  func(d, s *byte, n int, k *byte)
)

// simdSet holds one dtype's kernels; a nil entry keeps the portable loop.
// accum is indexed by RedOp (Avg accumulates as Sum); preMulSum and scale
// take the PreMulSum scalar (float32 for fp16/bf16), div the Avg divisor
// (float64 for float64 and the 32-bit integers, float32 otherwise). The NT
// twins use non-temporal stores and need a 32-byte aligned dst.
type simdSet struct {
	accum       [abi.NumOps]binaryKernel
	preMulSum   binaryKernel
	scale       unaryKernel
	div         unaryKernel
	accumNT     [abi.NumOps]binaryKernel
	preMulSumNT binaryKernel
}

// ISA names the instruction set the reducers use: "avx2" or "portable".
func ISA() string {
	if simdKernels() != nil {
		return simdName
	}
	return "portable"
}

// simdKernels is the table NewReducer uses: the CPU's kernels, except
// under the race detector, which cannot see memory that assembly touches;
// there the portable loops keep every buffer access checked (a lent
// shared-memory slot written while a peer reads it must still be caught).
func simdKernels() *[abi.NumTypes]simdSet {
	if raceEnabled {
		return nil
	}
	return cpuKernels()
}

// vec3 runs kern over whole blocks and tail over the rest; from
// nontemporalBytes on, nt with dst aligned by running tail over the head first
// (dst must hold whole elements of size at aligned addresses for that).
func vec3(kern, nt binaryKernel, size int, k *byte, tail func(d, a, b []byte)) func(d, a, b []byte) {
	return func(d, a, b []byte) {
		run := kern
		if len(d) >= nontemporalBytes && nt != nil {
			if head := int(-uintptr(unsafe.Pointer(&d[0])) & (simdBlock - 1)); head%size == 0 {
				tail(d[:head], a[:head], b[:head])
				d, a, b = d[head:], a[head:], b[head:]
				run = nt
			}
		}
		n := len(d) &^ (simdBlock - 1)
		if n > 0 {
			run(&d[0], &a[0], &b[0], n, k)
		}
		if n < len(d) {
			tail(d[n:], a[n:], b[n:])
		}
	}
}

func vec2(kern unaryKernel, k *byte, tail func(d, s []byte)) func(d, s []byte) {
	return func(d, s []byte) {
		n := len(d) &^ (simdBlock - 1)
		if n > 0 {
			kern(&d[0], &s[0], n, k)
		}
		if n < len(d) {
			tail(d[n:], s[n:])
		}
	}
}

func vec1(kern unaryKernel, k *byte, tail func(d []byte)) func(d []byte) {
	return func(d []byte) {
		n := len(d) &^ (simdBlock - 1)
		if n > 0 {
			kern(&d[0], &d[0], n, k)
		}
		if n < len(d) {
			tail(d[n:])
		}
	}
}

// vectorize replaces r's portable loops with s's kernels where s has them.
// The kernels read their scalar through a pointer into a private, aligned
// copy that lives as long as the closures.
func (r *Reducer) vectorize(s *simdSet, nranks int, scalar []byte) {
	if r.op == abi.PreMulSum {
		k := new(uint64)
		switch r.t {
		case abi.Float16:
			*k = uint64(math.Float32bits(F16ToF32(uint16(scalar[0]) | uint16(scalar[1])<<8)))
		case abi.Bfloat16:
			*k = uint64(math.Float32bits(BF16ToF32(uint16(scalar[0]) | uint16(scalar[1])<<8)))
		default:
			copy(unsafe.Slice((*byte)(unsafe.Pointer(k)), 8), scalar)
		}
		kp := (*byte)(unsafe.Pointer(k))
		if s.preMulSum != nil {
			r.accum = vec3(s.preMulSum, s.preMulSumNT, r.size, kp, r.accum)
		}
		if s.scale != nil {
			r.prepare = vec2(s.scale, kp, r.prepare)
		}
	} else if kern := s.accum[r.op]; kern != nil {
		r.accum = vec3(kern, s.accumNT[r.op], r.size, nil, r.accum)
	}
	if r.finalize != nil && s.div != nil {
		k := new(uint64)
		switch r.t {
		case abi.Float64, abi.Int32, abi.Uint32:
			*k = math.Float64bits(float64(nranks))
		default:
			*k = uint64(math.Float32bits(float32(nranks)))
		}
		r.finalize = vec1(s.div, (*byte)(unsafe.Pointer(k)), r.finalize)
	}
}
