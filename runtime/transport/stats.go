package transport

import (
	"sync/atomic"
	"time"
)

// Stats is what a link tells the live view (gocl status, gocl top): the
// payload bytes it carried each way, and the wait it is in when that wait
// went past polling. Counting costs an atomic add per frame; the wait is
// marked only where a wait sleeps, so the fast path reads no clock.
type Stats struct {
	Sent, Received atomic.Uint64
	waitSince      atomic.Int64 // unix ns when the wait began; 0: none
	waitKind       atomic.Uint32
}

// WaitKind says what a waiting link waits for.
type WaitKind uint32

const (
	WaitRecv WaitKind = iota + 1 // the peer's next frame
	WaitSend                     // room for this end's frame (the peer has not read the last ones)
)

func (k WaitKind) String() string {
	switch k {
	case WaitRecv:
		return "recv"
	case WaitSend:
		return "send"
	}
	return "none"
}

// Counted is a Link with Stats.
type Counted interface {
	Stats() *Stats
}

// Stats lets a link that embeds Stats implement Counted.
func (s *Stats) Stats() *Stats { return s }

// BeginWait marks the start of a wait that sleeps; EndWait its end. Waits
// of one link do not nest (a link serves one call at a time each way; a
// send and a receive at once keep the later mark, which is enough to say
// the link waits).
func (s *Stats) BeginWait(k WaitKind) {
	s.waitKind.Store(uint32(k))
	s.waitSince.Store(Now().UnixNano())
}

func (s *Stats) EndWait() { s.waitSince.Store(0) }

// Waiting reports the wait in progress, if any.
func (s *Stats) Waiting() (k WaitKind, since time.Time, ok bool) {
	ns := s.waitSince.Load()
	if ns == 0 {
		return 0, time.Time{}, false
	}
	return WaitKind(s.waitKind.Load()), time.Unix(0, ns), true
}
