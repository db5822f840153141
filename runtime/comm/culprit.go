package comm

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/transport"
)

// Naming the culprit. A rank that times out knows only the peer it waited
// for, which may itself be waiting: in a ring with rank 2 stopped, rank 1
// waits for rank 0, which waits for rank 2. Before failing, a rank that timed
// out (or lost a connection) follows the wait chain with liveness probes on
// the bootstrap listeners (bootstrap.Serve), which answer from a goroutine of
// their own: a rank that does not answer is stopped, hung or gone; one that
// answers says whether it is in a call, whom it waits for, and what it
// blamed if it already failed. The verdict then travels in the abort frames
// (transport.AbortReason), so every rank names the same root. Nothing of
// this runs on the success path but two atomic adds per call.

// liveness is a rank's answer to a probe.
type liveness struct {
	Calls   uint64 `json:"calls"`    // operations started (collective and point-to-point)
	InCall  bool   `json:"in_call"`  // an operation is running now
	WaitsOn int    `json:"waits_on"` // the peer its own wait timed out on; -1
	Root    int    `json:"root"`     // the rank it blamed after failing; -1
	Kind    int    `json:"kind"`     // the transport.Kind of that verdict
	Detail  string `json:"detail"`   // the verdict's cause in words
}

// progress is what the probe server reads while the call path runs.
type progress struct {
	edges   atomic.Uint64 // +1 when a call starts and when it ends: odd while in a call
	waitsOn atomic.Int64
}

func (p *progress) enter() { p.edges.Add(1) }
func (p *progress) leave() { p.edges.Add(1) }

// answer is this rank's liveness.
func (c *Comm) answer() any {
	edges := c.prog.edges.Load()
	l := liveness{Calls: (edges + 1) / 2, InCall: edges%2 == 1, WaitsOn: int(c.prog.waitsOn.Load()), Root: -1}
	if err := c.AsyncError(); err != nil {
		l.Root, l.Kind, l.Detail = c.rank, int(transport.KindPeerFailed), err.Error()
		if e := transport.ErrorOf(err); e != nil && e.Kind != transport.KindAborted && e.Kind != transport.KindMismatch {
			l.Root, l.Kind, l.Detail = e.Peer, int(e.Kind), e.Detail
			if e.Kind == transport.KindTimeout {
				l.Detail = e.What
			}
		}
	}
	return l
}

// ask probes rank p.
func (c *Comm) ask(p int, wait time.Duration) (liveness, error) {
	var l liveness
	err := bootstrap.Ask(c.peers[p].Addr, c.secret, time.Now().Add(wait), bootstrap.NewRequest(bootstrap.AskProbe, nil), &l)
	return l, err
}

// blame replaces a timeout or a lost connection seen on a link by the
// verdict on the rank at the root of the wait chain. The first diagnosis of
// the communicator is kept: the errors of other links and goroutines of the
// same failure are echoes of it.
func (c *Comm) blame(err error) error {
	e := transport.ErrorOf(err)
	if e != nil && e.Kind == transport.KindAborted { // an echo: this comm failed already
		if b := transport.ErrorOf(c.AsyncError()); b != nil && b.Kind != transport.KindAborted {
			return transport.NewError(*b)
		}
		return err
	}
	if e == nil || e.Via >= 0 || (e.Kind != transport.KindTimeout && e.Kind != transport.KindPeerClosed) {
		return err
	}
	c.blameMu.Lock()
	defer c.blameMu.Unlock()
	if c.verdict == nil {
		c.verdict = c.diagnose(e, err)
	}
	return c.verdict
}

