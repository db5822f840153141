package host

import (
	"runtime"
	"testing"
)

// RaiseGOMAXPROCS raises GOMAXPROCS only while in-process links hold it, and
// the last release puts back the value it found.
func TestRaiseGOMAXPROCSGivesItBack(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer ranks.Store(ranks.Load())
	ranks.Store(1)
	runtime.GOMAXPROCS(1)
	a, b := RaiseGOMAXPROCS(), RaiseGOMAXPROCS()
	if got, want := runtime.GOMAXPROCS(0), 2*Cores(); got != want {
		t.Fatalf("GOMAXPROCS %d with in-process links, want %d (twice the cores)", got, want)
	}
	a()
	a() // a release counts once
	if got := runtime.GOMAXPROCS(0); got != 2*Cores() {
		t.Fatalf("GOMAXPROCS %d while a link still holds it, want %d", got, 2*Cores())
	}
	b()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after the last release, want 1 (the value before)", got)
	}
}
