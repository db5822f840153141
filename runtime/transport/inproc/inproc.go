// Package inproc connects ranks that live in one process (goclCommInitAll,
// or several goclCommInitRank threads) through memory they share.
//
// Each direction of a pair is a FIFO of two frame slots, indexed by two
// counters: the frames the sender posted and the frames the receiver is
// done with. A waiter polls those counters and then sleeps on a futex
// (transport.Await), never on a channel: a rank is often a C thread locked
// to its goroutine, and a parked goroutine costs a thread hand-off on wake.
//
// Small frames are copied into the slot, or written there directly through
// Lend (up to LendMax), so a Send returns at once. Frames above EagerMax are
// handed over by reference (rendezvous): the receiver reads the sender's
// buffer, one copy in all, and the Send waits until it has; the algorithms
// send those from their sender goroutine.
package inproc

import (
	"sync"
	"sync/atomic"
	"time"

	"gocl/runtime/host"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// slots is how many frames a direction holds. The algorithms never need
// more than two (see transport.Lender).
const slots = 2

// LendMax is the largest frame Lend takes; larger frames go by rendezvous
// from the algorithms' sender goroutine, which one copy in all pays for.
// Send copies frames up to EagerMax, a little more than LendMax: the frames
// of one call to one peer differ by at most an element or two (span splits
// evenly), so a rank that lends never makes a rendezvous Send inline, which
// would wait for a peer that may be doing the same.
const (
	LendMax  = 256 << 10
	EagerMax = LendMax + 4<<10
)

// states of a rendezvous frame: the receiver claims it before reading the
// sender's memory; a sender that gives up (deadline, abort) withdraws it
// first, so nobody reads memory its owner has taken back.
const (
	rdvPosted uint32 = iota
	rdvClaimed
	rdvWithdrawn
)

type frame struct {
	h        wire.Header
	data     []byte // what the receiver reads: buf[:n], or the sender's memory
	buf      []byte // this slot's eager storage, grown by the sender
	rdv      bool
	rdvState atomic.Uint32
}

// direction is one way of a pair.
type direction struct {
	posted atomic.Uint64 // frames the sender published
	_      [56]byte
	taken  atomic.Uint64 // frames the receiver is done with
	_      [56]byte
	post   transport.Bell // rung when posted grows (and on close)
	take   transport.Bell // rung when taken grows (and on close)
	f      [slots]frame
}

// pair is the shared state of two ends.
type pair struct {
	dirs   [2]direction // dirs[0]: lower rank -> higher rank
	closed [2]atomic.Bool
	reason [2]atomic.Pointer[string] // why end i aborted; stored before closed[i]
	once   [2]sync.Once
}

// end is one rank's Link.
type end struct {
	stats      transport.Stats // the live view's counts (transport.Counted)
	p          *pair
	self, peer int
	me         int // 0 if self < peer
	out, in    *direction
	sent       uint64                 // frames posted (the sender's own count)
	recvd      uint64                 // frames consumed (the receiver's own count)
	lent       int                    // bytes of the outstanding Lend; 0: none
	deadline   transport.LinkDeadline // own, or the communicator's (ShareDeadline)
	unshare    func()                 // gives back host.RaiseGOMAXPROCS's raise
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
// named comm (any string unique to the communicator, e.g. its secret).
// Both ranks
// call it; the pair is created by whichever comes first and forgotten once
// both have their ends.
func Connect(comm string, self, peer int) transport.Link {
	k := key{comm, min(self, peer), max(self, peer)}
	unshare := host.RaiseGOMAXPROCS()
	regMu.Lock()
	p, ok := registry[k]
	if ok {
		delete(registry, k)
	} else {
		p = &pair{}
		registry[k] = p
	}
	regMu.Unlock()
	e := &end{p: p, self: self, peer: peer, unshare: unshare}
	if self > peer {
		e.me = 1
	}
	e.out, e.in = &p.dirs[e.me], &p.dirs[1-e.me]
	return e
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

// Stats implements transport.Counted.
func (e *end) Stats() []*transport.Stats { return []*transport.Stats{&e.stats} }

func (e *end) Name() string { return "inproc" }

// Buffered is false: only two frames fit, whatever their size (the
// algorithms' small sends go through Lend).
func (e *end) Buffered(int) bool { return false }

func (e *end) SetDeadline(t time.Time) { e.deadline.Set(t) }

// ShareDeadline makes this end's waits take their deadline from d
// (transport.DeadlineSharer) until the next SetDeadline: the communicator
// arms one Deadline a call instead of setting one per link.
func (e *end) ShareDeadline(d *transport.Deadline) { e.deadline.Share(d) }

func (e *end) closedErr() error {
	if e.p.closed[e.me].Load() {
		return transport.Aborted(e.self, e.peer)
	}
	if r := e.p.reason[1-e.me].Load(); r != nil && *r != "" {
		return transport.PeerFailed(e.self, e.peer, *r)
	}
	return transport.PeerClosed(e.self, e.peer, "it closed its end")
}

// failed is the error of a wait that can no longer succeed: this end or the
// peer closed.
func (e *end) failed() error {
	if e.p.closed[e.me].Load() || e.p.closed[1-e.me].Load() {
		return e.closedErr()
	}
	return nil
}

// await waits for ready on bell, turning an expired deadline into a timeout
// that says what was waited for. A long wait (a frame above LendMax: its
// peer is producing or copying it) sleeps without polling.
func (e *end) await(k transport.WaitKind, bell *transport.Bell, long bool, ready func() bool, failed func() error, what func() string) error {
	err := transport.AwaitForDeadline(&e.stats, k, long, bell, e.deadline.Get(), ready, failed)
	if err == transport.ErrExpired {
		return transport.TimedOut(e.self, e.peer, what())
	}
	return err
}

// slot waits until the next frame's slot is free and returns it.
func (e *end) slot(h *wire.Header) (*frame, error) {
	if err := e.failed(); err != nil {
		return nil, err
	}
	d, k := e.out, e.sent
	if k-d.taken.Load() >= slots {
		err := e.await(transport.WaitSend, &d.take, h.Len > LendMax, func() bool { return k-d.taken.Load() < slots }, e.failed,
			func() string { return "sending " + h.Describe() })
		if err != nil {
			return nil, err
		}
	}
	return &d.f[k%slots], nil
}

// publish hands the filled slot to the receiver.
func (e *end) publish() {
	e.sent++
	e.out.posted.Store(e.sent)
	e.out.post.Ring()
}

func (f *frame) eager(n int) []byte {
	if cap(f.buf) < n {
		f.buf = make([]byte, n)
	}
	return f.buf[:n]
}

func (e *end) Send(h *wire.Header, data []byte) error {
	h.Len = uint64(len(data))
	f, err := e.slot(h)
	if err != nil {
		return err
	}
	f.h = *h
	f.rdv = len(data) > EagerMax
	e.stats.CountSent(len(data))
	if !f.rdv {
		f.data = f.eager(len(data))
		copy(f.data, data)
		e.publish()
		return nil
	}
	f.data = data
	f.rdvState.Store(rdvPosted)
	e.publish()
	// The receiver reads data in place: wait until it is done.
	d, k := e.out, e.sent
	done := func() bool { return d.taken.Load() >= k }
	err = e.await(transport.WaitSend, &d.take, true, done, e.failed, func() string { return "sending " + h.Describe() })
	if err != nil && !f.rdvState.CompareAndSwap(rdvPosted, rdvWithdrawn) {
		// The receiver is reading data and never blocks while it does:
		// wait for it, so data may be reused once Send returns.
		transport.AwaitLong(&d.take, 0, done, nil)
	}
	f.data = nil
	return err
}

// Lend returns the slot the peer will read the next frame from.
func (e *end) Lend(n int) ([]byte, bool, error) {
	if n <= 0 || n > LendMax {
		return nil, false, nil
	}
	f, err := e.slot(&wire.Header{Len: uint64(n)})
	if err != nil {
		return nil, false, err
	}
	e.lent = n
	return f.eager(n), true, nil
}

// Commit sends the lent slot.
func (e *end) Commit(h *wire.Header) error {
	n := e.lent
	if n == 0 {
		return transport.Aborted(e.self, e.peer) // no Lend outstanding: a caller bug, reported as failure
	}
	e.lent = 0
	if err := e.failed(); err != nil {
		return err
	}
	f := &e.out.f[e.sent%slots]
	h.Len = uint64(n)
	f.h, f.rdv, f.data = *h, false, f.buf[:n]
	e.stats.CountSent(n)
	e.publish()
	return nil
}

// Cancel gives up the outstanding Lend (the slot stays unpublished).
func (e *end) Cancel() { e.lent = 0 }

// receive takes the next frame, hands it to use and frees its slot.
func (e *end) receive(want *wire.Header, use func(payload []byte)) error {
	d, k := e.in, e.recvd
	if e.p.closed[e.me].Load() {
		return e.closedErr()
	}
	if d.posted.Load() <= k {
		// Frames the peer posted before it closed are still delivered.
		err := e.await(transport.WaitRecv, &d.post, want.Len > LendMax, func() bool { return d.posted.Load() > k }, e.failed,
			func() string { return "waiting for " + want.Describe() })
		if err != nil {
			return err
		}
	}
	f := &d.f[k%slots]
	if f.rdv && !f.rdvState.CompareAndSwap(rdvPosted, rdvClaimed) {
		return e.closedErr() // the sender withdrew it: it failed
	}
	err := transport.CheckFrame(want, &f.h, e.self, e.peer)
	if err == nil {
		use(f.data)
		e.stats.CountReceived(len(f.data))
	}
	e.recvd++
	d.taken.Store(e.recvd)
	d.take.Ring()
	return err
}

func (e *end) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	return e.receive(want, func(p []byte) { copy(dst, p) })
}

func (e *end) RecvWith(want *wire.Header, use func(payload []byte)) error {
	return e.receive(want, use)
}

// Pending reports a frame of the peer waiting for this end (or a closed
// pair, which Recv reports at once): the transport.Prober of receives from
// any source.
func (e *end) Pending() bool {
	return e.in.posted.Load() > e.recvd || e.p.closed[e.me].Load() || e.p.closed[1-e.me].Load()
}

// Peek shows the header of the peer's waiting frame (transport.Peeker), or
// a KindAbort header for a closed pair. It reads posted once: a frame
// posted after a first look must not pass for a closed pair (Pending
// cannot tell them apart), or a receive from any source would take a
// collective's frame for a send.
func (e *end) Peek() (wire.Header, bool) {
	if e.p.closed[e.me].Load() || e.p.closed[1-e.me].Load() {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	if e.in.posted.Load() > e.recvd {
		return e.in.f[e.recvd%slots].h, true
	}
	return wire.Header{}, false
}

// Failure reports a closed pair, with the peer's reason (transport.Link).
func (e *end) Failure() error { return e.failed() }

var (
	_ transport.Peeker         = (*end)(nil)
	_ transport.Lender         = (*end)(nil)
	_ transport.DeadlineSharer = (*end)(nil)
)

func (e *end) Close() error {
	e.Abort("")
	return nil
}

// Abort closes this end, records why, and wakes every waiter of the pair.
func (e *end) Abort(reason string) {
	e.p.once[e.me].Do(func() {
		e.p.reason[e.me].Store(&reason)
		e.p.closed[e.me].Store(true)
		for i := range e.p.dirs {
			e.p.dirs[i].post.Ring()
			e.p.dirs[i].take.Ring()
		}
		e.unshare()
	})
}
