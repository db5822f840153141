package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"gocl/abi"
)

// ---- reference model: raw element bits in, raw element bits out ----------

var allTypes = []abi.DataType{abi.Int8, abi.Uint8, abi.Int32, abi.Uint32, abi.Int64, abi.Uint64, abi.Float16, abi.Float32, abi.Float64, abi.Bfloat16}
var allOps = []abi.RedOp{abi.Sum, abi.Prod, abi.Max, abi.Min, abi.Avg, abi.PreMulSum}

func getRaw(t abi.DataType, b []byte, i int) uint64 {
	s := t.Size()
	var buf [8]byte
	copy(buf[:], b[i*s:(i+1)*s])
	return binary.LittleEndian.Uint64(buf[:])
}

func putRaw(t abi.DataType, b []byte, i int, v uint64) {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], v)
	s := t.Size()
	copy(b[i*s:(i+1)*s], buf[:s])
}

func encodeRaw(t abi.DataType, v uint64) []byte {
	b := make([]byte, t.Size())
	putRaw(t, b, 0, v)
	return b
}

func isSigned(t abi.DataType) bool { return t == abi.Int8 || t == abi.Int32 || t == abi.Int64 }

func bits(t abi.DataType) uint { return uint(t.Size()) * 8 }

func intDecode(t abi.DataType, raw uint64) *big.Int {
	sh := 64 - bits(t)
	if isSigned(t) {
		return big.NewInt(int64(raw<<sh) >> sh)
	}
	return new(big.Int).SetUint64(raw << sh >> sh)
}

// intEncode wraps to the type's width (big.Int And is two's complement).
func intEncode(t abi.DataType, v *big.Int) uint64 {
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits(t)), big.NewInt(1))
	return new(big.Int).And(v, mask).Uint64()
}

func floatDecode(t abi.DataType, raw uint64) float64 {
	switch t {
	case abi.Float16:
		return fmtF16.decode(raw)
	case abi.Bfloat16:
		return fmtBF16.decode(raw)
	case abi.Float32:
		return float64(math.Float32frombits(uint32(raw)))
	}
	return math.Float64frombits(raw)
}

func floatEncode(t abi.DataType, v float64) uint64 {
	switch t {
	case abi.Float16:
		return fmtF16.encode(v)
	case abi.Bfloat16:
		return fmtBF16.encode(v)
	case abi.Float32:
		return uint64(math.Float32bits(float32(v)))
	}
	return math.Float64bits(v)
}

// round32 rounds one float64 operation result to the type's compute
// precision: float64 for float64, float32 otherwise. Rounding the exact
// float64 result of +, *, / on float32 inputs to float32 equals the float32
// operation (53 >= 2*24+2), so this models float32 arithmetic exactly.
func round32(t abi.DataType, v float64) float64 {
	if t == abi.Float64 {
		return float64(v) // explicit conversion: no FMA fusion
	}
	return float64(float32(v))
}

func isNaNRaw(t abi.DataType, raw uint64) bool {
	switch t {
	case abi.Float16:
		return fmtF16.isNaN(raw)
	case abi.Bfloat16:
		return fmtBF16.isNaN(raw)
	case abi.Float32:
		return fmtF32.isNaN(raw)
	case abi.Float64:
		return math.IsNaN(math.Float64frombits(raw))
	}
	return false
}

func sameRaw(t abi.DataType, got, want uint64) bool {
	if isNaNRaw(t, want) {
		return isNaNRaw(t, got)
	}
	return got == want
}

func refAccum(t abi.DataType, op abi.RedOp, a, b, k uint64) uint64 {
	if t.IsFloat() {
		x, y, s := floatDecode(t, a), floatDecode(t, b), floatDecode(t, k)
		var r float64
		switch op {
		case abi.Sum, abi.Avg:
			r = round32(t, x+y)
		case abi.Prod:
			r = round32(t, x*y)
		case abi.Max:
			r = nanMax(x, y)
		case abi.Min:
			r = nanMin(x, y)
		case abi.PreMulSum:
			r = round32(t, x+round32(t, s*y))
		}
		return floatEncode(t, r)
	}
	x, y := intDecode(t, a), intDecode(t, b)
	r := new(big.Int)
	switch op {
	case abi.Sum, abi.Avg:
		r.Add(x, y)
	case abi.Prod:
		r.Mul(x, y)
	case abi.Max:
		r.Set(x)
		if y.Cmp(x) > 0 {
			r.Set(y)
		}
	case abi.Min:
		r.Set(x)
		if y.Cmp(x) < 0 {
			r.Set(y)
		}
	case abi.PreMulSum:
		r.Mul(intDecode(t, k), y)
		r.Add(r, x)
	}
	return intEncode(t, r)
}

