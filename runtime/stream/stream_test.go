package stream

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestOrderErrorsAndEvents(t *testing.T) {
	s := New()
	defer s.Close()
	var seen []int
	release := make(chan struct{})
	s.Enqueue(func() error { <-release; seen = append(seen, 0); return nil })
	var ev Event
	ev.Record(s)
	s.Enqueue(func() error { seen = append(seen, 1); return errors.New("first") })
	s.Enqueue(func() error { seen = append(seen, 2); return errors.New("second") })

	if busy, _ := s.Query(); !busy || ev.Done() {
		t.Fatal("stream idle before its first task could run")
	}
	close(release)
	ev.Wait()
	if err := s.Synchronize(); err == nil || err.Error() != "first" {
		t.Errorf("Synchronize = %v, want the first error", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Errorf("error not cleared: %v", err)
	}
	if len(seen) != 3 || seen[0] != 0 || seen[1] != 1 || seen[2] != 2 {
		t.Errorf("ran in order %v", seen)
	}
	var never Event
	if !never.Done() {
		t.Error("an unrecorded event is done")
	}
}

func TestPanickingTaskBecomesAnError(t *testing.T) {
	s := New()
	defer s.Close()
	s.Enqueue(func() error { panic("bug") })
	if err := s.Synchronize(); err == nil {
		t.Error("panic was lost")
	}
}

func TestStreamsRunConcurrently(t *testing.T) {
	a, b := New(), New()
	defer a.Close()
	defer b.Close()
	var started atomic.Int32
	gate := make(chan struct{})
	a.Enqueue(func() error { started.Add(1); <-gate; return nil })
	b.Enqueue(func() error { started.Add(1); <-gate; return nil })
	deadline := time.Now().Add(5 * time.Second)
	for started.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if started.Load() != 2 {
		t.Error("the second stream waited for the first")
	}
}
