package comm

import (
	"gocl/runtime/status"
	"gocl/runtime/stream"
	"gocl/runtime/wire"
)

// Group collects calls made between goclGroupStart and goclGroupEnd (a call
// outside a group is a group of one). Run executes them: each communicator's
// share as one batch, different communicators in parallel, so one thread can
// drive every rank of an InitAll clique.
type Group struct {
	batches []*batch
}

type batch struct {
	comm   *Comm
	stream *stream.Stream // nil: run before Run returns
	ops    []*Op
}

// Add validates op now (so a bad argument is reported by the call that made
// it) and records it for Run.
func (g *Group) Add(c *Comm, s *stream.Stream, op Op) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.prepare(&op); err != nil {
		return err
	}
	for _, b := range g.batches {
		if b.comm == c {
			if b.stream != s {
				return status.Errorf(status.InvalidUsage,
					"rank %d: calls on one communicator inside a group must use one stream", c.rank)
			}
			b.ops = append(b.ops, &op)
			return nil
		}
	}
	g.batches = append(g.batches, &batch{comm: c, stream: s, ops: []*Op{&op}})
	return nil
}

// Empty reports whether nothing was recorded.
func (g *Group) Empty() bool { return len(g.batches) == 0 }

// Run executes the group. Batches with a stream are queued on it; the rest
// run now, in parallel, and Run returns their first error.
func (g *Group) Run() error {
	var now []*batch // NULL-stream batches, run before returning
	for _, b := range g.batches {
		if b.stream == nil {
			now = append(now, b)
			continue
		}
		b.comm.begin()
		b.stream.Enqueue(func() error {
			defer b.comm.end()
			return b.comm.execute(b.ops)
		})
	}
	for i, b := range now {
		if err := b.comm.claim(b.ops[0]); err != nil {
			for _, o := range now[:i] {
				o.comm.unclaim()
			}
			return err
		}
	}
	run := func(b *batch) error {
		defer b.comm.unclaim()
		b.comm.waitQueued() // the NULL stream waits for the comm's queued work, as CUDA's legacy stream does
		return b.comm.execute(b.ops)
	}
	return status.Parallel(len(now), func(i int) error { return run(now[i]) })
}

// claim marks a blocking call (one on the NULL stream: a collective, a
// group's share, a receive from any rank) as this communicator's, or fails
// at once when another thread is in one. Two threads' calls on one
// communicator would be paired with the peers' calls in arrival order, and
// with equal counts their results silently swapped. Calls queued on a
// stream are ordered by it and are not claims; a call from another thread
// after this one returned is fine.
func (c *Comm) claim(op *Op) error {
	if c.calling.CompareAndSwap(false, true) {
		return nil
	}
	return status.Errorf(status.InvalidUsage,
		"%s on rank %d: another thread is in a call on this communicator right now: one call at a time per communicator "+
			"(concurrent calls would be matched with the other ranks' calls in arrival order, mixing their results); "+
			"use one communicator per thread, or make the calls from one thread between goclGroupStart and goclGroupEnd",
		op.name(), c.rank)
}

func (c *Comm) unclaim() { c.calling.Store(false) }

// Run executes a single call. A collective on the NULL stream runs right
// here, on the caller's thread, without a Group: the small-message path
// hands nothing to another goroutine and allocates nothing.
func (c *Comm) Run(s *stream.Stream, op Op) error {
	if s == nil && op.Coll != wire.SendRecv {
		// executeOne checks usable() under opMu (Group.Add checks it early
		// because a queued batch runs later)
		if err := c.prepare(&op); err != nil {
			return err
		}
		if err := c.claim(&op); err != nil {
			return err
		}
		defer c.unclaim()
		c.waitQueued()
		return c.executeOne(&op)
	}
	var g Group
	if err := g.Add(c, s, op); err != nil {
		return err
	}
	return g.Run()
}
