package transport

import (
	"syscall"
	"time"

	"gocl/runtime/config"
)

// SpinFor is how long a waiter polls before it parks. Parking a goroutine
// that C called into (it is locked to the C thread) costs a thread handoff
// of tens of microseconds on wake-up; polling with sched_yield keeps small
// messages fast without starving other ranks on a busy or oversubscribed
// host, since every iteration offers the core to them.
var SpinFor = time.Duration(config.IntOr("SPIN_US", 50)) * time.Microsecond

// Spin calls try until it reports success or SpinFor has passed, yielding the
// CPU between attempts. It returns whether try succeeded.
func Spin(try func() bool) bool {
	if try() {
		return true
	}
	start := time.Now()
	for time.Since(start) < SpinFor {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if try() {
			return true
		}
	}
	return false
}
