package transport

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"gocl/runtime/host"
)

// A Bell is what a waiter sleeps on and the party that makes its condition
// true rings: a count of sleepers, so that ringing costs one atomic load
// when nobody sleeps, and a channel closed to wake them. Sleeping parks the
// goroutine, which hands its P to other goroutines at once (a thread
// blocked in a raw futex keeps it until sysmon retakes it, up to
// milliseconds). The zero Bell is ready to use; it must not be copied.
type Bell struct {
	sleepers atomic.Int32
	mu       sync.Mutex
	ch       chan struct{} // closed by Ring; nil when nobody waits on it
}

// Ring wakes every waiter sleeping on b. Call it after making the
// condition true (sequentially consistent atomics: a waiter either sees the
// condition or is woken).
func (b *Bell) Ring() {
	if b.sleepers.Load() == 0 {
		return
	}
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// channel returns the channel the next Ring closes.
func (b *Bell) channel() chan struct{} {
	b.mu.Lock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	c := b.ch
	b.mu.Unlock()
	return c
}

// epoch anchors Now and since: one monotonic clock read each.
var epoch = time.Now()

// since is the monotonic time since epoch.
func since() time.Duration { return time.Since(epoch) }

// Now is time.Now for deadlines, at one clock read instead of two (time.Now
// reads the wall and the monotonic clocks, and on some VMs a read costs as
// much as a small exchange: bench/CALLPATH.md): its monotonic reading is exact, its
// wall reading is epoch's plus the monotonic time since, so deadlines made
// from it and compared with it (Sub, Before, UnixNano) agree.
func Now() time.Time { return epoch.Add(since()) }

// A Deadline bounds the waits of one call by a timeout that starts when
// the first wait that has to sleep asks for it (DeadlineUnixNano), so a call
// whose waits all end while polling never reads the clock (see Now). A stalled
// peer still fails the call within the timeout of the first sleep; the
// waits that ended while polling before it made progress. The communicator
// arms it at every call and shares it with its links (DeadlineSharer); a
// link alone sets it (Set). The zero Deadline is none.
type Deadline struct {
	at      atomic.Int64 // Unix ns; 0: not read yet, or none
	timeout atomic.Int64 // ns after the first read; 0: none (or at is fixed)
}

// Arm starts a call: its deadline is timeout after the first UnixNano (0:
// none). The call's waits must have ended: calls are sequential.
func (d *Deadline) Arm(timeout time.Duration) {
	// Stored only when they change: an atomic store is a locked xchg, and
	// every call arms its deadline.
	if d.timeout.Load() != int64(timeout) {
		d.timeout.Store(int64(timeout))
	}
	if d.at.Load() != 0 {
		d.at.Store(0)
	}
}

// Set fixes the deadline at t (the zero time: none).
func (d *Deadline) Set(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	d.timeout.Store(0)
	d.at.Store(ns)
}

// UnixNano is the deadline in Unix ns (0: none), read from the clock at the
// first call after Arm: waiters of one call's channels race here, and the
// first one's reading holds for all.
func (d *Deadline) UnixNano() int64 {
	if at := d.at.Load(); at != 0 {
		return at
	}
	t := d.timeout.Load()
	if t == 0 {
		return 0
	}
	d.at.CompareAndSwap(0, Now().UnixNano()+t)
	return d.at.Load()
}

// LinkDeadline is a link's deadline: its own (SetDeadline) or its
// communicator's (ShareDeadline), the one the link's waits read. The zero
// LinkDeadline is the link's own, none.
type LinkDeadline struct {
	own    Deadline
	shared atomic.Pointer[Deadline] // nil: own
}

// Set gives the link a deadline of its own (until Share).
func (l *LinkDeadline) Set(t time.Time) {
	l.own.Set(t)
	l.shared.Store(nil)
}

// Share makes the link's waits take d, armed once per call by the
// communicator, until the next Set.
func (l *LinkDeadline) Share(d *Deadline) { l.shared.Store(d) }

// Get is the deadline in force.
func (l *LinkDeadline) Get() *Deadline {
	if d := l.shared.Load(); d != nil {
		return d
	}
	return &l.own
}

// A DeadlineSharer is a Link whose waits can take their deadline from the
// communicator's Deadline (armed once per call, for all links at two
// stores) instead of SetDeadline's (one clock read per call, and a store
// per link).
type DeadlineSharer interface {
	ShareDeadline(d *Deadline)
}

// ErrExpired is Await's error for a wait that passed its deadline; callers
// wrap it into TimedOut with their own words.
var ErrExpired = errors.New("deadline passed")

// sleepBackstop bounds one sleep: every state change rings the bell, so
// this only guards against a waker that forgot to.
const sleepBackstop = 250 * time.Millisecond

// Await returns once ready() holds, polling under the waiting policy
// (host.Poll), then
// sleeping on b. Whoever makes ready() or failed() true must ring b.
// failed() (nil: never) is checked whenever ready() does not hold before a
// sleep, so a condition already met wins over a failure; its error is
// returned. deadline is in Unix ns (0: none); past it Await returns
// ErrExpired.
func Await(b *Bell, deadline int64, ready func() bool, failed func() error) error {
	return await(b, deadline, ready, failed, true, nil, 0)
}

// AwaitLong is Await without polling, for waits known to be long (a peer
// copying or producing a large frame): a poller would only take the core
// that peer needs.
func AwaitLong(b *Bell, deadline int64, ready func() bool, failed func() error) error {
	return await(b, deadline, ready, failed, false, nil, 0)
}

// AwaitFor is Await (AwaitLong when long) that marks s as waiting for k
// while it sleeps (the live view's "waits on").
func AwaitFor(s *Stats, k WaitKind, long bool, b *Bell, deadline int64, ready func() bool, failed func() error) error {
	return await(b, deadline, ready, failed, !long, s, k)
}

// AwaitForDeadline is AwaitFor with the deadline read from d only when the
// wait has to sleep: a wait that ends while polling never reads the clock
// (Deadline).
func AwaitForDeadline(s *Stats, k WaitKind, long bool, b *Bell, d *Deadline, ready func() bool, failed func() error) error {
	if ready() || (!long && host.Poll(ready)) {
		return nil
	}
	return await(b, d.UnixNano(), ready, failed, false, s, k)
}

func await(b *Bell, deadline int64, ready func() bool, failed func() error, polls bool, s *Stats, k WaitKind) error {
	if ready() || (polls && host.Poll(ready)) {
		return nil
	}
	if s != nil {
		s.BeginWait(k)
		defer s.EndWait()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.sleepers.Add(1)
		wake := b.channel() // before the check: a Ring after it closes this one
		if ready() {
			b.sleepers.Add(-1)
			return nil
		}
		if failed != nil {
			if err := failed(); err != nil {
				b.sleepers.Add(-1)
				return err
			}
		}
		d := sleepBackstop
		if deadline != 0 {
			left := time.Duration(deadline - Now().UnixNano())
			if left <= 0 {
				b.sleepers.Add(-1)
				return ErrExpired
			}
			d = min(d, left)
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-wake:
		case <-timer.C:
		}
		b.sleepers.Add(-1)
		if ready() {
			return nil
		}
	}
}
