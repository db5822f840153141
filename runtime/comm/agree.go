package comm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/agree"
	"gocl/runtime/bootstrap"
	"gocl/runtime/debuglog"
	"gocl/runtime/heartbeat"
)

// The survivors' agreement of a shrink (MPI ULFM's agree-and-shrink) runs
// over the bootstrap listeners, which outlive a failed communicator's
// links. Its logic is runtime/agree's Machine (single-decree Paxos per
// shrink, proved in a deterministic simulator); this file is its I/O: each
// message is one authenticated, sealed request to the peer's listener,
// whose replies come back on the same connection; a refused connection
// tells the machine the peer is gone, a timed-out one that it is silent.

// Listener request kinds.
const (
	askAgree  = "agree"
	askRevoke = "revoke"
)

// listenerReply answers requests that have no reply of their own.
type listenerReply struct {
	Err string `json:"err,omitempty"`
}

// serve answers a request on this rank's bootstrap listener.
func (c *Comm) serve(req bootstrap.Request) any {
	switch req.Kind {
	case bootstrap.AskProbe:
		return c.answer()
	case askStatus:
		return c.ownView()
	case askAgree:
		var m agree.Msg
		if err := json.Unmarshal(req.Body, &m); err != nil || m.From < 0 || m.From >= c.nranks || m.From == c.rank || m.To != c.rank {
			return []agree.Msg{}
		}
		return c.agreeReceive(m)
	case askRevoke:
		var from int
		if err := json.Unmarshal(req.Body, &from); err != nil || from < 0 || from >= c.nranks {
			return listenerReply{Err: fmt.Sprintf("rank %d: malformed revoke request", c.rank)}
		}
		c.fail(revoked(c.rank, from))
		return listenerReply{}
	case heartbeat.AskGone:
		if err := heartbeat.Receive((*beatMember)(c), req.Body); err != nil {
			return listenerReply{Err: err.Error()}
		}
		return listenerReply{}
	case bootstrap.AskLink:
		return c.takeLink(req.Body)
	}
	return listenerReply{Err: fmt.Sprintf("rank %d: unknown request %q (a gocl of another version?)", c.rank, req.Kind)}
}

// shrinkWindow is the agreement's join window when the communicator has no
// timeout (GOCL_TIMEOUT=0): the agreement is bounded all the same.
var shrinkWindow = agree.DefaultTimeout

// Test hooks (nil outside tests): drop an outgoing agreement message; see
// (and change) a rank's outcome before its shrink goes on. Atomic: a
// message of a test's agreement may still be on its way when the test
// removes them.
var (
	agreeDropHook    atomic.Pointer[func(m agree.Msg) bool]
	agreeOutcomeHook atomic.Pointer[func(rank int, o *agree.Outcome)]
)

// agreement is a communicator's agreement machine and the shrink waiting
// on it.
type agreement struct {
	mu      sync.Mutex
	m       *agree.Machine
	base    time.Time          // the machine's clock starts here
	outcome chan agree.Outcome // the running shrink's result
	made    []bootstrap.ID     // roots this rank started for its proposals
}

func (c *Comm) machine() *agree.Machine {
	a := &c.agreement
	if a.m == nil {
		a.base = time.Now()
		window := c.timeout
		if window <= 0 {
			window = shrinkWindow
		}
		var m *agree.Machine
		m = agree.New(agree.Config{Rank: c.rank, N: c.nranks, Timeout: window, NewID: func() ([]byte, error) {
			// The new root lives as long as the agreement can, and is withdrawn
			// when another value is decided (agreeOn).
			id, err := c.newUniqueID(agree.Bound(m.Timeout()))
			if err == nil {
				a.made = append(a.made, id)
			}
			return id[:], err
		}})
		a.m = m
	}
	return a.m
}

func (c *Comm) agreeNow() time.Duration { return time.Since(c.agreement.base) }

// agreeStep takes the machine's output (under the lock): the outcome goes
// to the waiting shrink, the messages out to their ranks, except those
// addressed to replyTo, returned (the answer to its request).
func (c *Comm) agreeStep(out []agree.Msg, o *agree.Outcome, replyTo int) []agree.Msg {
	if o != nil && c.agreement.outcome != nil {
		select {
		case c.agreement.outcome <- *o:
		default:
		}
	}
	var replies []agree.Msg
	for _, m := range out {
		if m.To == replyTo {
			replies = append(replies, m)
			continue
		}
		go c.agreeSend(m)
	}
	return replies
}

// agreeReceive handles a peer's message and returns the replies to it.
func (c *Comm) agreeReceive(m agree.Msg) []agree.Msg {
	a := &c.agreement
	a.mu.Lock()
	defer a.mu.Unlock()
	out, o := c.machine().Receive(c.agreeNow(), m)
	replies := c.agreeStep(out, o, m.From)
	if replies == nil {
		replies = []agree.Msg{}
	}
	return replies
}

// agreeSend sends m and feeds the replies, or the failure, back in.
func (c *Comm) agreeSend(m agree.Msg) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	if drop := agreeDropHook.Load(); drop != nil && (*drop)(m) {
		return
	}
	var replies []agree.Msg
	wait := probeWait(c.agreement.m.Timeout())
	err := bootstrap.Ask(c.peers[m.To].Addr, c.secret, time.Now().Add(wait), bootstrap.NewRequest(askAgree, m), &replies)
	a := &c.agreement
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		refused := errors.Is(err, syscall.ECONNREFUSED)
		out, o := a.m.Unreachable(c.agreeNow(), m.To, refused)
		c.agreeStep(out, o, -1)
		return
	}
	for _, r := range replies {
		if r.From != m.To || r.To != c.rank {
			continue // not from the peer asked: ignore it
		}
		out, o := a.m.Receive(c.agreeNow(), r)
		c.agreeStep(out, o, -1)
	}
}

// agreeOn runs this rank's side of one agreement: agreed (exclude nil,
// explicit false) or on the caller's exclude list. It returns the decision
// (or the error every rank returns) within agree.Bound of the timeout.
func (c *Comm) agreeOn(explicit bool, exclude []int) (agree.Outcome, error) {
	a := &c.agreement
	a.mu.Lock()
	m := c.machine()
	ch := make(chan agree.Outcome, 1)
	a.outcome = ch
	out, o := m.Start(c.agreeNow(), explicit, exclude)
	c.agreeStep(out, o, -1)
	tick := m.Tick()
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.outcome = nil
		a.mu.Unlock()
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case o := <-ch:
			if see := agreeOutcomeHook.Load(); see != nil {
				(*see)(c.rank, &o)
			}
			a.mu.Lock()
			for _, id := range a.made {
				if o.Err != nil || string(o.Value.ID) != string(id[:]) {
					bootstrap.StopRoot(id) // a proposal of ours nobody will join
				}
			}
			a.made = nil
			a.mu.Unlock()
			if o.Err != nil {
				return o, o.Err
			}
			if o.Value.Err != "" {
				return o, errors.New(o.Value.Err)
			}
			debuglog.Infof(debuglog.Init, c.rank, "shrink epoch %d: decided members %v", o.Epoch, o.Value.Members)
			return o, nil
		case <-t.C:
			a.mu.Lock()
			out, o := m.Step(c.agreeNow())
			c.agreeStep(out, o, -1)
			a.mu.Unlock()
		}
	}
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
