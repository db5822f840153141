package comm

import (
	"fmt"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/wire"
)

// TestLargeAllGather gathers a result over the non-temporal-store threshold
// (8 MiB per rank, from 4 blocks of an odd count, so that the non-temporal
// copies have unaligned tails) with each algorithm, out of place and in
// place, over shared memory and in process.
func TestLargeAllGather(t *testing.T) {
	const n, count = 4, 1<<19 + 3 // float32
	for _, via := range transportEnvs[:2] {
		for _, algo := range []string{"ring", "direct", "halvingdoubling"} {
			t.Run(via.name+"/"+algo, func(t *testing.T) {
				configtest.Setenv(t, append([]string{"GOCL_ALGO", algo}, via.env...)...)
				clique(t, n, func(c *Comm) error {
					var k checker
					size := count * 4
					for _, inPlace := range []bool{false, true} {
						recv := make([]byte, n*size)
						send := fill(abi.Float32, abi.Sum, c.Rank(), count)
						if inPlace {
							copy(recv[c.Rank()*size:], send)
							send = recv[c.Rank()*size : (c.Rank()+1)*size]
						}
						if err := c.Run(nil, Op{Coll: wire.AllGather, Send: ptr(send), Recv: ptr(recv), Count: count, Type: abi.Float32}); err != nil {
							return err
						}
						for i := 0; i < n*count; i += 211 {
							k.expect(fmt.Sprintf("allgather in place %v", inPlace), abi.Float32, recv, i,
								input(abi.Float32, abi.Sum, i/count, i%count))
						}
						k.expect("allgather last", abi.Float32, recv, n*count-1, input(abi.Float32, abi.Sum, n-1, count-1))
					}
					return k.err()
				})
			})
		}
	}
}