// nanMax and nanMin are numpy's maximum/minimum: NaN wins, even over an
// infinity (math.Max(Inf, NaN) is Inf, so it cannot serve as reference).
func nanMax(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Max(x, y)
}

func nanMin(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Min(x, y)
}

func refPrepare(t abi.DataType, op abi.RedOp, a, k uint64) uint64 {
	if op != abi.PreMulSum {
		return a
	}
	if t.IsFloat() {
		return floatEncode(t, round32(t, floatDecode(t, k)*floatDecode(t, a)))
	}
	return intEncode(t, new(big.Int).Mul(intDecode(t, k), intDecode(t, a)))
}

func refFinalize(t abi.DataType, op abi.RedOp, a uint64, n int) uint64 {
	if op != abi.Avg {
		return a
	}
	if t.IsFloat() {
		return floatEncode(t, round32(t, floatDecode(t, a)/float64(n)))
	}
	return intEncode(t, new(big.Int).Quo(intDecode(t, a), big.NewInt(int64(n)))) // Quo truncates
}

// ---- test data ------------------------------------------------------------

// genRaw mixes random bit patterns (NaN, inf, subnormals, extreme integers),
// moderate values, and values near the type's overflow threshold.
func genRaw(rng *rand.Rand, t abi.DataType) uint64 {
	mask := uint64(1)<<bits(t) - 1
	if bits(t) == 64 {
		mask = math.MaxUint64
	}
	switch p := rng.IntN(10); {
	case p < 3:
		return rng.Uint64() & mask
	case p < 4:
		specials := []uint64{0, 1, mask, mask >> 1, mask>>1 + 1}
		if t.IsFloat() {
			inf := floatEncode(t, math.Inf(1))
			specials = append(specials, inf, inf|(mask>>1+1), floatEncode(t, math.NaN()))
		}
		return specials[rng.IntN(len(specials))]
	}
	if !t.IsFloat() {
		return intEncode(t, big.NewInt(int64(rng.IntN(41)-20)))
	}
	v := rng.NormFloat64() * 8
	if rng.IntN(5) == 0 {
		v = floatDecode(t, floatEncode(t, math.Inf(1))-1) * (rng.Float64() - 0.5) // near max finite
	}
	return floatEncode(t, v)
}

func genBuf(rng *rand.Rand, t abi.DataType, n int) []byte {
	b := make([]byte, n*t.Size())
	for i := range n {
		putRaw(t, b, i, genRaw(rng, t))
	}
	return b
}

// scalars returns PreMulSum multipliers to try for t.
func scalars(t abi.DataType) [][]byte {
	if t.IsFloat() {
		var out [][]byte
		for _, v := range []float64{1, 0.5, 1.0 / 3, -2.5, 0} {
			out = append(out, encodeRaw(t, floatEncode(t, v)))
		}
		return out
	}
	return [][]byte{
		encodeRaw(t, intEncode(t, big.NewInt(1))),
		encodeRaw(t, intEncode(t, big.NewInt(3))),
		encodeRaw(t, intEncode(t, big.NewInt(-7))),
		encodeRaw(t, intEncode(t, big.NewInt(1<<40+5))), // wraps to the type
	}
}

func opScalars(t abi.DataType, op abi.RedOp) [][]byte {
	if op == abi.PreMulSum {
		return scalars(t)
	}
	return [][]byte{nil}
}

func scalarRaw(t abi.DataType, k []byte) uint64 {
	if k == nil {
		return 0
	}
	return getRaw(t, k, 0)
}

var lengths = []int{0, 1, 3, 7, 8, 9, 16, 17, 1001}

