package comm

import (
	"fmt"
	"runtime/debug"

	"gocl/runtime/algo"
)

// A count larger than the caller's buffers is undefined behaviour, as with
// memcpy (algo/fault.go). A call's own goroutine makes a memory fault a
// panic while it runs (faulting), and catchFault ends the process with one
// line that names the call (algo.Fatal) instead of the Go runtime's
// goroutine dump.

// faulting makes memory faults on the calling goroutine panics; the result
// goes to catchFault, which restores the previous setting.
func faulting() bool { return debug.SetPanicOnFault(true) }

// catchFault, deferred by a call's goroutine, restores its fault setting
// and turns a memory fault into algo.Fatal; other panics go on. op points
// to the op running (a batch moves it along). It must be the deferred
// function itself: recover works only there.
func (c *Comm) catchFault(op **Op, was bool) {
	debug.SetPanicOnFault(was)
	r := recover()
	if r == nil {
		return
	}
	addr, ok := algo.FaultAddr(r)
	if !ok || *op == nil {
		panic(r)
	}
	o := *op
	algo.Fatal(fmt.Sprintf("%s on rank %d (count %d, %s)", o.name(), c.rank, uint64(o.Count), o.Type), addr)
}
