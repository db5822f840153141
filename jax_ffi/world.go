package jaxffi

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gocl/kernels"
	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/config"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// A world is this process's ranks of one communicator: one lane per local
// device (ranks proc*ndev+i), each driven by its own goroutine.
type world struct {
	lanes   []*lane
	devices []int64 // XLA's device ordinal of each lane; nil: the lane index
}

// lane returns the lane of the device XLA runs a call on.
func (w *world) lane(ordinal int) *lane {
	for i, d := range w.devices {
		if d == int64(ordinal) {
			return w.lanes[i]
		}
	}
	if w.devices == nil && ordinal >= 0 && ordinal < len(w.lanes) {
		return w.lanes[ordinal]
	}
	return nil
}

var (
	worldsMu  sync.Mutex
	worlds    = map[int64]*world{}
	nextWorld int64
)

func newWorld(id *bootstrap.ID, nprocs, proc, ndev int, devices []int64) (int64, error) {
	if ndev < 1 || nprocs < 1 || proc < 0 || proc >= nprocs {
		return 0, badArg("gocl.jax.init: need local_devices >= 1 and 0 <= rank < world_size, got local_devices=%d, rank=%d, world_size=%d", ndev, proc, nprocs)
	}
	keepResultMemory(proc * ndev)
	var comms []*comm.Comm
	var err error
	switch {
	case id == nil && nprocs == 1:
		comms, err = comm.InitAll(ndev, nil, comm.Options{})
	case id == nil:
		return 0, badArg("gocl.jax.init on rank %d: a world of %d processes needs the unique id from rank 0", proc, nprocs)
	default:
		comms = make([]*comm.Comm, ndev)
		err = status.Parallel(ndev, func(i int) (err error) {
			comms[i], err = comm.InitRank(*id, nprocs*ndev, proc*ndev+i, i, comm.Options{})
			return err
		})
		if err != nil {
			for _, c := range comms {
				if c != nil {
					c.Abort()
				}
			}
		}
	}
	if err != nil {
		return 0, err
	}
	w := &world{lanes: make([]*lane, ndev), devices: devices}
	for i, c := range comms {
		w.lanes[i] = newLane(c)
	}
	worldsMu.Lock()
	defer worldsMu.Unlock()
	nextWorld++
	worlds[nextWorld] = w
	return nextWorld, nil
}

func (w *world) deviceList() []int64 {
	if w.devices != nil {
		return w.devices
	}
	l := make([]int64, len(w.lanes))
	for i := range l {
		l[i] = int64(i)
	}
	return l
}

func takeWorld(h int64) *world {
	worldsMu.Lock()
	defer worldsMu.Unlock()
	w := worlds[h]
	delete(worlds, h)
	return w
}

func (w *world) close(abort bool) {
	for _, l := range w.lanes {
		l.stop(abort)
	}
}

// submit validates a call and runs it: on the caller's thread when its
// device's lane is idle (ran: err is the call's result), else later,
// finishing through the function later returns (called at most once, while
// the call cannot yet be run, so it may make an XLA future). A rejected call
// returns ran with its error.
func submit(h int64, ordinal int, site int64, r request, later func() func(error)) (ran bool, err error) {
	worldsMu.Lock()
	w := worlds[h]
	worldsMu.Unlock()
	if w == nil {
		return true, status.Errorf(status.InvalidUsage, "gocl.jax %s: world %d does not exist (it was shut down, or never made: call gocl.jax.init first)", kindName(r.kind), h)
	}
	l := w.lane(ordinal)
	if l == nil {
		return true, status.Errorf(status.InvalidUsage, "gocl.jax %s: the call runs on device %d, which is not one of the %d local devices gocl.jax.init made ranks for (devices %v): pass local_devices covering it", kindName(r.kind), ordinal, len(w.lanes), w.deviceList())
	}
	if err := r.check(l.c); err != nil {
		return true, err
	}
	return l.submit(site, r, later)
}

// request is one decoded FFI call; counts are in elements of dtype (a
// gocl datatype; data movement passes bytes as uint8).
type request struct {
	kind         int
	send, recv   unsafe.Pointer
	nsend, nrecv int
	dtype, op    int
	root         int
	perm         []int64 // ppermute: (source, destination) pairs, flattened
}

func kindName(k int) string {
	if wire.Coll(k) == wire.SendRecv {
		return "ppermute"
	}
	return map[wire.Coll]string{wire.AllReduce: "all_reduce", wire.AllGather: "all_gather",
		wire.ReduceScatter: "reduce_scatter", wire.Broadcast: "broadcast", wire.AlltoAll: "all_to_all"}[wire.Coll(k)]
}