func compareBuf(t *testing.T, ty abi.DataType, what string, got []byte, want []uint64) {
	t.Helper()
	bad := 0
	for i, w := range want {
		if g := getRaw(ty, got, i); !sameRaw(ty, g, w) {
			if bad++; bad <= 5 {
				t.Errorf("%s: element %d = %#x, want %#x", what, i, g, w)
			}
		}
	}
}

// ---- matrix tests ---------------------------------------------------------

func TestAccumulateMatrix(t *testing.T) {
	for _, ty := range allTypes {
		for _, op := range allOps {
			t.Run(ty.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ty), uint64(op)))
				for _, k := range opScalars(ty, op) {
					r, err := NewReducer(ty, op, 3, k)
					if err != nil {
						t.Fatal(err)
					}
					kr := scalarRaw(ty, k)
					for _, n := range lengths {
						for _, alias := range []string{"fresh", "dst=acc", "dst=in"} {
							acc, in := genBuf(rng, ty, n), genBuf(rng, ty, n)
							want := make([]uint64, n)
							for i := range want {
								want[i] = refAccum(ty, op, getRaw(ty, acc, i), getRaw(ty, in, i), kr)
							}
							dst := make([]byte, len(acc))
							switch alias {
							case "dst=acc":
								dst = acc
							case "dst=in":
								dst = in
							}
							r.Accumulate(dst, acc, in)
							compareBuf(t, ty, fmt.Sprintf("k=%x n=%d %s", k, n, alias), dst, want)
						}
					}
				}
			})
		}
	}
}

func TestPrepareMatrix(t *testing.T) {
	for _, ty := range allTypes {
		for _, op := range allOps {
			t.Run(ty.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ty)+100, uint64(op)))
				for _, k := range opScalars(ty, op) {
					r, err := NewReducer(ty, op, 3, k)
					if err != nil {
						t.Fatal(err)
					}
					if got := r.NeedsPrepare(); got != (op == abi.PreMulSum) {
						t.Errorf("NeedsPrepare() = %v", got)
					}
					kr := scalarRaw(ty, k)
					for _, n := range lengths {
						for _, inPlace := range []bool{false, true} {
							src := genBuf(rng, ty, n)
							want := make([]uint64, n)
							for i := range want {
								want[i] = refPrepare(ty, op, getRaw(ty, src, i), kr)
							}
							dst := make([]byte, len(src))
							if inPlace {
								dst = src
							}
							r.Prepare(dst, src)
							compareBuf(t, ty, fmt.Sprintf("k=%x n=%d inPlace=%v", k, n, inPlace), dst, want)
						}
					}
				}
			})
		}
	}
}

func TestFinalizeMatrix(t *testing.T) {
	for _, ty := range allTypes {
		for _, op := range allOps {
			for _, nranks := range []int{1, 2, 3, 7, 8, 1000, 1 << 20} {
				t.Run(fmt.Sprintf("%v/%v/%d", ty, op, nranks), func(t *testing.T) {
					k := opScalars(ty, op)[0]
					r, err := NewReducer(ty, op, nranks, k)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := r.NeedsFinalize(), op == abi.Avg && nranks > 1; got != want {
						t.Errorf("NeedsFinalize() = %v, want %v", got, want)
					}
					rng := rand.New(rand.NewPCG(uint64(ty)+200, uint64(nranks)))
					for _, n := range lengths {
						buf := genBuf(rng, ty, n)
						want := make([]uint64, n)
						for i := range want {
							want[i] = refFinalize(ty, op, getRaw(ty, buf, i), nranks)
						}
						r.Finalize(buf)
						compareBuf(t, ty, fmt.Sprintf("n=%d", n), buf, want)
					}
				})
			}
		}
	}
}