// diagnose walks the wait chain from e.Peer; err is e as returned.
func (c *Comm) diagnose(e *transport.Error, err error) error {
	wait := bootstrap.ProbeWait(c.timeout)
	if e.Kind == transport.KindTimeout {
		c.prog.waitsOn.Store(int64(e.Peer))
	}
	chain := []int{c.rank}
	seen := map[int]bool{c.rank: true}
	p := e.Peer
	giveUp := time.Now().Add(c.timeout + wait)
	verdict := func(kind transport.Kind, root int, detail string) error {
		via := -1
		if root != e.Peer {
			via = e.Peer
		}
		return transport.NewError(transport.Error{Kind: kind, Self: c.rank, Peer: root, Via: via, What: e.What, Detail: detail})
	}
	path := func() string {
		s := make([]string, len(chain))
		for i, r := range chain {
			s[i] = fmt.Sprint(r)
		}
		return strings.Join(s, " -> ")
	}
	for {
		if !seen[p] {
			seen[p] = true
			chain = append(chain, p)
		}
		st, aerr := c.ask(p, wait)
		switch {
		case aerr != nil && e.Kind == transport.KindPeerClosed && p == e.Peer:
			return err // gone: the lost connection says it best
		case errors.Is(aerr, syscall.ECONNREFUSED):
			if p == e.Peer {
				if why := c.peerVerdict(p, wait); why != nil {
					return why // it failed first, and told us why
				}
			}
			return verdict(transport.KindStalled, p, fmt.Sprintf(
				"the wait chain %s ends there and its communicator is gone (its probe port refuses connections): it exited, or destroyed or aborted its communicator without making the call",
				path()))
		case aerr != nil:
			return verdict(transport.KindStalled, p, fmt.Sprintf(
				"the wait chain %s ends there and its process did not answer a liveness probe within %v: it is stopped (SIGSTOP, a debugger), hung outside gocl, or its host is unreachable (the wait passed the communicator's timeout, GOCL_TIMEOUT or the timeout given at init; raise it if rank %d is only slow)",
				path(), wait, p))
		case st.Root >= 0 && st.Root != c.rank:
			return verdict(transport.Kind(st.Kind), st.Root, st.Detail)
		case e.Kind == transport.KindPeerClosed:
			return err // it closed the link without a verdict of its own
		case !st.InCall:
			// Call counts compared, as NCCL's RAS does: behind, or ahead (it
			// made a call the others did not).
			mine := (c.prog.edges.Load() + 1) / 2
			calls := "calls"
			if st.Calls == 1 {
				calls = "call"
			}
			count := fmt.Sprintf("it has made %d %s and this rank is in its call %d: %d behind", st.Calls, calls, mine, mine-st.Calls)
			if mine <= st.Calls {
				count = fmt.Sprintf("it has made %d %s, and this rank is in its call %d: a call it made did not match this one", st.Calls, calls, mine)
			}
			return verdict(transport.KindStalled, p, fmt.Sprintf(
				"the wait chain %s ends there: its process answers but is in no call on this communicator (%s): it is busy elsewhere, or it does not make the same calls in the same order as the others (the communicator's timeout bounded the wait: GOCL_TIMEOUT, or the timeout given at init)",
				path(), count))
		case st.WaitsOn >= 0 && seen[st.WaitsOn]:
			return verdict(transport.KindStalled, p, fmt.Sprintf(
				"the ranks %s -> %d wait for each other inside gocl calls that do not match (the communicator's timeout bounded the wait: GOCL_TIMEOUT, or the timeout given at init); the flight recorder (GOCL_TRACE_BUFFER, gocl trace) shows each rank's calls",
				path(), st.WaitsOn))
		case st.WaitsOn >= 0:
			p = st.WaitsOn
			continue
		case time.Now().After(giveUp):
			return verdict(transport.KindStalled, p, fmt.Sprintf(
				"the wait chain %s ends there: its process answers and is inside a gocl call, but that call made no progress within the communicator's timeout (GOCL_TIMEOUT)", path()))
		}
		time.Sleep(20 * time.Millisecond) // p is waiting too: its own timeout will say for whom
	}
}

// peerVerdict waits up to wait for the link to peer p to deliver p's own
// failure (its abort reason), which may trail p's exit: a rank whose
// deadline passed just before p's abort frame arrived then still blames
// p's culprit instead of p. (A verdict already there when the deadline
// passed is returned by the link's wait itself: transport.Link's Failure.)
func (c *Comm) peerVerdict(p int, wait time.Duration) error {
	c.linkMu.Lock()
	f := c.links[p]
	c.linkMu.Unlock()
	if f == nil {
		return nil
	}
	for end := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		if err := f.Failure(); err != nil {
			if e := transport.ErrorOf(err); e != nil && e.Kind != transport.KindAborted {
				return err
			}
			return nil
		}
		if time.Now().After(end) {
			return nil
		}
	}
}
