package comm

import (
	"fmt"
	"sync"
	"time"

	"gocl/runtime/debuglog"
)

// flightRecorder keeps the last operations of a communicator (GOCL_TRACE_BUFFER
// of them) and prints them when the communicator fails: the calls each rank
// made just before a hang or a mismatch are what a post-mortem needs.
type flightRecorder struct {
	mu   sync.Mutex
	ring []flightEntry
	next int
}

type flightEntry struct {
	what  string
	start time.Time
	took  time.Duration
	err   error
	done  bool
}

func newFlightRecorder(n int) *flightRecorder {
	if n <= 0 {
		return nil
	}
	return &flightRecorder{ring: make([]flightEntry, n)}
}

// begin records a call and returns its slot for end.
func (f *flightRecorder) begin(what string) int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.next % len(f.ring)
	f.ring[i] = flightEntry{what: what, start: time.Now()}
	f.next++
	return i
}

func (f *flightRecorder) end(i int, err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := &f.ring[i]
	e.took, e.err, e.done = time.Since(e.start), err, true
}

// dump writes the report whatever GOCL_DEBUG says.
func (f *flightRecorder) dump(rank int, cause error) {
	if f != nil {
		debuglog.Dump(rank, f.report(cause))
	}
}

// report lists the recorded calls, oldest first.
func (f *flightRecorder) report(cause error) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(f.next, len(f.ring))
	lines := []string{fmt.Sprintf("flight recorder: last %d calls before: %v", n, cause)}
	for k := f.next - n; k < f.next; k++ {
		e := f.ring[k%len(f.ring)]
		state := "in progress"
		if e.done {
			state = fmt.Sprintf("took %v", e.took.Round(time.Microsecond))
			if e.err != nil {
				state += ", failed"
			}
		}
		lines = append(lines, fmt.Sprintf("  %s  %s  (%s)", e.start.Format("15:04:05.000000"), e.what, state))
	}
	return lines
}
