package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gocl/abi"
)

// The vector kernels against the portable loops, bit for bit: every dtype ×
// op, Prepare and Finalize, lengths around the block and unroll sizes,
// every start offset within a block, exact aliasing, and inputs full of
// NaNs (both signs, quiet and signalling, with payloads), ±0, ±inf,
// subnormals and values near overflow.
//
// NaN payloads and signs are compared too (max/min mirror the compiled
// portable sequence exactly), with one exception: when both operands of
// an add or multiply are NaNs, x86 returns the first, and the operand order
// in the portable loop is the compiler's choice (it differs between the
// fp16 and bf16 loops today). Those results need only be NaNs.

func TestSIMDMatchesPortable(t *testing.T) {
	vec := cpuKernels() // under -race too
	if vec == nil {
		t.Skipf("no vector kernels on this CPU (%s)", ISA())
	}
	t.Run("cached", func(t *testing.T) { testSIMD(t, vec) })
	// The non-temporal-store twins, on every length from 64 bytes, with the
	// aligned head run by the portable loop (or no non-temporal stores when dst is
	// not element-aligned: the random offsets give both).
	defer func(old int) { nontemporalBytes = old }(nontemporalBytes)
	nontemporalBytes = 64
	t.Run("nontemporal", func(t *testing.T) { testSIMD(t, vec) })
}

func testSIMD(t *testing.T, vec *[abi.NumTypes]simdSet) {
	lens, ranks := []int{1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4099}, []int{3, 8}
	if testing.Short() { // the race detector's run: fewer shapes
		lens, ranks = []int{1, 33, 129, 1000}, []int{3}
	}
	for _, ty := range allTypes {
		for _, op := range allOps {
			t.Run(ty.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ty)+500, uint64(op)))
				ks := opScalars(ty, op)
				if op == abi.PreMulSum && ty.IsFloat() {
					ks = append(ks, encodeRaw(ty, floatEncode(ty, math.NaN())), encodeRaw(ty, floatEncode(ty, math.Inf(-1))),
						encodeRaw(ty, floatEncode(ty, math.Copysign(0, -1))))
				}
				for _, k := range ks {
					for _, nranks := range ranks {
						v, err := newReducer(ty, op, nranks, k, vec)
						if err != nil {
							t.Fatal(err)
						}
						p, _ := newReducer(ty, op, nranks, k, nil)
						for _, n := range lens {
							off := rng.IntN(simdBlock)
							checkSIMD(t, rng, ty, v, p, k, n, off, fmt.Sprintf("k=%x nranks=%d n=%d off=%d", k, nranks, n, off))
						}
					}
				}
			})
		}
	}
}

// special returns a raw value that stresses the edge cases of t.
func special(rng *rand.Rand, t abi.DataType) uint64 {
	if !t.IsFloat() {
		return genRaw(rng, t)
	}
	w := bits(t)
	sign := uint64(rng.IntN(2)) << (w - 1)
	expBits := map[abi.DataType]uint{abi.Float16: 5, abi.Bfloat16: 8, abi.Float32: 8, abi.Float64: 11}[t]
	man := w - 1 - expBits
	expAll := (uint64(1)<<expBits - 1) << man
	switch rng.IntN(8) {
	case 0: // NaN, quiet or signalling, random payload
		return sign | expAll | (rng.Uint64()&(1<<man-1) | 1)
	case 1:
		return sign // ±0
	case 2:
		return sign | expAll // ±inf
	case 3: // subnormal
		return sign | rng.Uint64()&(1<<man-1)
	case 4: // smallest normals, where sums and products go subnormal
		return sign | 1<<man | rng.Uint64()&(1<<man-1)
	}
	return genRaw(rng, t)
}

func checkSIMD(t *testing.T, rng *rand.Rand, ty abi.DataType, v, p *Reducer, k []byte, n, off int, what string) {
	t.Helper()
	sz := ty.Size()
	buf := func() []byte {
		b := make([]byte, n*sz+simdBlock)[off : off+n*sz]
		for i := range n {
			putRaw(ty, b, i, special(rng, ty))
		}
		return b
	}
	clone := func(b []byte) []byte { c := make([]byte, len(b)+simdBlock)[off : off+len(b)]; copy(c, b); return c }
	acc, in := buf(), buf()

	gv, gp := clone(acc), clone(acc)
	v.Accumulate(gv, acc, in)
	p.Accumulate(gp, acc, in)
	sameBits(t, ty, v.op, k, what+" accumulate", gv, gp, acc, in)

	av, ap := clone(acc), clone(acc) // dst = acc
	v.Accumulate(av, av, in)
	p.Accumulate(ap, ap, in)
	sameBits(t, ty, v.op, k, what+" dst=acc", av, ap, acc, in)

	iv, ip := clone(in), clone(in) // dst = in
	v.Accumulate(iv, acc, iv)
	p.Accumulate(ip, acc, ip)
	sameBits(t, ty, v.op, k, what+" dst=in", iv, ip, acc, in)

	pv, pp := clone(in), clone(in)
	v.Prepare(pv, in)
	p.Prepare(pp, in)
	sameBits(t, ty, v.op, k, what+" prepare", pv, pp, nil, nil)

	fv, fp := clone(acc), clone(acc)
	v.Finalize(fv)
	p.Finalize(fp)
	sameBits(t, ty, v.op, k, what+" finalize", fv, fp, nil, nil)
}

func sameBits(t *testing.T, ty abi.DataType, op abi.RedOp, k []byte, what string, got, want, a, b []byte) {
	t.Helper()
	bad := 0
	for i := range len(want) / ty.Size() {
		g, w := getRaw(ty, got, i), getRaw(ty, want, i)
		if g == w {
			continue
		}
		if a != nil && isNaNRaw(ty, g) && isNaNRaw(ty, w) && twoNaNs(ty, op, k, getRaw(ty, a, i), getRaw(ty, b, i)) {
			continue // two NaN inputs: either may come out
		}
		if bad++; bad <= 5 {
			var ai, bi uint64
			if a != nil {
				ai, bi = getRaw(ty, a, i), getRaw(ty, b, i)
			}
			t.Errorf("%s: element %d = %#x, portable %#x (inputs %#x, %#x)", what, i, g, w, ai, bi)
		}
	}
}

func TestISA(t *testing.T) {
	if got := ISA(); got != "avx2" && got != "portable" {
		t.Errorf("ISA() = %q", got)
	}
	t.Logf("ISA: %s", ISA())
}

// twoNaNs reports whether the final add or multiply of op saw two NaN
// operands: a and b for Sum/Avg/Prod, a and k*b for PreMulSum.
func twoNaNs(ty abi.DataType, op abi.RedOp, k []byte, a, b uint64) bool {
	if !ty.IsFloat() || !isNaNRaw(ty, a) {
		return false
	}
	switch op {
	case abi.Sum, abi.Avg, abi.Prod:
		return isNaNRaw(ty, b)
	case abi.PreMulSum:
		kv, bv := floatDecode(ty, scalarRaw(ty, k)), floatDecode(ty, b)
		return math.IsNaN(kv * bv)
	}
	return false
}
