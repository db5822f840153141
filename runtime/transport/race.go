//go:build race

package transport

import (
	"runtime"
	"unsafe"
)

// The race detector cannot see ordering through shared-memory atomics or
// through writev on a socket, so in race builds every transport releases
// one Go variable before a frame leaves and acquires it when a frame has
// arrived (as package syscall does for reads and writes): a buffer a sender
// read is then known to be free once a reply has come back, whichever mix
// of transports carried the chain.
var raceSync byte

// RaceRelease marks a frame as published (race builds only).
func RaceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&raceSync)) }

// RaceAcquire marks a frame as received (race builds only).
func RaceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&raceSync)) }
