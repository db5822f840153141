package transport

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
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
// reads the wall and the monotonic clocks; a read costs 0.1-0.3 µs on some
// VMs, as much as a small exchange): its monotonic reading is exact, its
// wall reading is epoch's plus the monotonic time since, so deadlines made
// from it and compared with it (Sub, Before, UnixNano) agree.
func Now() time.Time { return epoch.Add(since()) }

// ErrExpired is Await's error for a wait that passed its deadline; callers
// wrap it into TimedOut with their own words.
var ErrExpired = errors.New("deadline passed")

// sleepBackstop bounds one sleep: every state change rings the bell, so
// this only guards against a waker that forgot to.
const sleepBackstop = 250 * time.Millisecond

// Await returns once ready() holds, polling under the waiting policy, then
// sleeping on b. Whoever makes ready() or failed() true must ring b.
// failed() (nil: never) is checked whenever ready() does not hold before a
// sleep, so a condition already met wins over a failure; its error is
// returned. deadline is in Unix ns (0: none); past it Await returns
// ErrExpired.
func Await(b *Bell, deadline int64, ready func() bool, failed func() error) error {
	return await(b, deadline, ready, failed, true)
}

// AwaitLong is Await without polling, for waits known to be long (a peer
// copying or producing a large frame): a poller would only take the core
// that peer needs.
func AwaitLong(b *Bell, deadline int64, ready func() bool, failed func() error) error {
	return await(b, deadline, ready, failed, false)
}

func await(b *Bell, deadline int64, ready func() bool, failed func() error, polls bool) error {
	if ready() || (polls && poll(ready)) {
		return nil
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
