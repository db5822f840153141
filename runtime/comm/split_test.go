package comm

import (
	"fmt"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/stream"
	"gocl/runtime/wire"
)

// Split by parity with keys that reverse the order; rank 5 opts out.
func TestSplit(t *testing.T) {
	for _, off := range []string{"0", "1"} {
		t.Run("p2p_disable="+off, func(t *testing.T) {
			configtest.Setenv(t, "GOCL_P2P_DISABLE", off, "GOCL_SOCKET_IFNAME", "lo")
			clique(t, 6, func(c *Comm) error {
				color := c.Rank() % 2
				if c.Rank() == 5 {
					color = NoColor
				}
				sub, err := c.Split(color, -c.Rank(), Options{})
				if err != nil {
					return err
				}
				if c.Rank() == 5 {
					if sub != nil {
						return fmt.Errorf("NoColor rank got a communicator")
					}
					return nil
				}
				defer sub.Destroy()
				members := map[int][]int{0: {4, 2, 0}, 1: {3, 1}}[color]
				if sub.NRanks() != len(members) || members[sub.Rank()] != c.Rank() {
					return fmt.Errorf("split rank %d/%d, want position of %d in %v", sub.Rank(), sub.NRanks(), c.Rank(), members)
				}
				// An allreduce of the parent ranks inside the new communicator.
				buf := make([]byte, 8)
				encode(abi.Int64, buf, float64(c.Rank()))
				if err := sub.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: 1, Type: abi.Int64}); err != nil {
					return err
				}
				want := 0
				for _, m := range members {
					want += m
				}
				if got := decode(abi.Int64, buf); got != float64(want) {
					return fmt.Errorf("sum in split = %v, want %d", got, want)
				}
				return nil
			})
		})
	}
}

// Calls queued on streams run in order, return at once, and report through
// Synchronize; two communicators on two streams progress independently even
// when ranks queue them in opposite orders.
func TestStreams(t *testing.T) {
	configtest.Setenv(t)
	a, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func() {
			sa, sb := stream.New(), stream.New()
			defer sa.Close()
			defer sb.Close()
			const count = 1000
			bufs := make([][]byte, 8)
			var ev stream.Event
			for i := range bufs {
				bufs[i] = fill(abi.Float32, abi.Sum, r, count)
			}
			queue := func(c *Comm, s *stream.Stream, from int) {
				for i := from; i < from+4; i++ {
					if err := c.Run(s, Op{Coll: wire.AllReduce, Send: ptr(bufs[i]), Recv: ptr(bufs[i]), Count: count, Type: abi.Float32}); err != nil {
						errs <- err
					}
				}
			}
			if r == 0 { // opposite orders: with one shared queue this would deadlock
				queue(a[r], sa, 0)
				ev.Record(sa)
				queue(b[r], sb, 4)
			} else {
				queue(b[r], sb, 4)
				queue(a[r], sa, 0)
				ev.Record(sa)
			}
			ev.Wait()
			if err := sa.Synchronize(); err != nil {
				errs <- err
				return
			}
			if err := sb.Synchronize(); err != nil {
				errs <- err
				return
			}
			var k checker
			for i := range bufs {
				for j := 0; j < count; j += 37 {
					k.expect(fmt.Sprint("buffer ", i), abi.Float32, bufs[i], j, reference(abi.Float32, abi.Sum, 0, 2, j))
				}
			}
			errs <- k.err()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, c := range append(a, b...) {
		c.Destroy()
	}
}
