package comm

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/debuglog"
	"gocl/runtime/status"
	"gocl/runtime/transport"
)

// ShrinkFlags are goclCommShrink's flags (NCCL's values).
type ShrinkFlags int

const (
	// ShrinkDefault: the parent's queued work finishes first (it is quiescent,
	// or failed).
	ShrinkDefault ShrinkFlags = 0
	// ShrinkAbort: the parent's operations in progress are failed first, as
	// Revoke fails them.
	ShrinkAbort ShrinkFlags = 1
)

// Shrink makes a communicator of c's ranks less the excluded ones, in the
// same order; excluded ranks do not call it. c may have failed (a rank
// died): shrinking talks over the bootstrap listeners, not c's links. With
// agree, exclude must be empty and the survivors find the dead set
// themselves (runtime/agree/agreenet): every survivor gets the same communicator, even
// when they noticed the failure at different times or a rank dies during
// the shrink. The new communicator takes the timeout of opts, else c's; c
// stays to be destroyed.
func (c *Comm) Shrink(exclude []int, agree bool, flags ShrinkFlags, opts Options) (*Comm, error) {
	bad := func(format string, a ...any) error {
		return status.Errorf(status.InvalidArgument, "shrink on rank %d: "+format, append([]any{c.rank}, a...)...)
	}
	if flags != ShrinkDefault && flags != ShrinkAbort {
		return nil, bad("shrinkFlags is %d: pass GOCL_SHRINK_DEFAULT (0) or GOCL_SHRINK_ABORT (1)", flags)
	}
	if agree && len(exclude) > 0 {
		return nil, bad("an exclude list and agreement both asked for: pass the list, or none to let the survivors agree")
	}
	exclude = slices.Clone(exclude)
	slices.Sort(exclude)
	for i, r := range exclude {
		switch {
		case r < 0 || r >= c.nranks:
			return nil, bad("excluded rank %d is out of range: pass ranks in [0, %d]", r, c.nranks-1)
		case r == c.rank:
			return nil, bad("it excludes itself: an excluded rank does not call shrink (destroy or abort its communicator instead)")
		case i > 0 && exclude[i-1] == r:
			return nil, bad("rank %d is excluded twice", r)
		}
	}
	if c.freedNow() {
		return nil, status.Errorf(status.InvalidUsage, "shrink on rank %d: the communicator was destroyed: shrink it before destroying it", c.rank)
	}
	if flags == ShrinkAbort {
		c.Revoke()
	} else {
		c.waitQueued()
	}
	if !opts.HasTimeout {
		opts.Timeout, opts.HasTimeout = c.timeout, true
	}
	// Each agreement ends within agree.Bound of the timeout; a decision whose
	// communicator fails to start (a member died after it) is agreed again,
	// once more at most: a shrink returns within twice the bound.
	for attempt := 0; ; attempt++ {
		o, err := c.agreement.Agree(!agree, exclude)
		if err != nil {
			return nil, status.Errorf(status.RemoteError, "shrink on rank %d: %w", c.rank, err)
		}
		members := o.Value.Members
		rank := slices.Index(members, c.rank)
		var id bootstrap.ID
		copy(id[:], o.Value.ID)
		dead := complement(members, c.nranks)
		sub, err := InitRank(id, len(members), rank, c.device, opts)
		if err == nil {
			debuglog.Infof(debuglog.Init, c.rank, "shrink %d: rank %d of %d is rank %d of %d, without ranks %v",
				o.Epoch, c.rank, c.nranks, rank, len(members), dead)
			return sub, nil
		}
		bootstrap.StopRoot(id) // if this rank serves it: it answered every rank there, no one else comes
		if !agree || attempt > 0 {
			return nil, fmt.Errorf("shrink on rank %d (without ranks %v): %w", c.rank, dead, err)
		}
		debuglog.Warnf(debuglog.Init, c.rank, "shrink %d: the new communicator without ranks %v failed to start (%v): agreeing again", o.Epoch, dead, err)
	}
}

// freedNow reports whether the communicator was destroyed or aborted.
func (c *Comm) freedNow() bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.freed
}

// Revoke fails every operation in progress or queued, here and on every
// peer (told over the bootstrap listeners, so ranks not in a call learn it
// too), and returns once none runs here: the communicator is then
// quiescent, to be shrunk or destroyed.
func (c *Comm) Revoke() {
	c.fail(revoked(c.rank, c.rank))
	wait := bootstrap.ProbeWait(c.timeout)
	var wg sync.WaitGroup
	for p := range c.peers {
		if p == c.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reply listenerReply // a peer already gone needs no telling
			bootstrap.Ask(c.peers[p].Addr, c.secret, time.Now().Add(wait), bootstrap.NewRequest(askRevoke, c.rank), &reply)
		}()
	}
	wg.Wait()
	c.waitQueued()
	c.opMu.Lock()
	c.opMu.Unlock() //nolint:staticcheck // an empty section: waits for the running call to leave
}

// revoked is the error of a communicator rank by revoked.
func revoked(self, by int) error {
	return transport.NewError(transport.Error{Kind: transport.KindPeerFailed, Self: self, Peer: by, Via: -1,
		Detail: fmt.Sprintf("rank %d revoked the communicator", by)})
}

// complement is every rank of n not in keep.
func complement(keep []int, n int) []int {
	var out []int
	for r := 0; r < n; r++ {
		found := false
		for _, k := range keep {
			found = found || k == r
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}
