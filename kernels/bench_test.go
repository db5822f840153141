package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gocl/abi"
)

// benchAccumulate measures acc = acc op in over 1 MiB buffers, the shape of
// an allreduce step. MB/s counts bytes of one buffer.
func benchAccumulate(b *testing.B, ty abi.DataType, op abi.RedOp, k []byte) {
	const size = 1 << 20
	r, err := NewReducer(ty, op, 4, k)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	n := size / ty.Size()
	acc := make([]byte, size)
	in := make([]byte, size)
	// Moderate values only: keep NaN/inf/subnormals out of the hot path.
	for i := range n {
		v := rng.NormFloat64()
		if ty.IsFloat() {
			putRaw(ty, acc, i, floatEncode(ty, v))
			putRaw(ty, in, i, floatEncode(ty, v*1e-3))
		} else {
			putRaw(ty, acc, i, uint64(int64(v*100)))
			putRaw(ty, in, i, uint64(int64(v*10)))
		}
	}
	b.SetBytes(size)
	for b.Loop() {
		r.Accumulate(acc, acc, in)
	}
}

func BenchmarkSumFloat32(b *testing.B)  { benchAccumulate(b, abi.Float32, abi.Sum, nil) }
func BenchmarkSumBfloat16(b *testing.B) { benchAccumulate(b, abi.Bfloat16, abi.Sum, nil) }
func BenchmarkSumFloat16(b *testing.B)  { benchAccumulate(b, abi.Float16, abi.Sum, nil) }
func BenchmarkSumFloat64(b *testing.B)  { benchAccumulate(b, abi.Float64, abi.Sum, nil) }
func BenchmarkSumInt32(b *testing.B)    { benchAccumulate(b, abi.Int32, abi.Sum, nil) }
func BenchmarkMaxFloat32(b *testing.B)  { benchAccumulate(b, abi.Float32, abi.Max, nil) }
func BenchmarkPreMulSumFloat32(b *testing.B) {
	benchAccumulate(b, abi.Float32, abi.PreMulSum, encodeRaw(abi.Float32, floatEncode(abi.Float32, 0.25)))
}
func BenchmarkPreMulSumFloat16(b *testing.B) {
	benchAccumulate(b, abi.Float16, abi.PreMulSum, encodeRaw(abi.Float16, floatEncode(abi.Float16, 0.25)))
}

// BenchmarkKernel is the Go half of bench/kernels.py, named
// Kernel/<dtype>/<op>/<bytes>: dst = a op b over three separate buffers of
// that many bytes each, the shape of numpy's np.add(a, b, out=d). MB/s
// counts the bytes of one buffer, as the numpy side does. Run it through
// the script (it selects sizes and alternates with numpy on one core).
func BenchmarkKernel(b *testing.B) {
	benchKernels(b, []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}, simdKernels())
}

// BenchmarkPortable is BenchmarkKernel on the portable loops alone.
func BenchmarkPortable(b *testing.B) { benchKernels(b, []int{64 << 10, 1 << 20}, nil) }

func benchKernels(b *testing.B, sizes []int, vec *[abi.NumTypes]simdSet) {
	for _, ty := range allTypes {
		for _, op := range []abi.RedOp{abi.Sum, abi.Prod, abi.Max, abi.Min, abi.PreMulSum} {
			for _, size := range sizes {
				b.Run(fmt.Sprintf("%v/%v/%d", ty, op, size), func(b *testing.B) {
					var k []byte
					if op == abi.PreMulSum {
						k = scalars(ty)[1] // 0.5 or 3: no overflow to special values
					}
					r, err := newReducer(ty, op, 4, k, vec)
					if err != nil {
						b.Fatal(err)
					}
					n := size / ty.Size()
					dst, x, y := benchBuffer(size), benchBuffer(size), benchBuffer(size)
					rng := rand.New(rand.NewPCG(2, 2))
					for i := range n {
						v := rng.NormFloat64()
						if ty.IsFloat() {
							putRaw(ty, x, i, floatEncode(ty, v))
							putRaw(ty, y, i, floatEncode(ty, v*0.5))
						} else {
							putRaw(ty, x, i, uint64(int64(v*20)))
							putRaw(ty, y, i, uint64(int64(v*10)))
						}
					}
					copy(dst, x) // fault its pages in before timing, as numpy's warm-up call does
					b.SetBytes(int64(size))
					for b.Loop() {
						r.Accumulate(dst, x, y)
					}
				})
			}
		}
	}
}

// BenchmarkFinalize measures Avg's division pass over 1 MiB.
func BenchmarkFinalize(b *testing.B) {
	for _, ty := range allTypes {
		b.Run(ty.String(), func(b *testing.B) {
			r, err := NewReducer(ty, abi.Avg, 3, nil)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				r.Finalize(buf)
			}
		})
	}
}

// BenchmarkRecvReduceCopySend is one rank's share of the last
// reduce-scatter step of a 2-rank ring allreduce of total bytes, cut into
// 1 MiB chunks (GOCL_BUFFSIZE's default): a received chunk (from a 4 MiB
// FIFO ring, cached) reduced with the local input into the peer's slot and
// into the result. "fused" is AccumulateCopy (non-temporal stores for the result as
// the ring uses from Nontemporal on); "reduce+copy" the two passes it replaced.
// MB/s counts the result's bytes.
func BenchmarkRecvReduceCopySend(b *testing.B) {
	const chunk = 1 << 20
	for _, total := range []int{2 << 20, 64 << 20} {
		local, dst, ring := benchBuffer(total), benchBuffer(total), make([]byte, 4<<20)
		for _, buf := range [][]byte{local, dst, ring} { // real pages, not the zero page
			for i := range buf {
				buf[i] = byte(i%251) | 1
			}
		}
		r, _ := NewReducer(abi.Float32, abi.Sum, 2, nil)
		nontemporal := Nontemporal(2 * total)
		slot := func(j int) []byte { return ring[(j%4)*chunk : (j%4+1)*chunk] }
		for _, v := range []struct {
			name string
			step func(out, d, pl, in []byte)
		}{
			{"fused", func(out, d, pl, in []byte) { r.AccumulateCopy(out, d, pl, in, nontemporal) }},
			{"reduce+copy", func(out, d, pl, in []byte) { r.Accumulate(out, pl, in); copy(d, out) }},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", v.name, total>>20), func(b *testing.B) {
				b.SetBytes(int64(total))
				for b.Loop() {
					for j := 0; j < total/chunk; j++ {
						v.step(slot(2*j+1), dst[j*chunk:(j+1)*chunk], slot(2*j), local[j*chunk:(j+1)*chunk])
					}
				}
			})
		}
	}
}