// check validates the sizes against the world (bad arguments stay local, as
// in NCCL: peers see the call as missing).
func (r *request) check(c *comm.Comm) error {
	n, me := c.NRanks(), c.Rank()
	bad := func(format string, args ...any) error {
		return badArg("gocl.jax %s on rank %d: "+format, append([]any{kindName(r.kind), me}, args...)...)
	}
	switch wire.Coll(r.kind) {
	case wire.AllReduce, wire.Broadcast:
		if r.nsend != r.nrecv {
			return bad("result has %d elements but the input %d: they must match", r.nrecv, r.nsend)
		}
		if wire.Coll(r.kind) == wire.Broadcast && (r.root < 0 || r.root >= n) {
			return bad("root %d is not a rank of this world of %d: pass root in [0, %d]", r.root, n, n-1)
		}
		if wire.Coll(r.kind) == wire.AllReduce && (r.op < 0 || r.op >= int(kernels.NumOps)) {
			return bad("op %d is not a gocl reduction (sum 0, prod 1, max 2, min 3, avg 4)", r.op)
		}
	case wire.AllGather:
		if r.nrecv != n*r.nsend {
			return bad("result has %d elements but needs world size %d × input %d", r.nrecv, n, r.nsend)
		}
	case wire.ReduceScatter:
		if r.nsend != n*r.nrecv {
			return bad("input has %d elements, which is not world size %d × result %d: axis 0 must split into %d equal blocks", r.nsend, n, r.nrecv, n)
		}
		if r.op < 0 || r.op >= int(kernels.NumOps) {
			return bad("op %d is not a gocl reduction (sum 0, prod 1, max 2, min 3, avg 4)", r.op)
		}
	case wire.AlltoAll:
		if r.nsend != r.nrecv || r.nsend%n != 0 {
			return bad("input has %d elements: it must split into world size %d equal blocks, and the result must match", r.nsend, n)
		}
	case wire.SendRecv:
		if r.nsend != r.nrecv {
			return bad("result has %d elements but the input %d: they must match", r.nrecv, r.nsend)
		}
		if len(r.perm)%2 != 0 {
			return bad("perm has %d numbers: it must be (source, destination) pairs", len(r.perm))
		}
		src, dst := map[int64]bool{}, map[int64]bool{}
		for i := 0; i < len(r.perm); i += 2 {
			s, d := r.perm[i], r.perm[i+1]
			if s < 0 || s >= int64(n) || d < 0 || d >= int64(n) {
				return bad("perm pair (%d, %d) names a rank outside this world of %d", s, d, n)
			}
			if src[s] || dst[d] {
				return bad("perm sends from rank %d or to rank %d twice: each rank may appear once as a source and once as a destination", s, d)
			}
			src[s], dst[d] = true, true
		}
	default:
		return bad("unknown collective kind %d", r.kind)
	}
	return nil
}

// run executes r on c (the lane's goroutine).
func (r *request) run(c *comm.Comm) error {
	t := kernels.DataType(r.dtype)
	switch coll := wire.Coll(r.kind); coll {
	case wire.AllReduce, wire.Broadcast, wire.AllGather:
		return c.Run(nil, comm.Op{Coll: coll, Send: r.send, Recv: r.recv, Count: r.nsend, Type: t, RedOp: int32(r.op), Root: r.root})
	case wire.ReduceScatter:
		return c.Run(nil, comm.Op{Coll: coll, Send: r.send, Recv: r.recv, Count: r.nrecv, Type: t, RedOp: int32(r.op)})
	case wire.AlltoAll:
		return c.Run(nil, comm.Op{Coll: coll, Send: r.send, Recv: r.recv, Count: r.nsend / c.NRanks(), Type: t})
	}
	// ppermute: send to every destination of ours, receive from our source;
	// nobody sending to us leaves zeros, as jax.lax.ppermute does.
	me := int64(c.Rank())
	var g comm.Group
	got := false
	for i := 0; i < len(r.perm); i += 2 {
		s, d := r.perm[i], r.perm[i+1]
		switch {
		case s == me && d == me:
			copy(unsafe.Slice((*byte)(r.recv), r.nrecv), unsafe.Slice((*byte)(r.send), r.nsend))
			got = true
		case s == me:
			if err := g.Add(c, nil, comm.Op{Coll: wire.SendRecv, Send: r.send, Count: r.nsend, Type: t, Root: int(d), IsSend: true}); err != nil {
				return err
			}
		case d == me:
			if err := g.Add(c, nil, comm.Op{Coll: wire.SendRecv, Recv: r.recv, Count: r.nrecv, Type: t, Root: int(s)}); err != nil {
				return err
			}
			got = true
		}
	}
	if !got {
		clear(unsafe.Slice((*byte)(r.recv), r.nrecv))
	}
	if g.Empty() {
		return nil
	}
	return g.Run()
}

// A lane runs one rank's collectives one at a time, in an order all ranks
// agree on. XLA may start the collectives of one program concurrently and
// in a different order on each rank, so each call carries its call site
// (an id fixed when the program was traced) and the lane counts the calls
// per site: (site, n) names the call on every rank. The ranks' owners
// all-gather their oldest queued calls (up to maxBatch) in an order round
// (agree.go) and every rank runs rank 0's list in that order; a small call
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
	round    []byte                      // the order round's blocks (agree.go), used by the owner only
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
				"gocl.jax on rank %d: rank 0 ran collective call site %d (call %d there) but this rank has not made that call within GOCL_TIMEOUT; do all ranks run the same jitted program?",
				l.c.Rank(), t.site, t.n+1)
		}
	}
}