// A whole allreduce over several ranks: Prepare the first contribution,
// Accumulate the rest, Finalize; the reference folds in the same order.
func TestReduceChain(t *testing.T) {
	const ranks, n = 5, 257
	for _, ty := range allTypes {
		for _, op := range allOps {
			for _, k := range opScalars(ty, op) {
				rng := rand.New(rand.NewPCG(uint64(ty)+300, uint64(op)))
				r, err := NewReducer(ty, op, ranks, k)
				if err != nil {
					t.Fatal(err)
				}
				kr := scalarRaw(ty, k)
				inputs := make([][]byte, ranks)
				for i := range inputs {
					inputs[i] = genBuf(rng, ty, n)
				}
				acc := make([]byte, len(inputs[0]))
				r.Prepare(acc, inputs[0])
				for _, in := range inputs[1:] {
					r.Accumulate(acc, acc, in)
				}
				r.Finalize(acc)
				want := make([]uint64, n)
				for i := range want {
					v := refPrepare(ty, op, getRaw(ty, inputs[0], i), kr)
					for _, in := range inputs[1:] {
						v = refAccum(ty, op, v, getRaw(ty, in, i), kr)
					}
					want[i] = refFinalize(ty, op, v, ranks)
				}
				compareBuf(t, ty, fmt.Sprintf("%v/%v k=%x", ty, op, k), acc, want)
			}
		}
	}
}

// ---- targeted cases -------------------------------------------------------

