package comm

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocl/runtime/agree"
	"gocl/runtime/agree/agreenet"
	"gocl/runtime/config/configtest"
)

// The agreement's cases beyond the review's (shrink_review_test.go), with
// the test hooks of runtime/agree/agreenet; the logic itself is proved over seeded
// schedules in runtime/agree.

// hooks installs the agreement's test hooks for one test.
func hooks(t *testing.T, drop func(agree.Msg) bool, outcome func(int, *agree.Outcome)) {
	if drop != nil {
		agreenet.DropHook.Store(&drop)
	}
	if outcome != nil {
		agreenet.OutcomeHook.Store(&outcome)
	}
	t.Cleanup(func() { agreenet.DropHook.Store(nil); agreenet.OutcomeHook.Store(nil) })
}

func sameComm(t *testing.T, subs []*Comm, errs []error, survivors []int) {
	t.Helper()
	checkShrunk(t, subs, errs, survivors)
}

// The coordinator's decision reaches only rank 1 (its messages to ranks 2
// and 3 are lost from then on, and theirs to it): ranks 2 and 3 learn it
// from rank 1, whose every message carries it.
func TestShrinkDecisionReachesEverySurvivor(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "2")
	comms, err := InitAll(4, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var decided atomic.Bool
	hooks(t, func(m agree.Msg) bool {
		if m.From == 0 && m.Kind == agree.Decide {
			decided.Store(true)
		}
		cut := (m.From == 0 && m.To >= 2) || (m.To == 0 && m.From >= 2)
		return decided.Load() && cut
	}, nil)
	subs, errs := shrinkAll(comms, []int{0, 1, 2, 3}, nil, func(int) time.Duration { return 0 })
	sameComm(t, subs, errs, []int{0, 1, 2, 3})
	for _, c := range comms {
		c.Destroy()
	}
}

// The coordinator dies right after telling rank 1 alone: the decision
// names it, so the new communicator cannot start; the survivors, rank 1
// with the decision and ranks 2 and 3 without it, agree again on the same
// epoch numbers (chosen by the decisions, not counted apart) and end up in
// one communicator without it.
func TestShrinkCoordinatorDiesAfterTellingOne(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "2")
	comms, err := InitAll(4, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hooks(t, func(m agree.Msg) bool {
		if m.From == 0 && m.Kind == agree.Decide {
			once.Do(func() { go func() { time.Sleep(20 * time.Millisecond); comms[0].Abort() }() })
			return m.To != 1
		}
		return false
	}, func(rank int, o *agree.Outcome) {
		if rank == 0 && o.Epoch == 0 {
			o.Err = errors.New("rank 0 died") // it never joins the new communicator
		}
	})
	start := time.Now()
	subs, errs := shrinkAll(comms, []int{0, 1, 2, 3}, nil, func(int) time.Duration { return 0 })
	if errs[0] == nil {
		t.Errorf("rank 0 (dead) returned a communicator")
	}
	t.Logf("survivors shrank in %v", time.Since(start))
	sameComm(t, subs, errs, []int{1, 2, 3})
	for _, c := range comms[1:] {
		c.Destroy()
	}
}

// With no timeout (GOCL_TIMEOUT=0) every wait is still bounded: a survivor
// that dies between the decision and the new communicator's start leaves
// the others in a rendezvous that ends with the agreement's bound (the
// window, agreenet.DefaultWindow here), and they agree again without it.
func TestShrinkWithoutTimeoutIsBounded(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "0")
	saved := agreenet.DefaultWindow
	agreenet.DefaultWindow = time.Second
	t.Cleanup(func() { agreenet.DefaultWindow = saved })
	comms, err := InitAll(4, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	hooks(t, nil, func(rank int, o *agree.Outcome) {
		if rank == 3 && o.Epoch == 0 {
			comms[3].Abort()
			o.Err = errors.New("rank 3 died after the decision")
		}
	})
	start := time.Now()
	subs, errs := shrinkAll(comms, []int{0, 1, 2, 3}, nil, func(int) time.Duration { return 0 })
	took := time.Since(start)
	t.Logf("survivors shrank in %v", took)
	if bound := 2*agree.Bound(agreenet.DefaultWindow) + 2*time.Second; took > bound {
		t.Errorf("the shrink took %v, past its bound %v", took, bound)
	}
	sameComm(t, subs, errs, []int{0, 1, 2})
	for _, c := range comms[:3] {
		c.Destroy()
	}
}
