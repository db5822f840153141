package algo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// A recording world: n ranks joined by recording Links, which keep every
// frame and every wait in one place, so a test can run an algorithm on n
// goroutines, read each rank's schedule afterwards and know that the run
// kept the protocol rule the algorithms rely on.
//
// The rule (transport.Lender, prims.go, inproc's two slots): on each
// direction of a link the sender is at most one frame ahead of its
// receiver. A sender claims a slot for its next frame (Lend) and waits
// while two frames of that direction are claimed or unread: it may start
// frame k+1 while the receiver has not taken frame k, but frame k+2 waits
// until the receiver has taken frame k. The algorithms send every frame a
// lending link takes from the rank's own goroutine (no sender goroutine
// absorbs a wait), so a schedule that needs more than that blocks every
// rank at once; the world sees it (every live rank waits and none can
// move) and fails the run with each rank's wait instead of hanging.
//
// Two kinds of link:
//
//   - lending (inproc's shape): a transport.Lender of two slots, Buffered
//     false. The primitives claim a slot, fill it and commit it; every
//     frame goes through Lend.
//   - buffered (a socket's shape): Buffered true and no Lender, so the
//     primitives and the latency paths send inline, and no send ever
//     waits (the kernel holds what the peer has not read).
//
// Either way each rank's link calls happen on its own goroutine in program
// order, so its schedule does not depend on how the goroutines interleave.
type world struct {
	mu    sync.Mutex
	cond  sync.Cond
	n     int
	slots int // frames a direction holds; 0: unbounded (buffered links)
	dirs  [][]*direction
	live  int
	waits map[int]wait
	err   error // the first failure: a rank's error, a broken rule, a deadlock
	trace [][]event
}

// slotsPerDirection is the rule: a sender at most one frame ahead.
const slotsPerDirection = 2

// direction is one way of a pair: the frames posted and not yet taken, and
// whether the sender holds a claimed slot it has not committed.
type direction struct {
	frames  []recFrame
	claimed bool
}

type recFrame struct {
	h    wire.Header
	data []byte
}

// wait is what a blocked rank waits for, and the test of whether it can go on.
type wait struct {
	what  string
	ready func() bool
}

// event is one link call of a rank, in its schedule.
type event struct {
	kind  string // "claim", "send", "recv"
	peer  int
	step  int // -1 for a claim (the step is known at commit)
	bytes int
}

func newWorld(n int, lending bool) *world {
	w := &world{n: n, live: n, waits: map[int]wait{}, trace: make([][]event, n)}
	if lending {
		w.slots = slotsPerDirection
	}
	w.cond.L = &w.mu
	w.dirs = make([][]*direction, n)
	for i := range w.dirs {
		w.dirs[i] = make([]*direction, n)
		for j := range w.dirs[i] {
			w.dirs[i][j] = &direction{}
		}
	}
	return w
}

// links returns rank's links, by peer (nil at rank).
func (w *world) links(rank int) []transport.Link {
	ls := make([]transport.Link, w.n)
	for p := range ls {
		if p == rank {
			continue
		}
		r := &recLink{w: w, self: rank, peer: p}
		if w.slots > 0 {
			ls[p] = &lendLink{recLink: r}
		} else {
			ls[p] = r
		}
	}
	return ls
}

// fail records the first failure and wakes every waiter.
func (w *world) fail(err error) {
	w.mu.Lock()
	w.failLocked(err)
	w.mu.Unlock()
}

func (w *world) failLocked(err error) {
	if w.err == nil && err != nil {
		w.err = err
	}
	w.cond.Broadcast()
}

// done marks rank finished: a rank still waiting on it now waits forever.
func (w *world) done(rank int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failLocked(fmt.Errorf("rank %d: %w", rank, err))
	}
	w.live--
	w.checkStuck()
	w.cond.Broadcast()
}

// await blocks rank until ready (w.mu held), failing the whole world when
// every live rank waits and none can go on.
func (w *world) await(rank int, what func() string, ready func() bool) error {
	for !ready() {
		if w.err != nil {
			return w.err
		}
		w.waits[rank] = wait{what(), ready}
		w.checkStuck()
		if w.err == nil {
			w.cond.Wait()
		}
		delete(w.waits, rank)
	}
	return w.err
}

// checkStuck fails the world when every live rank waits and none can move.
func (w *world) checkStuck() {
	if w.err != nil || len(w.waits) < w.live || len(w.waits) == 0 {
		return
	}
	var lines []string
	for _, r := range slices.Sorted(mapKeys(w.waits)) {
		if w.waits[r].ready() {
			return
		}
		lines = append(lines, fmt.Sprintf("rank %d %s", r, w.waits[r].what))
	}
	w.failLocked(fmt.Errorf("deadlock: no rank can go on (a sender is at most one frame ahead of its receiver: %d slots a direction):\n\t%s",
		w.slots, strings.Join(lines, "\n\t")))
}

