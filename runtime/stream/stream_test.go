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

	if done, _ := ev.Done(); done {
		t.Fatal("event done before its work ran")
	}
	if busy, _ := s.Query(); !busy {
		t.Fatal("stream idle before its first task could run")
	}
	var after Event
	after.Record(s)
	close(release)
	if err := ev.Wait(); err != nil {
		t.Errorf("event before the failures reports %v", err)
	}
	if err := after.Wait(); err == nil || err.Error() != "first" {
		t.Errorf("event after the failures reports %v, want the first error", err)
	}
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
	if done, err := never.Done(); !done || err != nil {
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

func TestThenRunsAfterEarlierWorkWithoutBlockingLaterWork(t *testing.T) {
	s := New()
	defer s.Close()
	var first atomic.Bool
	s.Enqueue(func() error { time.Sleep(10 * time.Millisecond); first.Store(true); return nil })
	ran := make(chan bool, 1)
	gate := make(chan struct{})
	s.Then(func() { ran <- first.Load(); <-gate })
	var later Event
	s.Enqueue(func() error { return nil })
	later.Record(s)
	if err := later.Wait(); err != nil { // a blocked host function does not hold back the stream
		t.Fatal(err)
	}
	if !<-ran {
		t.Error("host function ran before the work queued ahead of it")
	}
	close(gate)
}
