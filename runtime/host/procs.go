package host

import (
	"runtime"
	"sync"
)

// RaiseGOMAXPROCS prepares the Go scheduler for ranks that are threads of
// this process, and returns the call that undoes it. A polling rank holds a
// P, as does a rank running Go code for a C thread, so with GOMAXPROCS at
// the core count a goroutine of another rank could wait for a P while
// pollers keep them all: GOMAXPROCS becomes at least twice the cores
// (pollers are at most one per core; the OS still shares the cores, and
// pollers yield theirs). Not when ranks outnumber cores: polls are then
// short, and more threads running memory-bound copies on the same cores
// only thrash.
//
// The setting is the Go runtime's inside libgocl.so, which runs only
// gocl's goroutines (the host's threads are not Go's), and it lasts only
// while such ranks exist: each in-process link raises it once and releases
// it when it closes; the last release puts back the value found before the
// first raise. A release counts once however often it is called.
func RaiseGOMAXPROCS() (release func()) {
	raised.Lock()
	defer raised.Unlock()
	raised.users++
	if want := 2 * Cores(); !Oversubscribed() && runtime.GOMAXPROCS(0) < want {
		if was := runtime.GOMAXPROCS(want); raised.prev == 0 {
			raised.prev = was
		}
	}
	return sync.OnceFunc(func() {
		raised.Lock()
		defer raised.Unlock()
		if raised.users--; raised.users == 0 && raised.prev != 0 {
			runtime.GOMAXPROCS(raised.prev)
			raised.prev = 0
		}
	})
}

// raised is RaiseGOMAXPROCS's state: the links that hold it, and
// GOMAXPROCS before it was raised (0: not raised).
var raised struct {
	sync.Mutex
	users, prev int
}
