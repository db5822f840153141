package comm

import (
	"sync"
	"testing"

	"gocl/kernels"
	"gocl/runtime/wire"
)

// TestInProcessRanksShareTheTable: the ranks of one process hold one copy
// of the rank table (bootstrap/shared.go), of what is derived from it (host
// facts) and of the tuner's plan, not one each: 256 in-process ranks would
// otherwise hold 256 tables of 256 entries. And they still all-reduce right.
func TestInProcessRanksShareTheTable(t *testing.T) {
	for _, lazy := range []string{"0", "1"} {
		t.Run("runtime_connect="+lazy, func(t *testing.T) {
			setEnv(t, "GOCL_RUNTIME_CONNECT", lazy, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "60")
			n := 256
			if lazy == "0" || testing.Short() {
				n = 33 // the mesh's N² links
			}
			comms := localComms(t, n)
			for r, c := range comms {
				if &c.peers[0] != &comms[0].peers[0] || c.facts != comms[0].facts || c.plan != comms[0].plan {
					t.Fatalf("rank %d holds its own table, facts or plan", r)
				}
				if c.localRanks != n || c.localRank != r || c.nnodes != 1 {
					t.Fatalf("rank %d: local rank %d of %d on %d nodes", r, c.localRank, c.localRanks, c.nnodes)
				}
			}
			bufs := make([][]byte, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := make([]byte, 4*5)
					for i := range 5 {
						encode(kernels.Float32, b[4*i:], float64(r+i))
					}
					bufs[r] = b
					errs[r] = c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(b), Recv: ptr(b), Count: 5, Type: kernels.Float32, RedOp: int32(kernels.Sum)})
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, b := range bufs {
				for i := range 5 {
					if v, want := decode(kernels.Float32, b[4*i:]), float64(n*(n-1)/2+n*i); v != want {
						t.Fatalf("rank %d element %d: %v, want %v", r, i, v, want)
					}
				}
			}
		})
	}
}
