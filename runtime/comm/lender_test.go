package comm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// slotLink gives any Link the transport.Lender capability the way a
// shared-memory FIFO has it: depth slots of at most size bytes; Lend waits
// for a free slot, Commit queues the filled slot, and a goroutine sends
// queued frames over the wrapped link in order and frees their slots. Plain
// Sends go through the same queue, so frames keep their order. Frames over
// size cannot be lent (Lend says so), which exercises the fallback.
type slotLink struct {
	transport.Link
	size  int
	free  chan []byte
	out   chan slotFrame
	cur   []byte
	lent  atomic.Int64 // frames sent from a lent slot
	dead  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	until time.Time
	err   error // first error of the sending goroutine
}

type slotFrame struct {
	h    wire.Header
	data []byte
	slot bool          // data is a slot, to be freed once sent
	done chan struct{} // closed once sent (plain Sends wait for it)
}

func newSlotLink(l transport.Link, depth, size int) *slotLink {
	s := &slotLink{Link: l, size: size, free: make(chan []byte, depth), out: make(chan slotFrame, depth+1), dead: make(chan struct{})}
	for range depth {
		s.free <- make([]byte, size)
	}
	go s.loop()
	return s
}

func (s *slotLink) loop() {
	for {
		select {
		case f := <-s.out:
			if err := s.Link.Send(&f.h, f.data); err != nil {
				s.mu.Lock()
				if s.err == nil {
					s.err = err
				}
				s.mu.Unlock()
			}
			if f.slot {
				s.free <- f.data[:cap(f.data)]
			}
			if f.done != nil {
				close(f.done)
			}
		case <-s.dead:
			return
		}
	}
}

func (s *slotLink) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *slotLink) Lend(n int) ([]byte, bool, error) {
	if n > s.size {
		return nil, false, nil
	}
	if err := s.failed(); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	until := s.until
	s.mu.Unlock()
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case b := <-s.free:
		s.cur = b[:n]
		return s.cur, true, nil
	case <-s.dead:
		return nil, false, fmt.Errorf("slotLink: closed")
	case <-timeout:
		return nil, false, fmt.Errorf("slotLink: no free slot before the deadline")
	}
}

func (s *slotLink) Commit(h *wire.Header) error {
	h.Len = uint64(len(s.cur))
	s.lent.Add(1)
	s.out <- slotFrame{h: *h, data: s.cur, slot: true}
	s.cur = nil
	return s.failed()
}

func (s *slotLink) Cancel() {
	if s.cur != nil {
		s.free <- s.cur[:cap(s.cur)]
		s.cur = nil
	}
}

func (s *slotLink) Send(h *wire.Header, data []byte) error {
	f := slotFrame{h: *h, data: data, done: make(chan struct{})}
	select {
	case s.out <- f:
	case <-s.dead:
		return fmt.Errorf("slotLink: closed")
	}
	select {
	case <-f.done:
	case <-s.dead:
		return fmt.Errorf("slotLink: closed")
	}
	return s.failed()
}

func (s *slotLink) SetDeadline(t time.Time) {
	s.mu.Lock()
	s.until = t
	s.mu.Unlock()
	s.Link.SetDeadline(t)
}

func (s *slotLink) Close() error {
	s.once.Do(func() { close(s.dead) })
	return s.Link.Close()
}

func (s *slotLink) Abort(reason string) {
	s.Link.Abort(reason)
	s.once.Do(func() { close(s.dead) })
}

// Buffered is false: a plain Send waits for the wrapped link's Send.
func (s *slotLink) Buffered(int) bool { return false }

// TestCollectivesLentSlots runs the matrix with every link lending two
// slots of one chunk (as a shared-memory FIFO would), once per forced
// algorithm: reductions and copies write straight into the peer's slot, and
// frames too large for a slot (direct's whole buffers) fall back to Send.
func TestCollectivesLentSlots(t *testing.T) {
	const chunk = 4096
	ranks := map[string][]int{"ring": {2, 5}, "direct": {3}, "tree": {3, 6}, "halvingdoubling": {2, 4}}
	if testing.Short() {
		ranks = map[string][]int{"ring": {3}, "direct": {2}, "tree": {3}, "halvingdoubling": {2}}
	}
	for _, algo := range algoNames {
		for _, n := range ranks[algo] {
			if n == 1 {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", algo, n), func(t *testing.T) {
				configtest.Setenv(t, "GOCL_ALGO", algo, "GOCL_BUFFSIZE", fmt.Sprint(chunk), "GOCL_DIRECT_THRESHOLD", "0", "GOCL_TIMEOUT", "60")
				clique(t, n, func(c *Comm) error {
					slots := make([]*slotLink, 0, n)
					for p, l := range c.links {
						if l != nil {
							s := newSlotLink(l, 2, chunk)
							c.links[p] = s
							slots = append(slots, s)
						}
					}
					err := matrix(c, []abi.DataType{abi.Int8, abi.Float32, abi.Bfloat16},
						[]int{1, 7, 1023, chunk/4 + 1, 3*n*chunk/4 + 5})
					var lent int64
					for _, s := range slots {
						lent += s.lent.Load()
					}
					if err == nil && lent == 0 {
						err = fmt.Errorf("no frame went through a lent slot")
					}
					return err
				})
			})
		}
	}
}
