package kernels

import "math"

// Conversions between float32 and the 16-bit formats IEEE binary16 (fp16)
// and bfloat16.
//
// Widening fp16 is a lookup in a 256 KiB table built at init: on the
// reduction loops it is faster than the bit manipulation, which costs ~15
// instructions with three branches (bench/CALLPATH.md, "Kernels"). All four functions stay
// within the compiler's inlining budget (TestHalfConversionsInline), so the
// loops in halfops.go contain no calls.
//
// Narrowing rounds to nearest even. A NaN stays a NaN of the same sign but is
// quieted, as the hardware conversions do: fp16 gets the canonical quiet NaN
// 0x7e00|sign, bfloat16 keeps its top payload bits with the quiet bit set.

const (
	f32AbsMask = 0x7fffffff
	f32Inf     = 0x7f800000
)

// F32ToF16 converts f to IEEE binary16, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	a := u & f32AbsMask
	// Normal range, 2^-14 <= |f| < 2^16 (biased exponent 113..142): rebias
	// the exponent (127 -> 15) and round at bit 13. Adding 0xfff plus the
	// lowest kept bit rounds half to even; a carry out of the mantissa bumps
	// the exponent, which is also how values >= 65520 become inf.
	r := (a - (127-15)<<23 + 0xfff + (a>>13)&1) >> 13
	if a < 113<<23 {
		// Subnormal or zero: adding 0.5 puts the fp16 subnormal ulp (2^-24)
		// at the last mantissa bit of a float32 in [0.5, 1), so the float
		// addition itself rounds to nearest even; subtracting 0.5's bits
		// leaves the fp16 bits (0x400 when it rounds up to the smallest
		// normal). No denormal arithmetic is involved unless f is one.
		r = math.Float32bits(math.Float32frombits(a)+0.5) - 126<<23
	} else if a >= 143<<23 {
		r = 0x7c00 // too large, or inf
		if a > f32Inf {
			r = 0x7e00 // NaN
		}
	}
	return uint16(u>>16)&0x8000 | uint16(r)
}

// f16Normal is F32ToF16's normal-range path alone, for loops that inline it
// and fall back to F32ToF16 when ok is false: fewer instructions and a
// straight-line layout for the common case.
func f16Normal(f float32) (h uint16, ok bool) {
	u := math.Float32bits(f)
	a := u & f32AbsMask
	return uint16(u>>16)&0x8000 | uint16((a-(127-15)<<23+0xfff+(a>>13)&1)>>13), a-113<<23 < (143-113)<<23
}

// F16ToF32 converts an IEEE binary16 value to float32. It is exact; NaN
// payloads are kept.
func F16ToF32(h uint16) float32 { return f16Table[h] }

// f16Table is a plain array (not a pointer) so lookups need neither a nil
// check nor a bounds check: a uint16 index is always in range.
var f16Table [1 << 16]float32

func init() {
	for i := range f16Table {
		f16Table[i] = f16ToF32Calc(uint16(i))
	}
}

func f16ToF32Calc(h uint16) float32 {
	u := uint32(h&0x7fff) << 13
	switch h & 0x7c00 {
	case 0: // zero or subnormal: mantissa * 2^-24, exact
		u = math.Float32bits(float32(h&0x3ff) * 0x1p-24)
	case 0x7c00: // inf or NaN: all-ones exponent, payload kept
		u += (255 - 31) << 23
	default:
		u += (127 - 15) << 23
	}
	return math.Float32frombits(uint32(h&0x8000)<<16 | u)
}

// F32ToBF16 converts f to bfloat16 (the top half of a float32), rounding to
// nearest even.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&f32AbsMask > f32Inf {
		return uint16(u>>16) | 0x40 // quiet NaN; never truncates to inf
	}
	// Round at bit 16; a carry propagates into the exponent, which also
	// turns values above the largest bfloat16 into inf.
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// BF16ToF32 converts a bfloat16 value to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
