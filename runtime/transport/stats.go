package transport

import (
	"sync/atomic"
	"time"
)

// Stats is what a link tells the live view (gocl status, gocl top): the
// payload bytes it carried each way, and the wait it is in when that wait
// went past polling. The fast path pays a plain add per frame: the totals
// are published (Sent, Received) every PublishEvery bytes and whenever the
// link starts a wait that sleeps, so they lag by less than that; the wait
// is marked only where it sleeps, so the fast path reads no clock.
type Stats struct {
	Sent, Received atomic.Uint64 // published totals
	sent, received uint64        // the sender's and the receiver's own (one goroutine each way at a time)
	waitSince      atomic.Int64  // unix ns when the wait began; 0: none
	waitKind       atomic.Uint32
}

// PublishEvery is how far the published totals may lag.
const PublishEvery = 64 << 10

// CountSent counts a frame sent; the link's sending goroutine calls it.
func (s *Stats) CountSent(n int) {
	s.sent += uint64(n)
	if s.sent-s.Sent.Load() >= PublishEvery {
		s.Sent.Store(s.sent)
	}
}

// CountReceived counts a frame received; the link's receiving goroutine calls it.
func (s *Stats) CountReceived(n int) {
	s.received += uint64(n)
	if s.received-s.Received.Load() >= PublishEvery {
		s.Received.Store(s.received)
	}
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

// Counted is a Link with Stats: one per channel the link drives at once
// (each counted by its own goroutines).
type Counted interface {
	Stats() []*Stats
}

// BeginWait marks the start of a wait that sleeps (and publishes the
// count of the direction it waits on); EndWait its end. Waits
// of one link do not nest (a link serves one call at a time each way; a
// send and a receive at once keep the later mark, which is enough to say
// the link waits).
func (s *Stats) BeginWait(k WaitKind) {
	if k == WaitRecv { // the waiting goroutine owns that direction's count
		s.Received.Store(s.received)
	} else {
		s.Sent.Store(s.sent)
	}
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

// Totals sums a link's published counts over its channels.
func Totals(ss []*Stats) (sent, received uint64) {
	for _, s := range ss {
		sent += s.Sent.Load()
		received += s.Received.Load()
	}
	return sent, received
}

// Longest is the wait of a link's channels that began first.
func Longest(ss []*Stats) (k WaitKind, since time.Time, ok bool) {
	for _, s := range ss {
		if sk, at, w := s.Waiting(); w && (!ok || at.Before(since)) {
			k, since, ok = sk, at, true
		}
	}
	return k, since, ok
}
