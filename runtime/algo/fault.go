package algo

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

// A count larger than the caller's buffers makes a call read or write past
// them: undefined behaviour, as with memcpy, that no library can check (a C
// pointer carries no size). When the access lands outside the process's
// memory, the goroutines of a call fault: debug.SetPanicOnFault turns the
// fault into a panic, and Fatal ends the process with one line that names
// the call, not the Go runtime's goroutine dump. Returning an error instead
// is not safe: writes before the fault may already have corrupted memory
// (a heap buffer's neighbours, malloc's own data), and a transport whose
// copy was cut short leaves its peer waiting for a frame that never ends.

// FaultAddr reports whether r, a recovered panic, is a memory fault that
// debug.SetPanicOnFault turned into a panic, and its address.
func FaultAddr(r any) (uintptr, bool) {
	if e, ok := r.(interface {
		error
		Addr() uintptr
	}); ok {
		return e.Addr(), true
	}
	return 0, false
}

// FaultExit is the exit status of a process Fatal ends (Go's own for a
// fatal error).
const FaultExit = 2

// exiting is held by the first Fatal for good: ranks of one process that
// fault at once (in-process ranks given the same overcount) print one line
// between them, and the others wait for the exit.
var exiting sync.Mutex

// Fatal writes one line about a memory fault at addr in the call described
// by call (its name, rank and count) to stderr and ends the process.
func Fatal(call string, addr uintptr) {
	exiting.Lock()
	fmt.Fprintf(os.Stderr, "gocl: fatal: %s: memory fault at address %#x in the call's buffers: "+
		"the count is larger than the buffers passed (undefined behaviour, as with memcpy; memory may be corrupted), "+
		"so the process exits (status %d)\n", call, addr, FaultExit)
	os.Exit(FaultExit)
}

// catchFault, deferred first thing by a goroutine an algorithm starts,
// ends the process with Fatal on a memory fault; other panics go on.
func (c *Ctx) catchFault() {
	if r := recover(); r != nil {
		addr, ok := FaultAddr(r)
		if !ok {
			panic(r)
		}
		Fatal(fmt.Sprintf("%s on rank %d", c.Hdr.Describe(), c.Rank), addr)
	}
}

// panicOnFault is called first by a goroutine an algorithm starts.
func panicOnFault() { debug.SetPanicOnFault(true) }
