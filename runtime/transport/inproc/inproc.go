// Package inproc connects ranks that live in one process (goclCommInitAll,
// or several goclCommInitRank threads): the receiver reads the sender's
// buffer directly, so a message costs one copy (or none when it is reduced
// straight from the sender's memory).
package inproc

import (
	"sync"
	"sync/atomic"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

type message struct {
	h    wire.Header
	data []byte
}

// direction is one way of a pair: the sender posts a message and waits for
// the receiver's ack, which says the receiver is done with the sender's bytes.
// One message is in flight per direction, so msg is reused.
type direction struct {
	post    chan *message
	ack     chan struct{} // capacity 1
	msg     message
	posting atomic.Bool // a Send is offering msg (Pending reads it)
}

// pair is the shared state of two ends.
type pair struct {
	dirs   [2]direction     // dirs[0]: lower rank -> higher rank
	closed [2]chan struct{} // closed[i]: end i (0 = lower rank) closed
	once   [2]sync.Once
	reason [2]string // why end i aborted; written before closed[i] is closed
}

// end is one rank's Link.
type end struct {
	p          *pair
	self, peer int
	me         int // 0 if self < peer
	mu         sync.Mutex
	deadline   time.Time
}

var (
	regMu    sync.Mutex
	registry = map[key]*pair{}
)

type key struct {
	comm   string
	lo, hi int
}

// Connect returns rank self's end of its link to peer in the communicator
// named comm (any string unique to the communicator, e.g. its secret). Both
// ranks call it; the pair is created by whichever comes first and forgotten
// once both have their ends.
func Connect(comm string, self, peer int) transport.Link {
	k := key{comm, min(self, peer), max(self, peer)}
	regMu.Lock()
	p, ok := registry[k]
	if ok {
		delete(registry, k)
	} else {
		p = &pair{}
		for i := range p.dirs {
			p.dirs[i] = direction{post: make(chan *message), ack: make(chan struct{}, 1)}
			p.closed[i] = make(chan struct{})
		}
		registry[k] = p
	}
	regMu.Unlock()
	me := 0
	if self > peer {
		me = 1
	}
	return &end{p: p, self: self, peer: peer, me: me}
}

// Forget drops pairs of comm that were never completed (init failed halfway).
func Forget(comm string) {
	regMu.Lock()
	for k := range registry {
		if k.comm == comm {
			delete(registry, k)
		}
	}
	regMu.Unlock()
}

func (e *end) Name() string { return "inproc" }

// Buffered is false: the receiver reads the sender's memory, so every Send
// waits for it.
func (e *end) Buffered(int) bool { return false }

func (e *end) SetDeadline(t time.Time) {
	e.mu.Lock()
	e.deadline = t
	e.mu.Unlock()
}

// timer returns a channel that fires at the deadline (nil: never) and a stop
// function. It is only built when a wait actually blocks.
func (e *end) timer() (<-chan time.Time, func()) {
	e.mu.Lock()
	d := e.deadline
	e.mu.Unlock()
	if d.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(d))
	return t.C, func() { t.Stop() }
}

func (e *end) closedErr() error {
	select {
	case <-e.p.closed[e.me]:
		return transport.Aborted(e.self, e.peer)
	default:
	}
	if r := e.p.reason[1-e.me]; r != "" {
		return transport.PeerFailed(e.self, e.peer, r)
	}
	return transport.PeerClosed(e.self, e.peer, "it closed its end")
}

func (e *end) Send(h *wire.Header, data []byte) error {
	h.Len = uint64(len(data))
	d := &e.p.dirs[e.me]
	d.msg = message{h: *h, data: data}
	d.posting.Store(true) // the receiver clears it when it takes msg
	mine, theirs := e.p.closed[e.me], e.p.closed[1-e.me]
	select { // fast path: the receiver is already waiting
	case d.post <- &d.msg:
	default:
		tc, stop := e.timer()
		defer stop()
		select {
		case d.post <- &d.msg:
		case <-mine:
			d.posting.Store(false)
			return e.closedErr()
		case <-theirs:
			d.posting.Store(false)
			return e.closedErr()
		case <-tc:
			d.posting.Store(false)
			return transport.TimedOut(e.self, e.peer, "sending "+h.Describe())
		}
	}
	// The receiver now reads data; it acks as soon as it is done, and it
	// never blocks in between, so this wait is short and needs no deadline.
	// Returning earlier would let the caller free memory still being read.
	<-d.ack
	return nil
}

// receive takes the next message and hands it to use, then acks.
func (e *end) receive(want *wire.Header, use func(m *message)) error {
	d := &e.p.dirs[1-e.me]
	mine, theirs := e.p.closed[e.me], e.p.closed[1-e.me]
	var m *message
	select {
	case m = <-d.post:
	default:
		tc, stop := e.timer()
		defer stop()
		select {
		case m = <-d.post:
		case <-mine:
			return e.closedErr()
		case <-theirs:
			return e.closedErr()
		case <-tc:
			return transport.TimedOut(e.self, e.peer, "waiting for "+want.Describe())
		}
	}
	d.posting.Store(false) // before the ack: the sender's next Send sets it again
	err := transport.CheckFrame(want, &m.h, e.self, e.peer)
	if err == nil {
		use(m)
	}
	d.ack <- struct{}{} // buffered: never blocks
	return err
}

func (e *end) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	return e.receive(want, func(m *message) { copy(dst, m.data) })
}

func (e *end) RecvWith(want *wire.Header, use func(payload []byte)) error {
	return e.receive(want, func(m *message) { use(m.data) })
}

// Pending reports a Send of the peer waiting for this end (or a closed pair,
// which Recv reports at once): the transport.Prober of receives from any source.
func (e *end) Pending() bool {
	if e.p.dirs[1-e.me].posting.Load() {
		return true
	}
	select {
	case <-e.p.closed[e.me]:
		return true
	case <-e.p.closed[1-e.me]:
		return true
	default:
		return false
	}
}

// Peek shows the header of the peer's waiting Send (transport.Peeker).
func (e *end) Peek() (wire.Header, bool) {
	d := &e.p.dirs[1-e.me]
	if d.posting.Load() {
		return d.msg.h, true
	}
	if e.Pending() {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	return wire.Header{}, false
}

var _ transport.Peeker = (*end)(nil)

func (e *end) Close() error {
	e.Abort("")
	return nil
}

func (e *end) Abort(reason string) {
	e.p.once[e.me].Do(func() {
		e.p.reason[e.me] = reason
		close(e.p.closed[e.me])
	})
}
