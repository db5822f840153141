package kernels

import "unsafe"

// Generic element loops for the native types (everything except fp16 and
// bf16). Each basic type is its own GC shape, so every instantiation is
// compiled with native arithmetic: no dictionaries, no per-element calls.
//
// The binary loops are unrolled by 8 with the three operands resliced to a
// common length and then to fixed 8-element windows, which lets the compiler
// drop all per-element bounds checks. Each element is read before it is
// written, so dst may alias acc or in exactly.
//
// Floating-point products are wrapped in an explicit T(...) conversion: the
// spec forbids fusing a rounded product into an FMA across a conversion, so
// results are identical on amd64 and arm64.

type signed interface{ ~int8 | ~int32 | ~int64 }
type unsigned interface{ ~uint8 | ~uint32 | ~uint64 }
type float interface{ ~float32 | ~float64 }
type number interface{ signed | unsigned | float }

// view reinterprets b as a slice of T. Any trailing partial element is
// ignored (callers check lengths).
func view[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), uintptr(len(b))/unsafe.Sizeof(z))
}

func sumLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s, x, y := d[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		s[0] = x[0] + y[0]
		s[1] = x[1] + y[1]
		s[2] = x[2] + y[2]
		s[3] = x[3] + y[3]
		s[4] = x[4] + y[4]
		s[5] = x[5] + y[5]
		s[6] = x[6] + y[6]
		s[7] = x[7] + y[7]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

func prodLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s, x, y := d[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		s[0] = x[0] * y[0]
		s[1] = x[1] * y[1]
		s[2] = x[2] * y[2]
		s[3] = x[3] * y[3]
		s[4] = x[4] * y[4]
		s[5] = x[5] * y[5]
		s[6] = x[6] * y[6]
		s[7] = x[7] * y[7]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] * b[i]
	}
}

// The builtin max/min propagate NaN for floats (and give max(-0, +0) = +0),
// which is the numpy maximum/minimum behaviour we want; for integers they
// compile to conditional moves.
func maxLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s, x, y := d[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		s[0] = max(x[0], y[0])
		s[1] = max(x[1], y[1])
		s[2] = max(x[2], y[2])
		s[3] = max(x[3], y[3])
		s[4] = max(x[4], y[4])
		s[5] = max(x[5], y[5])
		s[6] = max(x[6], y[6])
		s[7] = max(x[7], y[7])
	}
	for ; i < len(d); i++ {
		d[i] = max(a[i], b[i])
	}
}

func minLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s, x, y := d[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		s[0] = min(x[0], y[0])
		s[1] = min(x[1], y[1])
		s[2] = min(x[2], y[2])
		s[3] = min(x[3], y[3])
		s[4] = min(x[4], y[4])
		s[5] = min(x[5], y[5])
		s[6] = min(x[6], y[6])
		s[7] = min(x[7], y[7])
	}
	for ; i < len(d); i++ {
		d[i] = min(a[i], b[i])
	}
}

// preMulSumLoop computes d = a + T(k*b): acc already holds scaled values.
func preMulSumLoop[T number](d, a, b []T, k T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s, x, y := d[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		s[0] = x[0] + T(k*y[0])
		s[1] = x[1] + T(k*y[1])
		s[2] = x[2] + T(k*y[2])
		s[3] = x[3] + T(k*y[3])
		s[4] = x[4] + T(k*y[4])
		s[5] = x[5] + T(k*y[5])
		s[6] = x[6] + T(k*y[6])
		s[7] = x[7] + T(k*y[7])
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + T(k*b[i])
	}
}

// scaleLoop computes d = k*s (PreMulSum's Prepare).
func scaleLoop[T number](d, s []T, k T) {
	s = s[:len(d)]
	for i := range d {
		d[i] = k * s[i]
	}
}

// Avg post-division. Integers divide as the exact quotient truncated toward
// zero, so the division is done in 64 bits: nranks may not fit in T.
func divSignedLoop[T signed](d []T, n int64) {
	for i := range d {
		d[i] = T(int64(d[i]) / n)
	}
}

func divUnsignedLoop[T unsigned](d []T, n uint64) {
	for i := range d {
		d[i] = T(uint64(d[i]) / n)
	}
}

func divFloatLoop[T float](d []T, n T) {
	for i := range d {
		d[i] /= n
	}
}
