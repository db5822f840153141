package comm

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// connected is the peers c has a link to.
func connected(c *Comm) []int {
	var out []int
	for p, l := range c.linksNow() {
		if l != nil {
			out = append(out, p)
		}
	}
	return out
}

// initPeers is the ranks init's exchange connects c to (initAlgo's).
func initPeers(c *Comm) []int {
	return c.peersOf(wire.AllReduce, c.initAlgo(), -1)
}

// TestRuntimeConnectDeclaresPeers runs the whole matrix, every algorithm
// forced, on communicators that connect on first use over shared memory
// and sockets: a call whose algorithm talks to a rank peersOf does not
// name finds no link there and fails, so every algorithm's peers are
// checked, and the results against the reference.
func TestRuntimeConnectDeclaresPeers(t *testing.T) {
	ranks := map[string][]int{"ring": {3, 6}, "direct": {4}, "tree": {5, 7}, "halvingdoubling": {4, 6, 7}}
	if testing.Short() {
		ranks = map[string][]int{"tree": {5}, "halvingdoubling": {6}}
	}
	for _, algo := range algoNames {
		for _, n := range ranks[algo] {
			t.Run(fmt.Sprintf("%s/n=%d", algo, n), func(t *testing.T) {
				configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", "1", "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", fmt.Sprint(n%2), "GOCL_SOCKET_IFNAME", "lo",
					"GOCL_BUFFSIZE", "8192", "GOCL_ALGO", algo, "GOCL_DIRECT_THRESHOLD", "0", "GOCL_TIMEOUT", "60")
				clique(t, n, func(c *Comm) error {
					// init's own exchange: initAlgo's peers.
					if got, want := connected(c), initPeers(c); len(got) > len(want) {
						return fmt.Errorf("links to %v after init: only %v expected before a call", got, want)
					}
					return matrix(c, []abi.DataType{abi.Int32, abi.Float16}, []int{0, 1, 7, 5000})
				})
			})
		}
	}
}

// TestRuntimeConnectHoldsOnlyWhatItUses: a job that only all-reduces over
// a ring holds the ring's 2 links per rank, over the tree at most 3 per
// tree, and halving-doubling log2(n), beside init's exchange's; a
// later call of another shape adds its own.
func TestRuntimeConnectHoldsOnlyWhatItUses(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		algo string
	}{{"ring"}, {"tree"}, {"halvingdoubling"}} {
		t.Run(tc.algo, func(t *testing.T) {
			configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", "1", "GOCL_P2P_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo", "GOCL_ALGO", "allreduce:"+tc.algo, "GOCL_TIMEOUT", "60")
			clique(t, n, func(c *Comm) error {
				buf := make([]byte, 4*1000)
				for i := 0; i < 3; i++ {
					if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: 1000, Type: abi.Float32, RedOp: int32(abi.Sum)}); err != nil {
						return err
					}
				}
				got := connected(c)
				want := append(c.peersOf(wire.AllReduce, algoByName(tc.algo), -1), initPeers(c)...)
				slices.Sort(want)
				want = slices.Compact(want)
				for _, p := range got {
					if !slices.Contains(want, p) {
						return fmt.Errorf("a link to rank %d, which %s all-reduce does not use (%v)", p, tc.algo, want)
					}
				}
				if len(got) == 0 {
					return fmt.Errorf("no links after %s all-reduces", tc.algo)
				}
				// A point-to-point call to a rank without a link connects it.
				far := (c.Rank() + n/2) % n
				sb, rb := make([]byte, 8), make([]byte, 8)
				var g Group
				g.Add(c, nil, Op{Coll: wire.SendRecv, IsSend: true, Peer: far, Send: ptr(sb), Count: 2, Type: abi.Int32})
				g.Add(c, nil, Op{Coll: wire.SendRecv, Peer: far, Recv: ptr(rb), Count: 2, Type: abi.Int32})
				if err := g.Run(); err != nil {
					return err
				}
				if !slices.Contains(connected(c), far) {
					return fmt.Errorf("no link to rank %d after a send/recv with it", far)
				}
				return nil
			})
		})
	}
}

func algoByName(s string) tune.Algo {
	for a := tune.Ring; a <= tune.Hier; a++ {
		if a.String() == s {
			return a
		}
	}
	panic("no algorithm " + s)
}

// TestRuntimeConnectMustMatch: ranks that disagree on GOCL_RUNTIME_CONNECT
// fail init on every rank, naming it, instead of waiting for links one
// side never makes.
func TestRuntimeConnectMustMatch(t *testing.T) {
	configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "30")
	testOffer = func(rank int, lazy bool) bool { return rank == 1 }
	t.Cleanup(func() { testOffer = nil })
	_, err := InitAll(3, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "GOCL_RUNTIME_CONNECT") {
		t.Fatalf("init with rank 1 alone connecting on first use: %v, want an error naming GOCL_RUNTIME_CONNECT", err)
	}
}

// TestRuntimeConnectPeerGone: a rank whose peer is gone before their pair
// was ever connected gets an error naming the peer, whichever end of the
// pair dials: of 8 ranks, rank 3 is gone; rank 0 waits for it to dial,
// rank 6 dials it (neither pair is one init's exchange connects).
func TestRuntimeConnectPeerGone(t *testing.T) {
	configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", "1", "GOCL_P2P_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "60")
	comms, err := InitAll(8, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	comms[3].Abort()
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for _, i := range []int{0, 6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			errs[i] = comms[i].Run(nil, Op{Coll: wire.SendRecv, IsSend: true, Peer: 3, Send: ptr(buf), Count: 4, Type: abi.Float32})
		}()
	}
	wg.Wait()
	for _, i := range []int{0, 6} {
		if err := errs[i]; err == nil || !strings.Contains(err.Error(), "rank 3") {
			t.Errorf("rank %d: %v, want an error naming the gone rank 3", i, err)
		}
		t.Logf("rank %d: %v", i, errs[i])
	}
	for i, c := range comms {
		if i != 3 {
			c.Abort()
		}
	}
}

// TestRuntimeConnectBufferedSends: a small send completes before its
// receiver is in the matching call, as over a link made at init, even
// where the pair was never connected: each rank of 8 sends to rank r+3
// (no pair init's exchange connects), then receives from r-3, a cycle
// that would deadlock if a link waited for both ends' calls.
func TestRuntimeConnectBufferedSends(t *testing.T) {
	for _, shm := range []string{"0", "1"} {
		t.Run("shm_disable="+shm, func(t *testing.T) {
			configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", "1", "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", shm, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "60")
			clique(t, 8, func(c *Comm) error {
				n, r := c.NRanks(), c.Rank()
				if slices.Contains(connected(c), (r+3)%n) {
					return fmt.Errorf("rank %d is linked to rank %d after init: the test needs a pair not connected yet", r, (r+3)%n)
				}
				sb, rb := make([]byte, 64), make([]byte, 64)
				for i := range sb {
					sb[i] = byte(r)
				}
				if err := c.Run(nil, Op{Coll: wire.SendRecv, IsSend: true, Peer: (r + 3) % n, Send: ptr(sb), Count: 16, Type: abi.Float32}); err != nil {
					return err
				}
				if err := c.Run(nil, Op{Coll: wire.SendRecv, Peer: (r + n - 3) % n, Recv: ptr(rb), Count: 16, Type: abi.Float32}); err != nil {
					return err
				}
				if want := byte((r + n - 3) % n); rb[0] != want || rb[63] != want {
					return fmt.Errorf("received %d..%d from rank %d", rb[0], rb[63], want)
				}
				return nil
			})
		})
	}
}
