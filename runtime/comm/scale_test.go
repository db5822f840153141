package comm

import (
	"sync"
	"testing"
	"time"

	"gocl/runtime/config/configtest"
)

// TestInProcessRanksShareTheTable: the ranks of one process hold one copy
// of the rank table (bootstrap/shared.go), of what is derived from it (host
// facts) and of the tuner's plan, not one each: 256 in-process ranks would
// otherwise hold 256 tables of 256 entries. And they still all-reduce right.
func TestInProcessRanksShareTheTable(t *testing.T) {
	for _, lazy := range []string{"0", "1"} {
		t.Run("runtime_connect="+lazy, func(t *testing.T) {
			configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", lazy, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "60")
			n := 256
			if lazy == "0" || testing.Short() {
				n = 33 // the mesh's N² links
			}
			comms, err := InitAll(n, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for r, c := range comms {
				if &c.peers[0] != &comms[0].peers[0] || c.facts != comms[0].facts || c.plan != comms[0].plan {
					t.Fatalf("rank %d holds its own table, facts or plan", r)
				}
				if c.localRanks != n || c.localRank != r || c.nnodes != 1 {
					t.Fatalf("rank %d: local rank %d of %d on %d nodes", r, c.localRank, c.localRanks, c.nnodes)
				}
			}
			checkShrunk(t, comms, make([]error, n), complement(nil, n)) // all-reduces right, then destroys
		})
	}
}

// TestRecoveryAt32Ranks: the recovery path at 32 ranks, over shared memory
// and sockets, connecting on first use: two ranks die inside an
// all-reduce (rank 0, the first coordinator, among them); the survivors
// agree on who is gone without a list, shrink to 30 ranks that all-reduce
// right, then grow back by a new rank.
func TestRecoveryAt32Ranks(t *testing.T) {
	envs := transportEnvs[1:]
	if testing.Short() {
		envs = envs[1:] // sockets
	}
	for _, via := range envs {
		t.Run(via.name, func(t *testing.T) {
			configtest.Setenv(t, append([]string{"GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "20", "GOCL_RUNTIME_CONNECT", "1"}, via.env...)...)
			const n = 32
			comms, err := InitAll(n, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Destroy()
				}
			}()
			dead := []int{0, 17}
			survivors := complement(dead, n)
			var wg sync.WaitGroup
			for _, r := range survivors {
				wg.Add(1)
				go func() { defer wg.Done(); allReduce(comms[r], 1<<12) }()
			}
			time.Sleep(20 * time.Millisecond)
			for _, r := range dead {
				comms[r].Abort()
			}
			wg.Wait()
			subs, errs := shrinkAll(comms, survivors, nil, func(r int) time.Duration { return time.Duration(r%4) * 5 * time.Millisecond })
			shrunk := make([]*Comm, 0, len(survivors))
			for _, r := range survivors {
				if errs[r] != nil {
					t.Fatalf("rank %d: shrink: %v", r, errs[r])
				}
				if subs[r].NRanks() != len(survivors) || subs[r].Rank() != len(shrunk) {
					t.Fatalf("rank %d: got rank %d of %d, want %d of %d", r, subs[r].Rank(), subs[r].NRanks(), len(shrunk), len(survivors))
				}
				shrunk = append(shrunk, subs[r])
			}
			defer func() {
				for _, c := range shrunk {
					c.Destroy()
				}
			}()
			grown, gerrs := growAll(t, shrunk)
			checkShrunk(t, grown, gerrs, complement(nil, len(grown)))
		})
	}
}
