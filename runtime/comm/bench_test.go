package comm

import (
	"fmt"
	"sync"
	"testing"

	"gocl/kernels"
	"gocl/runtime/wire"
)

// BenchmarkAllReduce times float32 sum allreduce on in-process ranks over
// each transport: go test -bench AllReduce ./runtime/comm
func BenchmarkAllReduce(b *testing.B) {
	for _, p2pOff := range []string{"0", "1"} {
		for _, n := range []int{2, 4} {
			for _, bytes := range []int{8, 4096, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("p2p_disable=%s/n=%d/bytes=%d", p2pOff, n, bytes), func(b *testing.B) {
					b.Setenv("GOCL_P2P_DISABLE", p2pOff)
					b.Setenv("GOCL_SOCKET_IFNAME", "lo")
					configReset(b)
					comms, err := InitAll(n, nil, Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer func() {
						for _, c := range comms {
							c.Destroy()
						}
					}()
					count := bytes / 4
					b.SetBytes(int64(bytes))
					b.ResetTimer()
					var wg sync.WaitGroup
					for _, c := range comms {
						wg.Add(1)
						go func() {
							defer wg.Done()
							send := make([]byte, bytes)
							recv := make([]byte, bytes)
							for i := 0; i < b.N; i++ {
								if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: kernels.Float32}); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
				})
			}
		}
	}
}

// BenchmarkCallOneRank times the Go-level call path alone: an 8-byte
// allreduce on a one-rank communicator moves nothing between ranks. gocl-perf
// all_reduce -g 1 -b 8 -e 8 times the same call through the C API; the
// difference is what the C API adds per call.
func BenchmarkCallOneRank(b *testing.B) {
	configReset(b)
	comms, err := InitAll(1, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer comms[0].Destroy()
	send, recv := make([]byte, 8), make([]byte, 8)
	op := Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: 2, Type: kernels.Float32}
	b.ReportAllocs()
	for b.Loop() {
		if err := comms[0].Run(nil, op); err != nil {
			b.Fatal(err)
		}
	}
}
