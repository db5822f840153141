package kernels

import (
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Reference binary-format codec written the obvious way (frexp, scale,
// RoundToEven), independent of the bit tricks in half.go.

type format struct {
	name     string
	fracBits uint
	expBits  uint
}

var (
	fmtF16  = format{"float16", 10, 5}
	fmtBF16 = format{"bfloat16", 7, 8}
	fmtF32  = format{"float32", 23, 8}
)

func (f format) bias() int { return 1<<(f.expBits-1) - 1 }

func (f format) isNaN(bits uint64) bool {
	expAll := uint64(1)<<f.expBits - 1
	return (bits>>f.fracBits)&expAll == expAll && bits&(1<<f.fracBits-1) != 0
}

func (f format) decode(bits uint64) float64 {
	sign := 1.0
	if bits>>(f.fracBits+f.expBits)&1 != 0 {
		sign = -1
	}
	e := int(bits>>f.fracBits) & (1<<f.expBits - 1)
	m := float64(bits & (1<<f.fracBits - 1))
	switch e {
	case 0:
		return sign * math.Ldexp(m, 1-f.bias()-int(f.fracBits))
	case 1<<f.expBits - 1:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(m+math.Ldexp(1, int(f.fracBits)), e-f.bias()-int(f.fracBits))
}

// encode rounds x to nearest even. NaN maps to a quiet NaN; callers compare
// NaNs by class only.
func (f format) encode(x float64) uint64 {
	var sign uint64
	if math.Signbit(x) {
		sign = 1 << (f.fracBits + f.expBits)
		x = -x
	}
	expAll := (uint64(1)<<f.expBits - 1) << f.fracBits
	switch {
	case math.IsNaN(x):
		return sign | expAll | 1<<(f.fracBits-1)
	case math.IsInf(x, 0):
		return sign | expAll
	case x == 0:
		return sign
	}
	_, e := math.Frexp(x)
	e-- // x in [2^e, 2^(e+1))
	if emin := 1 - f.bias(); e < emin {
		e = emin
	}
	q := math.RoundToEven(math.Ldexp(x, int(f.fracBits)-e))
	if q >= math.Ldexp(1, int(f.fracBits)+1) {
		q /= 2
		e++
	}
	if e > f.bias() {
		return sign | expAll
	}
	one := uint64(1) << f.fracBits
	if uint64(q) < one { // subnormal
		return sign | uint64(q)
	}
	return sign | uint64(e+f.bias())<<f.fracBits | (uint64(q) - one)
}

// The reference codec must agree with the hardware float32 conversion.
func TestReferenceCodecAgainstFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		x := math.Float64frombits(rng.Uint64())
		if math.IsNaN(x) {
			continue
		}
		x = math.Ldexp(x, -rng.IntN(2000)) // also hit float32 subnormals
		want := uint64(math.Float32bits(float32(x)))
		if got := fmtF32.encode(x); got != want {
			t.Fatalf("encode(%g) = %#x, want %#x", x, got, want)
		}
		if got, want := fmtF32.decode(want), float64(float32(x)); got != want {
			t.Fatalf("decode(%#x) = %g, want %g", want, got, want)
		}
		// Values inside the float32 range, with sub-ulp detail.
		y := rng.NormFloat64() * math.Ldexp(1, rng.IntN(300)-160)
		if got, want := fmtF32.encode(y), uint64(math.Float32bits(float32(y))); got != want {
			t.Fatalf("encode(%g) = %#x, want %#x", y, got, want)
		}
	}
}

// Every 16-bit pattern converts to the reference float32 value, and back to
// itself; NaNs stay NaNs with the same sign.
func TestHalfRoundTripAll(t *testing.T) {
	for _, tc := range []struct {
		f    format
		to32 func(uint16) float32
		from func(float32) uint16
	}{
		{fmtF16, F16ToF32, F32ToF16},
		{fmtBF16, BF16ToF32, F32ToBF16},
	} {
		for i := range 1 << 16 {
			h := uint16(i)
			x := tc.to32(h)
			back := tc.from(x)
			if tc.f.isNaN(uint64(h)) {
				if x == x {
					t.Fatalf("%s %#04x: widened to non-NaN %g", tc.f.name, h, x)
				}
				if !tc.f.isNaN(uint64(back)) || back>>15 != h>>15 {
					t.Fatalf("%s %#04x: round trip gave %#04x, want a NaN of the same sign", tc.f.name, h, back)
				}
				continue
			}
			if want := tc.f.decode(uint64(h)); float64(x) != want || math.Signbit(float64(x)) != math.Signbit(want) {
				t.Fatalf("%s %#04x: widened to %g, want %g", tc.f.name, h, x, want)
			}
			if back != h {
				t.Fatalf("%s %#04x: round trip gave %#04x", tc.f.name, h, back)
			}
		}
	}
}

// Narrowing agrees with the reference rounding on random float32 values,
// dense around the fp16 / bf16 ranges, and on every halfway point.
func TestNarrowingMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		for _, tc := range []struct {
			f    format
			conv func(float32) uint16
		}{{fmtF16, F32ToF16}, {fmtBF16, F32ToBF16}} {
			got := uint64(tc.conv(f))
			want := tc.f.encode(float64(f))
			if tc.f.isNaN(want) {
				if !tc.f.isNaN(got) || got>>15 != want>>15 {
					t.Fatalf("%s(%#08x): got %#04x, want a NaN of the same sign", tc.f.name, u, got)
				}
			} else if got != want {
				t.Fatalf("%s(%#08x = %g): got %#04x, want %#04x", tc.f.name, u, f, got, want)
			}
		}
	}
	for range 1 << 20 {
		check(rng.Uint32()) // whole range, including NaN, inf, subnormals
	}
	for range 1 << 20 {
		// Exponents 90..150 cover fp16 subnormals through overflow.
		e := uint32(90 + rng.IntN(61))
		check(rng.Uint32()&0x807fffff | e<<23)
	}
	// Exact halfway points and their neighbours for every fp16 and bf16
	// value: the midpoint between h and h+1, computed in float64.
	for _, f := range []format{fmtF16, fmtBF16} {
		for i := range 1<<15 - 1 {
			lo, hi := f.decode(uint64(i)), f.decode(uint64(i+1))
			if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(hi, 0) {
				continue
			}
			mid := math.Float32bits(float32((lo + hi) / 2)) // exact in float32
			for _, u := range []uint32{mid - 1, mid, mid + 1} {
				check(u)
				check(u | 0x80000000)
			}
		}
	}
}

