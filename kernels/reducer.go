package kernels

import (
	"fmt"
	"unsafe"

	"gocl/abi"
)

// Reducer applies one reduction op to buffers of one datatype. All dispatch
// on (type, op) happens in NewReducer, which stores the selected loops as
// function values; the methods only check lengths and make one indirect
// call per buffer. A Reducer is immutable after creation and therefore safe
// for concurrent use.
type Reducer struct {
	t    abi.DataType
	op   abi.RedOp
	size int

	accum    func(dst, acc, in []byte)
	prepare  func(dst, src []byte) // nil: plain copy
	finalize func(buf []byte)      // nil: no post-step
}

// NewReducer validates its arguments and builds a reducer. nranks is the
// divisor used by Avg. scalar is PreMulSum's multiplier encoded as one
// element of t (t.Size() bytes, little endian); it must be empty for the
// other ops.
//
// The loops are the CPU's vector kernels where it has them (see ISA), the
// portable Go loops otherwise; both give bit-identical results.
func NewReducer(t abi.DataType, op abi.RedOp, nranks int, scalar []byte) (*Reducer, error) {
	return newReducer(t, op, nranks, scalar, simdKernels())
}

// newReducer builds a reducer on the kernels in vec, or on the portable
// loops alone when vec is nil (tests compare the two).
func newReducer(t abi.DataType, op abi.RedOp, nranks int, scalar []byte, vec *[abi.NumTypes]simdSet) (*Reducer, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("unknown datatype %d", int32(t))
	}
	switch op {
	case abi.Sum, abi.Prod, abi.Max, abi.Min, abi.Avg:
		if len(scalar) != 0 {
			return nil, fmt.Errorf("%v takes no scalar, got %d bytes", op, len(scalar))
		}
	case abi.PreMulSum:
		if len(scalar) != t.Size() {
			return nil, fmt.Errorf("premulsum needs a scalar of %d bytes for %v, got %d", t.Size(), t, len(scalar))
		}
	default:
		return nil, fmt.Errorf("unknown reduction op %d", int32(op))
	}
	if op == abi.Avg && nranks < 1 {
		return nil, fmt.Errorf("avg needs nranks >= 1, got %d", nranks)
	}

	r := &Reducer{t: t, op: op, size: t.Size()}
	var div func(buf []byte)
	n := int64(nranks)
	switch t {
	case abi.Int8:
		r.accum, r.prepare = nativeOps[int8](op, scalar)
		div = lift1(func(d []int8) { divSignedLoop(d, n) })
	case abi.Uint8:
		r.accum, r.prepare = nativeOps[uint8](op, scalar)
		div = lift1(func(d []uint8) { divUnsignedLoop(d, uint64(n)) })
	case abi.Int32:
		r.accum, r.prepare = nativeOps[int32](op, scalar)
		div = lift1(func(d []int32) { divSignedLoop(d, n) })
	case abi.Uint32:
		r.accum, r.prepare = nativeOps[uint32](op, scalar)
		div = lift1(func(d []uint32) { divUnsignedLoop(d, uint64(n)) })
	case abi.Int64:
		r.accum, r.prepare = nativeOps[int64](op, scalar)
		div = lift1(func(d []int64) { divSignedLoop(d, n) })
	case abi.Uint64:
		r.accum, r.prepare = nativeOps[uint64](op, scalar)
		div = lift1(func(d []uint64) { divUnsignedLoop(d, uint64(n)) })
	case abi.Float32:
		r.accum, r.prepare = nativeOps[float32](op, scalar)
		div = lift1(func(d []float32) { divFloatLoop(d, float32(n)) })
	case abi.Float64:
		r.accum, r.prepare = nativeOps[float64](op, scalar)
		div = lift1(func(d []float64) { divFloatLoop(d, float64(n)) })
	case abi.Float16:
		r.accum, r.prepare, div = halfOps(&f16Loops, op, scalar, n)
	case abi.Bfloat16:
		r.accum, r.prepare, div = halfOps(&bf16Loops, op, scalar, n)
	}
	// Dividing by one is the identity, so skip the pass entirely.
	if op == abi.Avg && nranks > 1 {
		r.finalize = div
	}
	if vec != nil {
		r.vectorize(&vec[t], nranks, scalar)
	}
	return r, nil
}

// Type returns the reducer's datatype.
func (r *Reducer) Type() abi.DataType { return r.t }

// Op returns the reducer's op.
func (r *Reducer) Op() abi.RedOp { return r.op }

// NeedsPrepare reports whether Prepare differs from a copy (only PreMulSum).
func (r *Reducer) NeedsPrepare() bool { return r.prepare != nil }

