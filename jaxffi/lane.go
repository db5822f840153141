package jaxffi

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocl/kernels"
	"gocl/runtime/comm"
	"gocl/runtime/config"
	"gocl/runtime/status"
)

// A lane runs one rank's collectives one at a time, in an order all ranks
// agree on. XLA may start the collectives of one program concurrently and
// in a different order on each rank, so each call carries its call site
// (an id fixed when the program was traced) and the lane counts the calls
// per site: (site, n) names the call on every rank. The ranks' owners
// all-gather their oldest queued calls (up to maxBatch) in an order round
// (order.go) and every rank runs rank 0's list in that order; a small call
// that every rank proposed first is settled by the round itself. The choice
// is always safe: rank 0 has only queued calls whose inputs are ready, so
// none of them waits on a call that has not run.
//
// Whoever owns the lane runs its calls. A call that finds the lane idle
// takes it and runs on XLA's thread (no thread handoff, no future: the
// common, one-collective-at-a-time path). That thread never waits for a
// call of its own rank: when rank 0 names one not yet submitted here, or
// calls remain once its own is done, it hands the lane to the lane's
// goroutine, which may wait, and returns (its call, if not yet run,
// finishing through a future).
type lane struct {
	c        *comm.Comm
	mu       sync.Mutex
	pending  map[tag]*call
	order    []tag // arrival order: rank 0 runs the oldest first
	count    map[int64]uint64
	owner    owner
	rest     []tag                       // named calls the goroutine runs before asking rank 0 again
	round    []byte                      // the order round's blocks (order.go), used by the owner only
	mine     []tag                       // the owner's scratch for the order round's proposal
	calls    []*call                     // and for the proposed calls
	reducers map[[2]int]*kernels.Reducer // by (dtype, op), made by the owner's order rounds
	settled  atomic.Uint64               // calls the order round settled (tests check the common path takes it)
	stopped  error
	wake     chan struct{} // a call arrived, the goroutine was handed the lane, or stop was called
	done     chan struct{} // the goroutine has exited
}

// owner says who runs the lane's calls. Invariant: queued calls imply an
// owner.
type owner int

const (
	idle      owner = iota // no calls: the next one runs on its caller's thread
	caller                 // a submitting (XLA) thread runs calls inline
	goroutine              // the lane's goroutine runs them
)

// maxBatch bounds the calls one order round names (many concurrent
// collectives, such as one per gradient leaf, share one round).
const maxBatch = 32

type tag struct {
	site int64
	n    uint64
}

type call struct {
	r    request
	done func(error) // nil while its own caller runs the lane
}