func mapKeys(m map[int]wait) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// leftovers reports frames sent and never received, and slots claimed and
// never committed: the ranks disagree on the schedule.
func (w *world) leftovers() error {
	var errs []error
	for from, row := range w.dirs {
		for to, d := range row {
			if len(d.frames) > 0 {
				errs = append(errs, fmt.Errorf("rank %d sent %d frame(s) to rank %d that it never received (first: step %d)",
					from, len(d.frames), to, d.frames[0].h.Step))
			}
			if d.claimed {
				errs = append(errs, fmt.Errorf("rank %d claimed a slot to rank %d and never committed it", from, to))
			}
		}
	}
	return errors.Join(errs...)
}

// recLink is rank self's end of its link to peer.
type recLink struct {
	w          *world
	self, peer int
	lent       []byte // the claimed slot
}

func (l *recLink) out() *direction { return l.w.dirs[l.self][l.peer] }
func (l *recLink) in() *direction  { return l.w.dirs[l.peer][l.self] }

func (l *recLink) record(e event) { l.w.trace[l.self] = append(l.w.trace[l.self], e) }

func (l *recLink) Send(h *wire.Header, data []byte) error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.slots > 0 {
		// Only a frame the link would not lend is sent: the algorithms
		// then hand it to the sender goroutine, whose waits the world
		// cannot see. Every frame fits a slot here.
		w.failLocked(fmt.Errorf("rank %d sent step %d to rank %d with Send on a lending link", l.self, h.Step, l.peer))
		return w.err
	}
	h.Len = uint64(len(data))
	l.post(h, slices.Clone(data))
	return nil
}

// post appends a frame to the outgoing direction (w.mu held).
func (l *recLink) post(h *wire.Header, data []byte) {
	d := l.out()
	d.frames = append(d.frames, recFrame{*h, data})
	l.record(event{kind: "send", peer: l.peer, step: int(h.Step), bytes: len(data)})
	l.w.cond.Broadcast()
}

func (l *recLink) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	return l.RecvWith(want, func(pl []byte) { copy(dst, pl) })
}

func (l *recLink) RecvWith(want *wire.Header, use func(payload []byte)) error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := l.in()
	err := w.await(l.self, func() string {
		return fmt.Sprintf("waits for step %d from rank %d (nothing sent)", want.Step, l.peer)
	}, func() bool { return len(d.frames) > 0 })
	if err != nil {
		return err
	}
	f := d.frames[0]
	d.frames = d.frames[1:]
	w.cond.Broadcast() // a slot is free
	if err := transport.CheckFrame(want, &f.h, l.self, l.peer); err != nil {
		w.failLocked(err)
		return err
	}
	if f.h.Step != want.Step { // a frame's step is the one its receiver takes it at
		err := fmt.Errorf("rank %d took step %d from rank %d, which sent it as step %d", l.self, want.Step, l.peer, f.h.Step)
		w.failLocked(err)
		return err
	}
	l.record(event{kind: "recv", peer: l.peer, step: int(want.Step), bytes: len(f.data)})
	use(f.data)
	return nil
}

func (l *recLink) SetDeadline(time.Time) {}

func (l *recLink) Close() error {
	l.w.fail(fmt.Errorf("rank %d closed its link to %d", l.self, l.peer))
	return nil
}

func (l *recLink) Abort(reason string) {
	l.w.fail(fmt.Errorf("rank %d aborted its link to %d: %s", l.self, l.peer, reason))
}

func (l *recLink) Name() string { return "recording" }

// Buffered is true on a buffered world: every send returns at once.
func (l *recLink) Buffered(int) bool { return l.w.slots == 0 }

// Failure is the world's failure, if any.
func (l *recLink) Failure() error {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.err
}

// lendLink is a recLink that lends its slots (transport.Lender).
type lendLink struct{ *recLink }

var _ transport.Lender = (*lendLink)(nil)

func (l *lendLink) Lend(n int) ([]byte, bool, error) {
	if n <= 0 {
		return nil, false, nil
	}
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := l.out()
	if d.claimed {
		w.failLocked(fmt.Errorf("rank %d lent a second slot to rank %d before committing the first", l.self, l.peer))
		return nil, false, w.err
	}
	err := w.await(l.self, func() string {
		steps := make([]string, len(d.frames))
		for i, f := range d.frames {
			steps[i] = fmt.Sprint(f.h.Step)
		}
		return fmt.Sprintf("claims a slot to rank %d, which has not taken steps %s", l.peer, strings.Join(steps, ", "))
	}, func() bool { return len(d.frames) < w.slots })
	if err != nil {
		return nil, false, err
	}
	d.claimed = true
	l.lent = make([]byte, n)
	l.record(event{kind: "claim", peer: l.peer, step: -1, bytes: n})
	return l.lent, true, nil
}

func (l *lendLink) Commit(h *wire.Header) error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := l.out()
	if !d.claimed {
		w.failLocked(fmt.Errorf("rank %d committed step %d to rank %d without a claimed slot", l.self, h.Step, l.peer))
		return w.err
	}
	if w.err != nil {
		return w.err
	}
	d.claimed = false
	h.Len = uint64(len(l.lent))
	l.post(h, l.lent)
	l.lent = nil
	return nil
}

func (l *lendLink) Cancel() {
	l.w.mu.Lock()
	l.out().claimed = false
	l.lent = nil
	l.w.mu.Unlock()
}
