// Package stream gives gocl CUDA-like CPU streams: a Stream is an ordered
// queue with its own worker goroutine, so work on one stream runs in order
// and different streams run concurrently. An Event marks a point in a stream
// and reports the first error of the work before it; Then runs a host
// function once the work queued before it is done.
package stream

import (
	"sync"
	"sync/atomic"
	"time"

	"gocl/runtime/host"
	"gocl/runtime/status"
)

// Stream runs queued tasks one after the other.
type Stream struct {
	mu      sync.Mutex
	cond    *sync.Cond
	tasks   []func() error
	pending int   // queued + running
	err     error // first error since the last Synchronize
	closed  bool
	done    uint64 // tasks finished, for events
	queued  uint64 // tasks enqueued, for events

	// The first failure ever, and its task number: events before it are
	// clean, events at or after it report it (sticky, as CUDA's errors are:
	// work after a failed collective ran on a broken communicator).
	failAt  uint64
	failErr error

	hosts   []func() // host functions handed over by Then, run by hostWork
	hosting bool     // hostWork is running

	// Lock-free copies of queued and done (and closed), for the pollers
	// that run before a goroutine parks on cond: a parked worker costs
	// Enqueue's caller a wake-up, and a parked Wait a thread hand-off on
	// its way back to C (bench/CALLPATH.md, "Streams").
	nQueued, nDone atomic.Uint64
	nClosed        atomic.Bool
	pollIdle       bool // the worker polls when idle (see idle)
}

// New starts a stream's worker.
func New() *Stream {
	s := &Stream{pollIdle: true}
	s.cond = sync.NewCond(&s.mu)
	go s.work()
	return s
}

func (s *Stream) work() {
	s.mu.Lock()
	for {
		if len(s.tasks) == 0 && !s.closed {
			s.idle()
		}
		if len(s.tasks) == 0 {
			s.mu.Unlock()
			return
		}
		t := s.tasks[0]
		s.tasks[0] = nil
		s.tasks = s.tasks[1:]
		s.mu.Unlock()
		err := run(t)
		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
		if err != nil && s.failErr == nil {
			s.failErr, s.failAt = err, s.done+1
		}
		s.pending--
		s.done++
		s.nDone.Store(s.done)
		s.cond.Broadcast()
	}
}

// idle waits for the next task (called with s.mu held, the queue empty).
// It first polls under the host's waiting policy (host.Spin, which leaves the
// cores alone when ranks outnumber them), so a call made soon after the
// last one finished starts without a wake-up, but only while the previous
// idle gap was short enough for polling to have caught it: between DDP's
// buckets (milliseconds apart) polling would only take the core that
// backward needs.
func (s *Stream) idle() {
	since := time.Now()
	if s.pollIdle {
		seen := s.queued
		s.mu.Unlock()
		hit := host.Spin(func() bool { return s.nQueued.Load() != seen || s.nClosed.Load() })
		s.mu.Lock()
		if hit {
			return
		}
	}
	for len(s.tasks) == 0 && !s.closed {
		s.cond.Wait()
	}
	s.pollIdle = time.Since(since) <= host.SpinFor()
}

func run(t func() error) (err error) {
	defer status.Catch(&err)
	return t()
}

// Enqueue appends a task; it runs after everything queued before it.
func (s *Stream) Enqueue(t func() error) {
	s.mu.Lock()
	s.tasks = append(s.tasks, t)
	s.pending++
	s.queued++
	s.nQueued.Store(s.queued)
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Then queues fn to run once everything queued before it has finished
// (failed or not). fn runs on the stream's host goroutine, not its worker,
// so a slow fn (one waiting for a lock, or Python's GIL) does not hold back
// the stream's later work, and fn may itself wait for that work. Host
// functions run one at a time, in the order they were queued.
func (s *Stream) Then(fn func()) {
	s.Enqueue(func() error {
		s.mu.Lock()
		s.hosts = append(s.hosts, fn)
		if !s.hosting {
			s.hosting = true
			go s.hostWork()
		}
		s.mu.Unlock()
		return nil
	})
}

func (s *Stream) hostWork() {
	s.mu.Lock()
	for len(s.hosts) > 0 {
		fn := s.hosts[0]
		s.hosts[0] = nil
		s.hosts = s.hosts[1:]
		s.mu.Unlock()
		_ = run(func() error { fn(); return nil })
		s.mu.Lock()
	}
	s.hosting = false
	s.mu.Unlock()
}

// Synchronize waits until the queue is empty and returns (and clears) the
// first error of the tasks that ran since the last Synchronize.
func (s *Stream) Synchronize() error {
	host.Spin(func() bool { return s.nDone.Load() >= s.nQueued.Load() })
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pending > 0 {
		s.cond.Wait()
	}
	err := s.err
	s.err = nil
	return err
}

// Query reports whether work is pending, and the first error so far.
func (s *Stream) Query() (busy bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending > 0, s.err
}

// Close waits for queued work, then stops the worker.
func (s *Stream) Close() error {
	err := s.Synchronize()
	s.mu.Lock()
	s.closed = true
	s.nClosed.Store(true)
	s.cond.Broadcast()
	s.mu.Unlock()
	return err
}

// Event marks the end of a stream's queue at the time of Record.
type Event struct {
	mu     sync.Mutex
	s      *Stream
	target uint64
}

// Record marks everything queued on s so far.
func (e *Event) Record(s *Stream) {
	s.mu.Lock()
	target := s.queued
	s.mu.Unlock()
	e.mu.Lock()
	e.s, e.target = s, target
	e.mu.Unlock()
}

func (e *Event) mark() (*Stream, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.s, e.target
}

// Done reports whether the marked work has finished (true if never
// recorded) and, once it has, the first error of the stream's work up to
// the mark.
func (e *Event) Done() (bool, error) {
	s, target := e.mark()
	if s == nil {
		return true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done < target {
		return false, nil
	}
	return true, s.errUpTo(target)
}

// Wait blocks until the marked work has finished and returns the first
// error of the stream's work up to the mark.
func (e *Event) Wait() error {
	s, target := e.mark()
	if s == nil {
		return nil
	}
	// Poll before parking (see nDone): the caller is usually a C thread.
	host.Spin(func() bool { return s.nDone.Load() >= target })
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < target {
		s.cond.Wait()
	}
	return s.errUpTo(target)
}

func (s *Stream) errUpTo(target uint64) error {
	if s.failErr != nil && s.failAt <= target {
		return s.failErr
	}
	return nil
}
