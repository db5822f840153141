package transport

import (
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/config"
)

// A waiter polls for a while (GOCL_SPIN_US) before it parks. Parking a
// goroutine that C called into (it is locked to the C thread) costs a thread
// handoff of tens of microseconds on wake-up; polling with sched_yield keeps
// small messages fast without starving other ranks on a busy or
// oversubscribed host, since every iteration offers the core to them. The
// setting is process-wide, read again at every communicator init.
var spinFor atomic.Int64

func init() {
	config.OnReload(func() { spinFor.Store(int64(config.IntOr("SPIN_US", 50)) * int64(time.Microsecond)) })
}

// SpinFor is how long a waiter polls now.
func SpinFor() time.Duration { return time.Duration(spinFor.Load()) }

// Spin calls try until it reports success or SpinFor() has passed, yielding the
// CPU between attempts. It returns whether try succeeded.
func Spin(try func() bool) bool {
	if try() {
		return true
	}
	start, limit := time.Now(), SpinFor()
	for time.Since(start) < limit {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if try() {
			return true
		}
	}
	return false
}