// NeedsFinalize reports whether Finalize changes anything (Avg with more
// than one rank).
func (r *Reducer) NeedsFinalize() bool { return r.finalize != nil }

// Prepare writes pre(src) into dst: src scaled by the scalar for PreMulSum,
// a plain copy otherwise. dst and src have the same length and either do not
// overlap or start at the same address.
func (r *Reducer) Prepare(dst, src []byte) {
	r.check(len(dst), len(src), len(src))
	if r.prepare != nil {
		r.prepare(dst, src)
	} else if len(dst) > 0 && &dst[0] != &src[0] {
		copy(dst, src)
	}
}

// Accumulate writes dst[i] = acc[i] op pre(in[i]) for every element. The
// three buffers have the same length, a multiple of the element size; dst
// may be acc or in (same start) but must not partially overlap them.
func (r *Reducer) Accumulate(dst, acc, in []byte) {
	r.check(len(dst), len(acc), len(in))
	r.accum(dst, acc, in)
}

// Finalize applies the post-step in place: Avg divides every element by
// nranks (integers truncate toward zero; float64 divides in float64, the
// other float types in float32). It is a no-op for the other ops.
func (r *Reducer) Finalize(buf []byte) {
	if r.finalize != nil {
		r.check(len(buf), len(buf), len(buf))
		r.finalize(buf)
	}
}

// check panics on mismatched or partial-element buffers: either is a caller
// bug that would otherwise silently leave bytes unreduced.
func (r *Reducer) check(n, a, b int) {
	if n != a || n != b || n&(r.size-1) != 0 { // sizes are powers of two
		panic(fmt.Sprintf("kernels: %v %v: buffer lengths %d, %d, %d must be equal multiples of %d",
			r.t, r.op, n, a, b, r.size))
	}
}

// lift1 and lift3 adapt typed loops to byte buffers.
func lift1[T any](f func(d []T)) func(d []byte) {
	return func(d []byte) { f(view[T](d)) }
}

func lift3[T any](f func(d, a, b []T)) func(d, a, b []byte) {
	return func(d, a, b []byte) { f(view[T](d), view[T](a), view[T](b)) }
}

// nativeOps selects the Accumulate and Prepare loops for a native type.
// Avg accumulates as Sum.
func nativeOps[T number](op abi.RedOp, scalar []byte) (accum func(d, a, b []byte), prepare func(d, s []byte)) {
	switch op {
	case abi.Sum, abi.Avg:
		return lift3(sumLoop[T]), nil
	case abi.Prod:
		return lift3(prodLoop[T]), nil
	case abi.Max:
		return lift3(maxLoop[T]), nil
	case abi.Min:
		return lift3(minLoop[T]), nil
	}
	k := *(*T)(unsafe.Pointer(&scalar[0])) // PreMulSum; may be unaligned, fine on amd64/arm64
	accum = func(d, a, b []byte) { preMulSumLoop(view[T](d), view[T](a), view[T](b), k) }
	prepare = func(d, s []byte) { scaleLoop(view[T](d), view[T](s), k) }
	return accum, prepare
}

// halfLoops is the set of loops for one 16-bit float format.
type halfLoops struct {
	toF32               func(uint16) float32
	sum, prod, max, min func(d, a, b []uint16)
	preMulSum           func(d, a, b []uint16, k float32)
	scale               func(d, s []uint16, k float32)
	div                 func(d []uint16, n float32)
}

var f16Loops = halfLoops{F16ToF32, sumF16, prodF16, maxF16, minF16, preMulSumF16, scaleF16, divF16}
var bf16Loops = halfLoops{BF16ToF32, sumBF16, prodBF16, maxBF16, minBF16, preMulSumBF16, scaleBF16, divBF16}

func halfOps(l *halfLoops, op abi.RedOp, scalar []byte, nranks int64) (accum func(d, a, b []byte), prepare func(d, s []byte), div func(d []byte)) {
	n := float32(nranks)
	div = lift1(func(d []uint16) { l.div(d, n) })
	switch op {
	case abi.Sum, abi.Avg:
		return lift3(l.sum), nil, div
	case abi.Prod:
		return lift3(l.prod), nil, div
	case abi.Max:
		return lift3(l.max), nil, div
	case abi.Min:
		return lift3(l.min), nil, div
	}
	k := l.toF32(uint16(scalar[0]) | uint16(scalar[1])<<8)
	accum = func(d, a, b []byte) { l.preMulSum(view[uint16](d), view[uint16](a), view[uint16](b), k) }
	prepare = func(d, s []byte) { l.scale(view[uint16](d), view[uint16](s), k) }
	return accum, prepare, div
}
