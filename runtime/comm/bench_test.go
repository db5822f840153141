package comm

import (
	"fmt"
	"sync"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
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
					comms := benchComms(b, n)
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
								if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: abi.Float32}); err != nil {
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
	configtest.Setenv(b)
	comms, err := InitAll(1, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer comms[0].Destroy()
	send, recv := make([]byte, 8), make([]byte, 8)
	op := Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: 2, Type: abi.Float32}
	b.ReportAllocs()
	for b.Loop() {
		if err := comms[0].Run(nil, op); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSmallCollectivesAllocateNothing: the latency path (an 8-byte
// allreduce, broadcast from a rank other than 0 and allgather, on one rank
// and on two ranks over shared memory, out of place and in place) allocates
// nothing per call; an allocation per call costs about as much as the whole
// exchange.
func TestSmallCollectivesAllocateNothing(t *testing.T) {
	for _, coll := range []wire.Coll{wire.AllReduce, wire.Broadcast, wire.AllGather} {
		for _, n := range []int{1, 2} {
			configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "0")
			comms, err := InitAll(n, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			const runs = 200
			send, recv := make([][]byte, n), make([][]byte, n)
			call := func(r int, inPlace bool) error {
				op := Op{Coll: coll, Send: ptr(send[r]), Recv: ptr(recv[r]), Count: 2, Type: abi.Float32, Root: n - 1}
				if inPlace {
					op.Send = ptr(recv[r])
					if coll == wire.AllGather {
						op.Send = ptr(recv[r][8*r:])
					}
				}
				return comms[r].Run(nil, op)
			}
			for _, inPlace := range []bool{false, true} {
				for r := range n {
					send[r], recv[r] = make([]byte, 8), make([]byte, 8)
					if coll == wire.AllGather {
						recv[r] = make([]byte, 8*n)
					}
				}
				var wg sync.WaitGroup
				for r := 1; r < n; r++ { // the peers make the same calls: AllocsPerRun makes runs+1
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range runs + 1 {
							if err := call(r, inPlace); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				var failed error
				allocs := testing.AllocsPerRun(runs, func() {
					if err := call(0, inPlace); err != nil && failed == nil {
						failed = err
					}
				})
				wg.Wait()
				if failed != nil {
					t.Fatal(failed)
				}
				if allocs != 0 {
					t.Errorf("%s, %d ranks, in place %v: %.2f allocations per 8-byte call, want 0", coll, n, inPlace, allocs)
				}
			}
			if n == 2 && comms[0].links[1].Name() != "shm" {
				t.Errorf("rank 0's link to rank 1 is %s, want shm", comms[0].links[1].Name())
			}
			for _, c := range comms {
				c.Destroy()
			}
		}
	}
}

// BenchmarkArmDeadline times what every call pays to arm its deadline on a
// rank of n in-process ranks linked by TCP sockets (a full mesh) or in
// process: once per call, whatever n, when the links share the
// communicator's deadline.
func BenchmarkArmDeadline(b *testing.B) {
	for _, n := range []int{2, 16, 64} {
		b.Run(fmt.Sprintf("inproc/n=%d", n), func(b *testing.B) {
			c := benchComms(b, n)[0]
			b.ResetTimer()
			for range b.N {
				c.armDeadline()
			}
		})
	}
	for _, n := range []int{2, 16, 64} {
		b.Run(fmt.Sprintf("socket/n=%d", n), func(b *testing.B) {
			b.Setenv("GOCL_P2P_DISABLE", "1")
			b.Setenv("GOCL_SHM_DISABLE", "1")
			b.Setenv("GOCL_SOCKET_IFNAME", "lo")
			b.Setenv("GOCL_NSOCKS_PERTHREAD", "1")
			c := benchComms(b, n)[0]
			b.ResetTimer()
			for range b.N {
				c.armDeadline()
			}
		})
	}
}

// benchComms makes n in-process ranks under the settings the benchmark set,
// destroyed when it ends.
func benchComms(b *testing.B, n int) []*Comm {
	configtest.Setenv(b)
	comms, err := InitAll(n, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	return comms
}