func mustReducer(t *testing.T, ty abi.DataType, op abi.RedOp, nranks int, k []byte) *Reducer {
	t.Helper()
	r, err := NewReducer(ty, op, nranks, k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestIntegerWrap(t *testing.T) {
	tests := []struct {
		ty     abi.DataType
		op     abi.RedOp
		a, b   uint64
		want   uint64
		reason string
	}{
		{abi.Int8, abi.Sum, 127, 1, 0x80, "127+1 = -128"},
		{abi.Int8, abi.Prod, 0x80, 0xff, 0x80, "-128 * -1 = -128"},
		{abi.Uint8, abi.Sum, 255, 1, 0, "255+1 = 0"},
		{abi.Uint8, abi.Prod, 16, 16, 0, "16*16 = 256 = 0"},
		{abi.Int32, abi.Sum, math.MaxInt32, 1, 0x80000000, "MaxInt32+1 = MinInt32"},
		{abi.Int32, abi.Prod, 1 << 16, 1 << 16, 0, "2^32 = 0"},
		{abi.Uint32, abi.Sum, math.MaxUint32, 2, 1, "wraps"},
		{abi.Int64, abi.Sum, math.MaxInt64, 1, 1 << 63, "MaxInt64+1 = MinInt64"},
		{abi.Int64, abi.Prod, 1 << 62, 4, 0, "2^64 = 0"},
		{abi.Uint64, abi.Sum, math.MaxUint64, math.MaxUint64, math.MaxUint64 - 1, "wraps"},
		{abi.Uint64, abi.Max, 1 << 63, 1, 1 << 63, "unsigned compare"},
		{abi.Int64, abi.Max, 1 << 63, 1, 1, "signed compare"},
		{abi.Uint8, abi.Min, 0xff, 1, 1, "unsigned compare"},
		{abi.Int8, abi.Min, 0xff, 1, 0xff, "signed compare"},
	}
	for _, tc := range tests {
		r := mustReducer(t, tc.ty, tc.op, 2, nil)
		dst := make([]byte, tc.ty.Size())
		r.Accumulate(dst, encodeRaw(tc.ty, tc.a), encodeRaw(tc.ty, tc.b))
		if got := getRaw(tc.ty, dst, 0); got != tc.want {
			t.Errorf("%v %v(%#x, %#x) = %#x, want %#x (%s)", tc.ty, tc.op, tc.a, tc.b, got, tc.want, tc.reason)
		}
	}
}

func TestAvgTruncatesTowardZero(t *testing.T) {
	tests := []struct {
		ty     abi.DataType
		nranks int
		in     []int64
		want   []int64
	}{
		{abi.Int32, 2, []int64{-7, 7, -1, -5, 0, 1}, []int64{-3, 3, 0, -2, 0, 0}},
		{abi.Int32, 3, []int64{math.MinInt32, math.MaxInt32, -2}, []int64{-715827882, 715827882, 0}},
		{abi.Int8, 3, []int64{-128, 127, -5}, []int64{-42, 42, -1}},
		{abi.Int8, 128, []int64{-128, 127, -127}, []int64{-1, 0, 0}}, // divisor exceeds int8
		{abi.Int8, 1000, []int64{-128, 127, -127}, []int64{0, 0, 0}}, // divisor exceeds int8
		{abi.Int64, 4, []int64{math.MinInt64, -9, 9}, []int64{math.MinInt64 / 4, -2, 2}},
		{abi.Uint8, 300, []int64{255, 0}, []int64{0, 0}},
		{abi.Uint64, 3, []int64{-1, 10}, []int64{int64(uint64(math.MaxUint64) / 3), 3}},
	}
	for _, tc := range tests {
		r := mustReducer(t, tc.ty, abi.Avg, tc.nranks, nil)
		buf := make([]byte, len(tc.in)*tc.ty.Size())
		for i, v := range tc.in {
			putRaw(tc.ty, buf, i, uint64(v))
		}
		r.Finalize(buf)
		for i, w := range tc.want {
			if got := getRaw(tc.ty, buf, i); got != uint64(w)&(1<<bits(tc.ty)-1) && !(bits(tc.ty) == 64 && got == uint64(w)) {
				t.Errorf("%v avg/%d of %d = %#x, want %d", tc.ty, tc.nranks, tc.in[i], got, w)
			}
		}
	}
	// Float Avg divides in float32 for float32.
	r := mustReducer(t, abi.Float32, abi.Avg, 3, nil)
	buf := make([]byte, 4)
	binary.LittleEndian.PutUint32(buf, math.Float32bits(1))
	r.Finalize(buf)
	if got := math.Float32frombits(binary.LittleEndian.Uint32(buf)); got != float32(1)/3 {
		t.Errorf("float32 1/3 = %v", got)
	}
}

func TestPreMulSumFloat16(t *testing.T) {
	k := encodeRaw(abi.Float16, uint64(F32ToF16(0.5)))
	r := mustReducer(t, abi.Float16, abi.PreMulSum, 2, k)
	if !r.NeedsPrepare() || r.NeedsFinalize() {
		t.Fatal("PreMulSum needs Prepare only")
	}
	f16 := func(vs ...float32) []byte {
		b := make([]byte, 2*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(v))
		}
		return b
	}
	x0 := f16(2, 3, -4, 65504, 1)
	x1 := f16(6, 1, 4, 65504, 0x1p-11)
	acc := make([]byte, len(x0))
	r.Prepare(acc, x0)
	r.Accumulate(acc, acc, x1)
	// 0.5*2+0.5*6 = 4; 1.5+0.5 = 2; -2+2 = 0; 32752*2 = 65504 (no overflow,
	// unlike scaling after summing); 0.5 + 2^-12 rounds to 0.5 (tie? no:
	// 0.5 + 2^-12 is exactly halfway between 0.5 and 0.5+2^-11 -> even 0.5).
	want := []float32{4, 2, 0, 65504, 0.5}
	for i, w := range want {
		if got := F16ToF32(binary.LittleEndian.Uint16(acc[2*i:])); got != w {
			t.Errorf("element %d = %v, want %v", i, got, w)
		}
	}
}

func TestMaxMinNaN(t *testing.T) {
	nan := math.NaN()
	for _, ty := range []abi.DataType{abi.Float16, abi.Float32, abi.Float64, abi.Bfloat16} {
		for _, op := range []abi.RedOp{abi.Max, abi.Min} {
			r := mustReducer(t, ty, op, 2, nil)
			a := []float64{nan, 1, nan, -1, 0, math.Inf(1)}
			b := []float64{1, nan, nan, 2, math.Copysign(0, -1), nan}
			abuf, bbuf := make([]byte, len(a)*ty.Size()), make([]byte, len(b)*ty.Size())
			for i := range a {
				putRaw(ty, abuf, i, floatEncode(ty, a[i]))
				putRaw(ty, bbuf, i, floatEncode(ty, b[i]))
			}
			dst := make([]byte, len(abuf))
			r.Accumulate(dst, abuf, bbuf)
			for i := range a {
				got := floatDecode(ty, getRaw(ty, dst, i))
				want := nanMax(a[i], b[i])
				if op == abi.Min {
					want = nanMin(a[i], b[i])
				}
				if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && (got != want || math.Signbit(got) != math.Signbit(want))) {
					t.Errorf("%v %v(%v, %v) = %v, want %v", ty, op, a[i], b[i], got, want)
				}
			}
		}
	}
}

