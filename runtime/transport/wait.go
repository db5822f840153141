package transport

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// A Bell is what a waiter of one process sleeps on and the party that
// makes its condition true rings: a futex word and a count of sleepers, so
// that ringing costs one atomic add when nobody sleeps. The zero Bell is
// ready to use; it must not be copied.
type Bell struct {
	word     atomic.Uint32
	sleepers atomic.Int32
}

// Ring wakes every waiter sleeping on b. Call it after making the
// condition true (sequentially consistent atomics: a waiter either sees the
// condition or is woken).
func (b *Bell) Ring() {
	b.word.Add(1)
	if b.sleepers.Load() != 0 {
		futex(&b.word, futexWakePrivate, 1<<30, nil)
	}
}

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
	if ready() || poll(ready) {
		return nil
	}
	for {
		v := b.word.Load()
		b.sleepers.Add(1)
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
			left := time.Duration(deadline - time.Now().UnixNano())
			if left <= 0 {
				b.sleepers.Add(-1)
				return ErrExpired
			}
			d = min(d, left)
		}
		ts := syscall.NsecToTimespec(int64(d))
		futex(&b.word, futexWaitPrivate, uintptr(v), &ts)
		b.sleepers.Add(-1)
		if ready() {
			return nil
		}
	}
}

const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG: waker and sleeper share one process
	futexWakePrivate = 1 | 128
)

func futex(addr *atomic.Uint32, op, val uintptr, ts *syscall.Timespec) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), op, val, uintptr(unsafe.Pointer(ts)), 0, 0)
}
