package comm

import (
	"fmt"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// onFakeHosts places rank r of the test's in-process ranks on fake host
// host(r): ranks of one fake host join in-process, those of different
// ones over TCP, as on real hosts.
func onFakeHosts(t *testing.T, host func(r int) int) {
	testHost = func(r int) string { return fmt.Sprint(host(r)) }
	t.Cleanup(func() { testHost = nil })
}

// The hierarchical all-reduce, named with GOCL_ALGO, against the reference
// for every dtype and op, in and out of place, on sizes that ranks per host
// do not divide, one chunk ± 1 and several chunks, on 2 hosts × 2 and × 3
// ranks and 3 hosts × 2 (host of rank r: r/L, and interleaved: r%H).
func TestAllReduceHierFakeHosts(t *testing.T) {
	const chunk = 4096
	for _, tc := range []struct {
		name  string
		n     int
		host  func(r int) int
		types []abi.DataType
		short bool
	}{
		{"2x2", 4, func(r int) int { return r / 2 }, allTypes, true},
		{"2x3 interleaved", 6, func(r int) int { return r % 2 }, []abi.DataType{abi.Int32, abi.Float16, abi.Float64}, false},
		{"3x2", 6, func(r int) int { return r / 2 }, []abi.DataType{abi.Uint8, abi.Bfloat16, abi.Float32}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			types := tc.types
			if testing.Short() { // the -race run: 2x2, a type of each width
				if !tc.short {
					t.Skip("-short: 2x2 only")
				}
				types = []abi.DataType{abi.Int8, abi.Float16, abi.Float64}
			}
			onFakeHosts(t, tc.host)
			configtest.Setenv(t, "GOCL_ALGO", "allreduce:hier", "GOCL_BUFFSIZE", fmt.Sprint(chunk), "GOCL_SOCKET_IFNAME", "lo")
			clique(t, tc.n, func(c *Comm) error {
				if got := c.plan.Pick(wire.AllReduce, 8).Algo; got != tune.Hier {
					return fmt.Errorf("GOCL_ALGO=allreduce:hier picked %s", got)
				}
				if err := linksAcrossHosts(c); err != nil {
					return err
				}
				var k checker
				call := 0
				for _, ty := range types {
					for _, count := range []int{1, 2, 7, 1023, chunk/4 + 1, 3*tc.n*chunk/4 + 5} {
						for _, inPlace := range []bool{false, true} {
							call++
							for _, op := range allOps {
								h, free, err := redOp(c, ty, op)
								if err != nil {
									return err
								}
								if err := checkReductions(c, &k, ty, op, h, count, call%tc.n, inPlace); err != nil {
									return err
								}
								free()
							}
						}
					}
				}
				return k.err()
			})
		})
	}
}

// linksAcrossHosts checks the fake hosts: sockets between them only.
func linksAcrossHosts(c *Comm) error {
	for p, l := range c.links {
		if l == nil {
			continue
		}
		across := c.peers[p].Host != c.peers[c.rank].Host
		if (l.Name() == "socket") != across {
			return fmt.Errorf("rank %d: link to rank %d via %s (other host: %v)", c.rank, p, l.Name(), across)
		}
	}
	return nil
}

// The tuner picks the hierarchical all-reduce for large calls when every
// host has the same number of ranks, more than one, and the flat
// algorithms otherwise; every rank reaches the same choice.
func TestHierChoice(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		host func(r int) int
		want tune.Algo
	}{
		{"2x2", 4, func(r int) int { return r / 2 }, tune.Hier},
		{"2x1", 2, func(r int) int { return r }, tune.Ring},
		{"unequal 2+1", 3, func(r int) int { return r / 2 }, tune.Ring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onFakeHosts(t, tc.host)
			configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo")
			clique(t, tc.n, func(c *Comm) error {
				if got := c.plan.Pick(wire.AllReduce, 32<<20).Algo; got != tc.want {
					return fmt.Errorf("rank %d: 32 MiB all-reduce picks %s, want %s", c.rank, got, tc.want)
				}
				// and the call itself runs right with what was picked
				const count = 1 << 20
				var k checker
				send := fill(abi.Float32, abi.Sum, c.Rank(), count)
				if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(send), Count: count, Type: abi.Float32}); err != nil {
					return err
				}
				for i := 0; i < count; i += 101 {
					k.expect("allreduce 4 MiB", abi.Float32, send, i, reference(abi.Float32, abi.Sum, 0, tc.n, i))
				}
				return k.err()
			})
		})
	}
}