func TestNewReducerErrors(t *testing.T) {
	tests := []struct {
		ty     abi.DataType
		op     abi.RedOp
		nranks int
		k      []byte
		want   string
	}{
		{12, abi.Sum, 2, nil, "unknown datatype 12"},
		{-1, abi.Sum, 2, nil, "unknown datatype -1"},
		{abi.Float32, 5, 2, nil, "unknown reduction op 5"},
		{abi.Float32, 99, 2, nil, "unknown reduction op 99"},
		{abi.Float32, abi.PreMulSum, 2, []byte{0, 0}, "premulsum needs a scalar of 4 bytes for float32, got 2"},
		{abi.Float16, abi.PreMulSum, 2, nil, "premulsum needs a scalar of 2 bytes for float16, got 0"},
		{abi.Int64, abi.Sum, 2, make([]byte, 8), "sum takes no scalar, got 8 bytes"},
		{abi.Int32, abi.Avg, 0, nil, "avg needs nranks >= 1, got 0"},
	}
	for _, tc := range tests {
		r, err := NewReducer(tc.ty, tc.op, tc.nranks, tc.k)
		if err == nil || err.Error() != tc.want {
			t.Errorf("NewReducer(%v, %v, %d, %v) = %v, %v; want error %q", tc.ty, tc.op, tc.nranks, tc.k, r, err, tc.want)
		}
	}
	// nranks only matters for Avg.
	for _, op := range []abi.RedOp{abi.Sum, abi.Prod, abi.Max, abi.Min} {
		if _, err := NewReducer(abi.Int32, op, 0, nil); err != nil {
			t.Errorf("%v with nranks 0: %v", op, err)
		}
	}
	r := mustReducer(t, abi.Bfloat16, abi.Max, 4, nil)
	if r.Type() != abi.Bfloat16 || r.Op() != abi.Max {
		t.Errorf("Type/Op = %v/%v", r.Type(), r.Op())
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	r := mustReducer(t, abi.Float32, abi.Avg, 2, nil)
	for name, f := range map[string]func(){
		"acc shorter":   func() { r.Accumulate(make([]byte, 8), make([]byte, 4), make([]byte, 8)) },
		"in longer":     func() { r.Accumulate(make([]byte, 8), make([]byte, 8), make([]byte, 12)) },
		"partial elem":  func() { r.Accumulate(make([]byte, 6), make([]byte, 6), make([]byte, 6)) },
		"prepare":       func() { r.Prepare(make([]byte, 8), make([]byte, 4)) },
		"finalize part": func() { r.Finalize(make([]byte, 5)) },
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "buffer lengths") {
					t.Errorf("%s: panic %v, want a buffer length panic", name, p)
				}
			}()
			f()
		}()
	}
}

// Buffers come from C and may start at any address.
func TestUnalignedBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, ty := range allTypes {
		r := mustReducer(t, ty, abi.Sum, 2, nil)
		const n = 37
		raw := make([]byte, 3*(n*ty.Size()+1))
		seg := func(i int) []byte { o := i*(n*ty.Size()+1) + 1; return raw[o : o+n*ty.Size()] }
		dst, acc, in := seg(0), seg(1), seg(2)
		copy(acc, genBuf(rng, ty, n))
		copy(in, genBuf(rng, ty, n))
		want := make([]uint64, n)
		for i := range want {
			want[i] = refAccum(ty, abi.Sum, getRaw(ty, acc, i), getRaw(ty, in, i), 0)
		}
		r.Accumulate(dst, acc, in)
		compareBuf(t, ty, "unaligned", dst, want)
	}
}

// One Reducer shared by many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	k := encodeRaw(abi.Float32, uint64(math.Float32bits(0.25)))
	r := mustReducer(t, abi.Float32, abi.PreMulSum, 8, k)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20 {
				acc, in := genBuf(rng, abi.Float32, 513), genBuf(rng, abi.Float32, 513)
				want := make([]uint64, 513)
				for i := range want {
					want[i] = refAccum(abi.Float32, abi.PreMulSum, getRaw(abi.Float32, acc, i), getRaw(abi.Float32, in, i), scalarRaw(abi.Float32, k))
				}
				r.Accumulate(acc, acc, in)
				compareBuf(t, abi.Float32, "concurrent", acc, want)
			}
		})
	}
	wg.Wait()
}
