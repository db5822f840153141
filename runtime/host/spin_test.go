package host

import (
	"testing"
	"time"
)

// A wait whose busy polls fail halves the busy phase of the next ones; a
// probe (one wait in probeEvery) that succeeds while polling restores it,
// and so does any wait that succeeds within its shortened phase.
func TestBusyPhaseAdapts(t *testing.T) {
	defer spinFor.Store(spinFor.Load())
	defer ranks.Store(ranks.Load())
	defer busyRounds.Store(busyRounds.Load())
	spinFor.Store(int64(20 * time.Microsecond))
	ranks.Store(1)
	busyRounds.Store(maxBusyRounds)
	waits.Store(0)
	never := func() bool { return false }
	for i, want := range []int32{maxBusyRounds / 2, maxBusyRounds / 4, maxBusyRounds / 8} {
		if poll(never, SpinFor()) {
			t.Fatal("poll reported success for a condition that never held")
		}
		if got := busyRounds.Load(); got != want {
			t.Fatalf("after %d failed waits: busy phase of %d rounds, want %d", i+1, got, want)
		}
	}
	waits.Store(probeEvery - 1) // the next wait is a probe
	n := 0
	if !poll(func() bool { n++; return n > clockPolls+10 }, SpinFor()) { // succeeds in the 2nd round, before any clock check
		t.Fatal("the probe did not see its condition")
	}
	if got := busyRounds.Load(); got != maxBusyRounds {
		t.Fatalf("after a probe that succeeded polling: busy phase of %d rounds, want %d", got, maxBusyRounds)
	}
	poll(never, SpinFor())
	poll(never, SpinFor())
	if got := busyRounds.Load(); got != maxBusyRounds/4 {
		t.Fatalf("after 2 more failed waits: busy phase of %d rounds, want %d", got, maxBusyRounds/4)
	}
	waits.Store(0) // not a probe
	n = 0
	if !poll(func() bool { n++; return n > clockPolls+10 }, SpinFor()) {
		t.Fatal("the wait did not see its condition")
	}
	if got := busyRounds.Load(); got != maxBusyRounds {
		t.Fatalf("after a wait that succeeded within its shortened phase: busy phase of %d rounds, want %d", got, maxBusyRounds)
	}
}

// On a crowded host a wait for another process (Spin) polls up to
// crowdedSpin; one that sleeps anyway halves the next budget (not below
// SpinFor), one that polling ends doubles it back. A wait in one process
// (Poll) keeps SpinFor.
func TestCrowdedSpinAdapts(t *testing.T) {
	defer spinFor.Store(spinFor.Load())
	defer ranks.Store(ranks.Load())
	defer crowdBudget.Store(crowdBudget.Load())
	spinFor.Store(int64(50 * time.Microsecond))
	ranks.Store(int32(2 * Cores())) // two ranks per core
	crowdBudget.Store(0)
	if d, crowded := spinAcross(); !crowded || d != crowdedSpin {
		t.Fatalf("crowded budget %v (crowded %t), want %v", d, crowded, crowdedSpin)
	}
	if SpinFor() >= crowdedSpin {
		t.Fatalf("SpinFor %v: in-process waits must keep the scaled budget", SpinFor())
	}
	never := func() bool { return false }
	start := time.Now()
	if Spin(never) {
		t.Fatal("Spin reported success for a condition that never held")
	}
	if el := time.Since(start); el < crowdedSpin/2 {
		t.Fatalf("a crowded Spin gave up after %v, want about %v of polling", el, crowdedSpin)
	}
	for want := crowdedSpin / 2; want > SpinFor(); want /= 2 {
		if d, _ := spinAcross(); d != want {
			t.Fatalf("budget %v after waits that slept, want %v", d, want)
		}
		Spin(never)
	}
	if d, _ := spinAcross(); d != SpinFor() {
		t.Fatalf("budget %v after many waits that slept, want the floor %v", d, SpinFor())
	}
	n := 0
	// Holds after Spin's first bare polls and the policy's first yield,
	// before any clock read (a wait the bare polls end leaves the budget).
	if !Spin(func() bool { n++; return n > quickPolls+1 }) {
		t.Fatal("Spin missed a condition that held after one yield")
	}
	if d, _ := spinAcross(); d != 2*SpinFor() {
		t.Fatalf("budget %v after a wait that polling ended, want %v (doubled)", d, 2*SpinFor())
	}
	ranks.Store(1)
	if d, crowded := spinAcross(); crowded || d != SpinFor() {
		t.Fatalf("uncrowded budget %v (crowded %t), want SpinFor %v", d, crowded, SpinFor())
	}
}
