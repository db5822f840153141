package kernels

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"gocl/abi"
)

// AccumulateCopy against the scalar reference: every dtype × op (PreMulSum
// with several scalars, Avg's division), vector and portable loops, cached
// and non-temporal, lengths around the fused block and the vector block,
// unaligned starts, dst aliasing an input, and NaN, ±0, ±inf, subnormals.
func TestAccumulateCopyMatrix(t *testing.T) {
	lens := []int{0, 1, 7, 33, 1001}
	for _, ty := range allTypes {
		for _, op := range allOps {
			t.Run(ty.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ty)+900, uint64(op)))
				blk := fuseBlock / ty.Size()
				for ki, k := range opScalars(ty, op) {
					ns := lens
					if ki == 0 && !testing.Short() { // across fused blocks: the reference is slow
						ns = append(ns, blk-1, 2*blk+3)
					}
					kr := scalarRaw(ty, k)
					for _, vec := range []*[abi.NumTypes]simdSet{cpuKernels(), nil} {
						r, err := newReducer(ty, op, 3, k, vec)
						if err != nil {
							t.Fatal(err)
						}
						for _, n := range ns {
							for _, alias := range []string{"fresh", "dst=in", "dst=acc", "out=dst"} {
								nontemporal := rng.IntN(2) == 0
								if n > 1001 && rng.IntN(2) == 0 {
									continue
								}
								what := fmt.Sprintf("k=%x vec=%v n=%d %s nontemporal=%v", k, vec != nil, n, alias, nontemporal)
								checkAccumulateCopy(t, rng, ty, op, r, kr, n, alias, nontemporal, what)
							}
						}
					}
				}
			})
		}
	}
}

func checkAccumulateCopy(t *testing.T, rng *rand.Rand, ty abi.DataType, op abi.RedOp, r *Reducer, kr uint64, n int, alias string, nontemporal bool, what string) {
	t.Helper()
	sz := ty.Size()
	buf := func() []byte { // an unaligned start, special values
		off := rng.IntN(simdBlock)
		b := make([]byte, n*sz+simdBlock)[off : off+n*sz]
		for i := range n {
			putRaw(ty, b, i, special(rng, ty))
		}
		return b
	}
	acc, in := buf(), buf()
	want := make([]uint64, n)
	for i := range want {
		want[i] = refFinalize(ty, op, refAccum(ty, op, getRaw(ty, acc, i), getRaw(ty, in, i), kr), 3)
	}
	out, dst := buf(), buf()
	switch alias {
	case "dst=in":
		dst = in
	case "dst=acc":
		dst = acc
	case "out=dst":
		out = dst
	}
	r.AccumulateCopy(out, dst, acc, in, nontemporal)
	compareBuf(t, ty, what+" out", out, want)
	compareBuf(t, ty, what+" dst", dst, want)
}

func TestAccumulateCopyLengthMismatchPanics(t *testing.T) {
	r, _ := NewReducer(abi.Float32, abi.Sum, 1, nil)
	defer func() {
		if recover() == nil {
			t.Error("AccumulateCopy with a short dst did not panic")
		}
	}()
	r.AccumulateCopy(make([]byte, 8), make([]byte, 4), make([]byte, 8), make([]byte, 8), false)
}

// Copy, non-temporal or not, at every start offset within a vector block and
// lengths around the non-temporal kernel's sizes.
func TestCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{0, 1, 31, 32, 255, 256, 257, 4095, 100_003, 600 << 10} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		for off := range 33 {
			for _, nontemporal := range []bool{false, true} {
				dst := make([]byte, n+64)[off : off+n]
				Copy(dst, src, nontemporal)
				if !bytes.Equal(dst, src) {
					t.Fatalf("Copy(n=%d, off=%d, nontemporal=%v) differs", n, off, nontemporal)
				}
			}
		}
	}
}