func TestF16KnownValues(t *testing.T) {
	tests := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                 // largest finite
		{65519.99, 0x7bff},              // just below the rounding threshold
		{65520, 0x7c00},                 // ties to even: rounds up to inf
		{1e6, 0x7c00},                   // overflow
		{-1e6, 0xfc00},                  // negative overflow
		{float32(math.Inf(1)), 0x7c00},  //
		{float32(math.Inf(-1)), 0xfc00}, //
		{0, 0x0000},                     //
		{float32(math.Copysign(0, -1)), 0x8000},
		{1.0 / 3, 0x3555},               // 0x3555 = 0.33325, nearest to 1/3
		{0x1p-14, 0x0400},               // smallest normal
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // tie between 0 and 2^-24: even is 0
		{0x1.8p-25, 0x0001},             // above the tie
		{0x3p-25, 0x0002},               // 1.5 ulp: tie, rounds to even 2
		{0x5p-25, 0x0002},               // 2.5 ulp: tie, rounds to even 2
		{0x7p-25, 0x0004},               // 3.5 ulp: tie, rounds to even 4
		{0x1.ff8p-15, 0x03ff},           // largest subnormal
		{0x1.ffcp-15, 0x0400},           // tie between it and 2^-14: even rounds up to normal
		{-0x1p-24, 0x8001},              //
		{1 + 0x1p-11, 0x3c00},           // tie between 1 and 1+2^-10: even is 1
		{1 + 0x3p-11, 0x3c02},           // tie between 1+2^-10 and 1+2^-9: even is 0x3c02
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // just above the tie
		{2049, 0x6800},                  // tie at 2048 ulp 2: even 2048
		{2051, 0x6802},                  // tie: even 2052
		{1e-10, 0x0000},                 // underflow to zero
		{float32(math.SmallestNonzeroFloat32), 0x0000},
	}
	for _, tc := range tests {
		if got := F32ToF16(tc.f); got != tc.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
	if got := F16ToF32(0x7bff); got != 65504 {
		t.Errorf("F16ToF32(0x7bff) = %g, want 65504", got)
	}
	if got := F16ToF32(0x0001); got != 0x1p-24 {
		t.Errorf("F16ToF32(0x0001) = %g, want 2^-24", got)
	}
	if got := F16ToF32(0x3555); got != 0.333251953125 {
		t.Errorf("F16ToF32(0x3555) = %g", got)
	}
	nan := F32ToF16(float32(math.NaN()))
	if nan&0x7c00 != 0x7c00 || nan&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", nan)
	}
	// A float32 NaN whose payload lives only in bits that fp16 drops must
	// not turn into inf.
	if h := F32ToF16(math.Float32frombits(0xff800001)); h&0x3ff == 0 || h&0x8000 == 0 {
		t.Errorf("F32ToF16(-NaN low payload) = %#04x, want a negative NaN", h)
	}
}

func TestBF16KnownValues(t *testing.T) {
	tests := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{1.0 / 3, 0x3eab},               // 0x3eaaaaab rounds up
		{3.0e38, 0x7f62},                //
		{math.MaxFloat32, 0x7f80},       // rounds to inf
		{float32(math.Inf(-1)), 0xff80}, //
		{1 + 0x1p-8, 0x3f80},            // tie: even is 1
		{1 + 0x3p-8, 0x3f82},            // tie: even is 0x3f82
		{0x1p-133, 0x0001},              // smallest bf16 subnormal
		{0x1p-134, 0x0000},              // tie with zero: even
		{0x3p-134, 0x0002},              // tie: even 2
		{float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, tc := range tests {
		if got := F32ToBF16(tc.f); got != tc.want {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
	if h := F32ToBF16(math.Float32frombits(0x7f800001)); h&0x7f == 0 {
		t.Errorf("F32ToBF16(NaN low payload) = %#04x, want a NaN", h)
	}
}

// The reduction loops rely on the conversions being inlined; fail loudly if
// a change pushes one over the compiler's budget.
func TestHalfConversionsInline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "build", "-gcflags=-m", "-o", "/dev/null", ".").CombinedOutput()
	if err != nil {
		t.Skipf("cannot run the compiler: %v\n%s", err, out)
	}
	for _, fn := range []string{"F32ToF16", "F16ToF32", "F32ToBF16", "BF16ToF32", "f16Normal"} {
		if !strings.Contains(string(out), "can inline "+fn+"\n") {
			t.Errorf("%s is no longer inlinable", fn)
		}
	}
}
