package algo

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// moveLink is a lending recLink that also takes frames by reference
// (transport.Mover, shm's single copy): a moved frame is the sender's own
// bytes, read by the receiver whenever it gets to them, so a sender that
// touched them before its call's Flush would deliver something else.
type moveLink struct {
	*lendLink
	min   int
	moved *int // frames moved by this rank (the world's lock held)
}

var _ transport.Mover = (*moveLink)(nil)

func (l *moveLink) Moves(n int) bool { return n >= l.min }

func (l *moveLink) Move(h *wire.Header, data []byte) error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	h.Len = uint64(len(data))
	l.post(h, data) // not a copy (Send posts a clone)
	*l.moved++
	return nil
}

func (l *moveLink) Post(*wire.Header, []byte) (bool, error) { return false, nil }

// Flush waits until the peer has taken every frame of this direction.
func (l *moveLink) Flush() error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.await(l.self, func() string { return fmt.Sprintf("flushes its frames to rank %d", l.peer) },
		func() bool { return w.err != nil || len(l.out().frames) == 0 })
}

// An allgather's and a broadcast's frames go by reference where the link
// takes them (MoveMin and up) in calls of up to moveMax bytes; a larger
// call, and every reduction, goes through the slots. The results are right
// either way, and a sender that reused a moved frame's bytes before the
// peer read them would show here as a wrong result.
func TestDataMovementGoesByReference(t *testing.T) {
	const min = 1024
	for _, tc := range []struct {
		coll      wire.Coll
		ranks     int
		bytes     int // the call's data: an allgather's result, a broadcast's message
		wantMoves bool
	}{
		{wire.AllGather, 2, 64 << 10, true},
		{wire.AllGather, 3, 96 << 10, true},
		{wire.AllGather, 2, moveMax, true},
		{wire.AllGather, 2, 2 * moveMax, false},
		{wire.AllGather, 2, 1024, false}, // frames of 512 bytes: under the link's minimum
		{wire.Broadcast, 2, 64 << 10, true},
		{wire.Broadcast, 3, 64 << 10, true},
		{wire.Broadcast, 2, 2 * moveMax, false},
		{wire.AllReduce, 2, 64 << 10, false},
	} {
		name := fmt.Sprintf("%s/%dranks/%dB", tc.coll, tc.ranks, tc.bytes)
		t.Run(name, func(t *testing.T) {
			n := tc.ranks
			w := newWorld(n, true)
			moved := make([]int, n)
			red, err := kernels.NewReducer(abi.Float32, abi.Sum, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			count := tc.bytes / 4 // float32 elements of the call's header
			if tc.coll == wire.AllGather {
				count /= n
			}
			outs := make([][]byte, n)
			ins := make([][]byte, n)
			var wg sync.WaitGroup
			for r := range n {
				links := w.links(r)
				for p, l := range links {
					if l != nil {
						links[p] = &moveLink{lendLink: l.(*lendLink), min: min, moved: &moved[r]}
					}
				}
				c := &Ctx{Rank: r, N: n, Links: links, Hdr: wire.Header{Kind: wire.KindColl, Coll: tc.coll,
					Dtype: uint8(abi.Float32), Op: uint8(abi.Sum), Count: uint64(count)},
					Red: red, Elem: 4, Chunk: 256 << 10, Local: 1, Fail: w.fail}
				in := make([]byte, count*4)
				for i := range in {
					in[i] = byte(r*31 + i*7)
				}
				if tc.coll == wire.AllReduce {
					for i := 0; i < len(in); i += 4 {
						in[i], in[i+1], in[i+2], in[i+3] = 0, 0, byte(r+1), 0x3f // small floats
					}
				}
				ins[r] = in
				out := make([]byte, count*4)
				if tc.coll == wire.AllGather {
					out = make([]byte, n*count*4)
				}
				outs[r] = out
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					switch tc.coll {
					case wire.AllGather:
						err = AllGatherRing(c, in, out, count)
					case wire.Broadcast:
						err = BroadcastRing(c, in, out, count, 0)
					case wire.AllReduce:
						err = AllReduceRing(c, in, out, count)
					}
					w.done(r, err)
				}()
			}
			wg.Wait()
			if w.err != nil {
				t.Fatal(w.err)
			}
			for r := range n {
				var want []byte
				switch tc.coll {
				case wire.AllGather:
					want = bytes.Join(ins, nil)
				case wire.Broadcast:
					want = ins[0]
				case wire.AllReduce:
					want = nil // checked by the other tests; here only how frames went
				}
				if want != nil && !bytes.Equal(outs[r], want) {
					t.Fatalf("rank %d: wrong result", r)
				}
				if got := moved[r] > 0; got != tc.wantMoves && (tc.coll != wire.Broadcast || r != n-1) {
					// a ring broadcast's last rank sends nothing
					t.Errorf("rank %d moved %d frames by reference, want moves %v", r, moved[r], tc.wantMoves)
				}
			}
		})
	}
}