func newLane(c *comm.Comm) *lane {
	l := &lane{c: c, pending: map[tag]*call{}, count: map[int64]uint64{}, wake: make(chan struct{}, 1),
		done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *lane) submit(site int64, r request, later func() func(error)) (ran bool, err error) {
	l.mu.Lock()
	if l.stopped != nil {
		l.mu.Unlock()
		return true, l.stopped
	}
	t := tag{site, l.count[site]}
	l.count[site]++
	c := &call{r: r}
	l.pending[t] = c
	l.order = append(l.order, t)
	if l.owner != idle {
		c.done = later() // before unlocking: the owner may take c at once
		l.mu.Unlock()
		l.poke()
		return false, nil
	}
	l.owner = caller
	l.mu.Unlock()
	return l.runInline(c, later)
}

// runInline runs calls in rank 0's order on the caller's thread until mine
// has run, or until the next named call is not queued here (then the
// goroutine takes over and mine finishes through later()).
func (l *lane) runInline(mine *call, later func() func(error)) (ran bool, res error) {
	handOff := func(rest []tag) {
		l.mu.Lock()
		if !ran {
			mine.done = later()
		}
		l.rest = rest
		if len(l.pending) > 0 || len(rest) > 0 {
			l.owner = goroutine
		} else {
			l.owner = idle
		}
		// Wake the goroutine only when it has something to do: waking it for
		// nothing after every inline call cost a thread wake-up per call.
		wake := l.owner == goroutine || l.stopped != nil
		l.mu.Unlock()
		if wake {
			l.poke()
		}
	}
	defer func() {
		if p := recover(); p != nil {
			res = status.Errorf(status.InternalError, "gocl.jax: internal error (a gocl bug, please report it): panic: %v", p)
			l.c.Abort()
			l.fail(mine, res)
			ran = true
			handOff(nil)
		}
	}()
	for !ran {
		settled, outs, batch, err := l.agree()
		for i, c := range settled {
			if c == mine {
				ran, res = true, outs[i]
			} else {
				go c.done(outs[i])
			}
		}
		if err != nil {
			if !ran {
				ran, res = true, err
			}
			l.fail(mine, err)
			handOff(nil)
			return ran, res
		}
		for i, t := range batch {
			c := l.tryTake(t)
			if c == nil {
				handOff(batch[i:])
				return ran, res
			}
			out := firstCause(l.c, c.r.run(l.c))
			if c == mine {
				ran, res = true, out
			} else {
				go c.done(out)
			}
		}
	}
	handOff(nil)
	return ran, res
}

func (l *lane) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// stop ends the lane: abort fails queued calls at once (and peers' through
// the communicator); otherwise they run first.
func (l *lane) stop(abort bool) {
	l.mu.Lock()
	if l.stopped == nil {
		l.stopped = status.Errorf(status.InvalidUsage, "rank %d: gocl.jax was shut down", l.c.Rank())
	}
	l.mu.Unlock()
	l.poke()
	if abort {
		l.c.Abort()
		<-l.done
		return
	}
	<-l.done
	l.c.Destroy()
}

// fail finishes every queued call but mine (the caller's own, answered by
// its return value) with err.
func (l *lane) fail(mine *call, err error) {
	l.mu.Lock()
	calls := l.pending
	l.pending, l.order = map[tag]*call{}, nil
	l.mu.Unlock()
	for _, c := range calls {
		if c != mine {
			go c.done(err)
		}
	}
}

// loop runs the lane while it is handed the lane; it exits once the lane is
// stopped and idle.
func (l *lane) loop() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for l.owner != goroutine {
			if l.stopped != nil && l.owner == idle {
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		rest := l.rest
		l.rest = nil
		l.mu.Unlock()
		if err := l.step(rest); err != nil {
			l.fail(nil, err)
		}
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.owner = idle
		}
		l.mu.Unlock()
	}
}

// step runs the named calls (or, with none, the next batch rank 0 names),
// waiting for each to be submitted here.
func (l *lane) step(batch []tag) (err error) {
	defer status.Catch(&err)
	if len(batch) == 0 {
		var settled []*call
		var outs []error
		settled, outs, batch, err = l.agree()
		for i, c := range settled {
			go c.done(outs[i])
		}
		if err != nil {
			return err
		}
	}
	for _, t := range batch {
		c, err := l.take(t)
		if err != nil {
			l.c.Abort() // peers are inside this call: make them fail instead of wait
			return err
		}
		go c.done(firstCause(l.c, c.r.run(l.c)))
	}
	return nil
}

// tryTake removes the call named t if it is queued.
func (l *lane) tryTake(t tag) *call {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.pending[t]
	if !ok {
		return nil
	}
	delete(l.pending, t)
	for i, o := range l.order {
		if o == t {
			l.order = append(l.order[:i], l.order[i+1:]...)
			break
		}
	}
	return c
}

// firstCause adds the error that broke the communicator when err is only a
// consequence of it (the link to a peer that was closed because of it).
func firstCause(c *comm.Comm, err error) error {
	if err == nil {
		return nil
	}
	if first := c.AsyncError(); first != nil && !strings.Contains(err.Error(), first.Error()) {
		return status.Errorf(status.CodeOf(first), "%v; the first failure on this rank: %v", err, first)
	}
	return err
}

// take removes the call named t, waiting up to GOCL_TIMEOUT for it: rank 0
// chose it, so it comes unless the ranks run different programs.
func (l *lane) take(t tag) (*call, error) {
	var deadline <-chan time.Time
	if d := config.Timeout(); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		deadline = timer.C
	}
	for {
		if c := l.tryTake(t); c != nil {
			return c, nil
		}
		select {
		case <-l.wake:
		case <-deadline:
			return nil, status.Errorf(status.Timeout,
				"gocl.jax on rank %d: rank 0 ran %s but this rank has not made that call within GOCL_TIMEOUT; do all ranks run the same jitted programs, as many times each?",
				l.c.Rank(), siteName(t))
		}
	}
}
