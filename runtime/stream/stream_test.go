package stream

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"gocl/runtime/host"
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

// The worker polls for new work before parking, and Wait polls before it
// parks: neither may leave goroutines behind, reorder work, lose an error
// or keep a closed stream's worker alive.
func TestPollingWaitsKeepOrderAndGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	s := New()
	var last, bad atomic.Int64
	for i := int64(1); i <= 10_000; i++ {
		s.Enqueue(func() error {
			if last.Load() != i-1 {
				bad.Store(i)
			}
			last.Store(i)
			if i == 9_000 {
				return errors.New("task 9000")
			}
			return nil
		})
		var ev Event
		ev.Record(s)
		if i%2 == 0 || i == 9_000 { // also: the worker finds work while polling, and parks between calls
			err := ev.Wait()
			if (i >= 9_000) != (err != nil) {
				t.Fatalf("event after task %d reports %v", i, err)
			}
		}
		if i%1000 == 0 {
			time.Sleep(200 * time.Microsecond) // past the polling budget: the worker parks
		}
	}
	if err := s.Close(); err == nil || err.Error() != "task 9000" {
		t.Errorf("Close = %v, want task 9000's error", err)
	}
	if b := bad.Load(); b != 0 || last.Load() != 10_000 {
		t.Fatalf("task %d ran out of order (last %d)", b, last.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before New", n, before)
	}
}

// The worker polls while idle only when the previous idle gap was short:
// calls made milliseconds apart (DDP's buckets) must not cost a core each.
func TestIdlePollingFollowsTheGaps(t *testing.T) {
	if host.SpinFor() <= 0 {
		t.Skip("polling is off (GOCL_SPIN_US=0)")
	}
	s := New()
	defer s.Close()
	call := func() {
		var ev Event
		s.Enqueue(func() error { return nil })
		ev.Record(s)
		if err := ev.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	polls := func() bool {
		time.Sleep(time.Millisecond) // the worker is idle again
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pollIdle
	}
	call()
	time.Sleep(20 * time.Millisecond)
	call()
	if polls() {
		t.Error("the worker still polls after a 20 ms gap")
	}
	for range 1000 { // under load one gap can be long; most are not
		call()
		s.mu.Lock()
		again := s.pollIdle
		s.mu.Unlock()
		if again {
			return
		}
	}
	t.Error("the worker does not poll between back-to-back calls")
}
