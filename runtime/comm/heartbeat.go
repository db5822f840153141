package comm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/transport"
)

// Heartbeats. A killed rank is found at once (the kernel closes its
// sockets); a stopped one (SIGSTOP, a debugger, a frozen VM, a host cut off
// without a reset) keeps its sockets open and would hold every peer until
// the communicator's timeout. So each process is watched by the one before
// it in rank order, a ring over processes (O(1) per process whatever N):
// the last rank of each run of ranks in one process asks the next rank,
// in another process, for its liveness every period over one sealed
// session to its bootstrap listener, answered by gocl's own goroutines (a
// rank busy in Python or XLA still answers). A peer silent for the
// heartbeat timeout is declared gone: the watcher fails its communicator
// with the verdict and passes it on over the listeners in a binomial tree
// (O(log N) hops), so every rank's call in progress, or its next one, fails
// naming the silent rank, and a shrink does not wait for it.

const askGone = "gone"

// goneMsg carries a heartbeat verdict.
type goneMsg struct {
	Root   int    `json:"root"`   // the silent rank
	From   int    `json:"from"`   // the rank whose heartbeat found it
	Detail string `json:"detail"` // the verdict in words
	Tell   []int  `json:"tell"`   // the ranks the recipient passes it on to
}

// heartbeatPeriod is how often a watcher asks: five asks per timeout, at
// most one a second.
func heartbeatPeriod(timeout time.Duration) time.Duration {
	return min(max(timeout/5, 10*time.Millisecond), time.Second)
}

// watched is the rank this rank's heartbeat watches: the next rank when it
// lives in another process, else none (-1).
func (c *Comm) watched() int {
	next := (c.rank + 1) % c.nranks
	if next == c.rank || c.peers[next].Proc == c.peers[c.rank].Proc {
		return -1
	}
	return next
}

// beats is what a watcher measured, logged when its communicator ends
// (GOCL_DEBUG=INFO): the margin the timeout leaves on this host.
type beats struct {
	on      bool // a watcher runs
	peer    int  // the rank it watches
	timeout time.Duration
	asks    atomic.Int64
	slowest atomic.Int64 // the slowest answer, in ns
	// stop ends the watcher when the communicator is released, and closing
	// its session ends an ask in progress: nothing of it outlives Destroy.
	stop     chan struct{}
	stopOnce sync.Once
	session  atomic.Pointer[bootstrap.Session]
}

// stopHeartbeat ends the watcher, if any, at once (release).
func (c *Comm) stopHeartbeat() {
	b := &c.beats
	if !b.on {
		return
	}
	b.stopOnce.Do(func() {
		close(b.stop)
		if s := b.session.Load(); s != nil {
			s.Close()
		}
	})
}

func (b *beats) stopped() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

func (c *Comm) logBeats() {
	if b := &c.beats; b.on {
		debuglog.Infof(debuglog.Init, c.rank, "heartbeat on rank %d: %d asks, slowest answer %v (GOCL_HEARTBEAT_TIMEOUT %v)",
			b.peer, b.asks.Load(), time.Duration(b.slowest.Load()).Round(time.Microsecond), b.timeout)
	}
}

// startHeartbeat starts the watcher when heartbeats are on and this rank
// has a peer to watch; it ends when the communicator fails or is freed.
func (c *Comm) startHeartbeat() {
	timeout := config.HeartbeatTimeout()
	if p := c.watched(); timeout > 0 && p >= 0 {
		c.beats.on, c.beats.peer, c.beats.timeout, c.beats.stop = true, p, timeout, make(chan struct{})
		go c.heartbeat(p, timeout)
	}
}

func (c *Comm) heartbeat(p int, timeout time.Duration) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	period := heartbeatPeriod(timeout)
	tick := time.NewTicker(period)
	defer tick.Stop()
	b := &c.beats
	var s *bootstrap.Session
	drop := func() {
		if s != nil {
			b.session.Store(nil)
			s.Close()
			s = nil
		}
	}
	defer drop()
	heard := time.Now()
	for {
		select {
		case <-tick.C:
		case <-b.stop:
			return
		}
		if c.unusable.Load() {
			return // failed or freed: its links say the rest
		}
		// The peer has until timeout after it was last heard, and at least
		// half the timeout from this ask: a watcher that was itself stopped
		// or starved does not blame its peer for its own silence.
		now := time.Now()
		deadline := heard.Add(timeout)
		if d := now.Add(timeout / 2); d.After(deadline) {
			deadline = d
		}
		var err error
		if s == nil {
			if s, err = bootstrap.Dial(c.peers[p].Addr, c.secret, deadline); err == nil {
				b.session.Store(s)
				if b.stopped() { // released meanwhile: stopHeartbeat may have missed it
					return
				}
			}
		}
		var l liveness
		if err == nil {
			err = s.Ask(deadline, bootstrap.NewRequest(askProbe, nil), &l)
		}
		switch {
		case b.stopped():
			return
		case err == nil:
			heard = time.Now()
			b.asks.Add(1)
			if d := int64(heard.Sub(now)); d > b.slowest.Load() {
				b.slowest.Store(d)
			}
			continue
		case errors.Is(err, syscall.ECONNREFUSED):
			return // its listener is closed: it freed the communicator or exited
		case !time.Now().Before(deadline) || time.Since(heard) >= timeout:
			// Silent until the deadline, or unreachable (no route: this
			// host's link is down) for the whole timeout.
			if c.unusable.Load() {
				return
			}
			c.declareGone(p, time.Since(heard), timeout)
			return
		}
		drop() // reset or closed: ask again on a new session
	}
}

// declareGone fails the communicator with the verdict on silent rank p and
// tells every other rank.
func (c *Comm) declareGone(p int, silent, timeout time.Duration) {
	pi := c.peers[p]
	host, _, _ := strings.Cut(pi.Host, "/") // the name, without boot and namespace ids
	detail := fmt.Sprintf("it stopped answering gocl's heartbeats: nothing heard from its process (pid %d, host %s) for %.1f s (GOCL_HEARTBEAT_TIMEOUT=%g s); it did not exit (that closes its connections): it is stopped (SIGSTOP, a debugger), frozen or swapped out, or its host lost the network",
		pi.Pid, host, silent.Seconds(), timeout.Seconds())
	debuglog.Warnf(debuglog.Init, c.rank, "heartbeat: rank %d: %s", p, detail)
	m := goneMsg{Root: p, From: c.rank, Detail: detail}
	// Told before failing here: a process whose call fails may exit at
	// once, and the others must not depend on it staying. Every reachable
	// rank is asked at once; ranks that do not answer (a partition) cost
	// their share a retry each, so this rank waits for it at most
	// spreadWait, and the telling goes on meanwhile.
	c.tellThenTake(m, complement([]int{c.rank, p}, c.nranks))
}

// spreadWait bounds how long a rank holds its own failure back while it
// passes a verdict on.
const spreadWait = 2 * time.Second

// tellThenTake spreads m to ranks, then (or after spreadWait) takes the
// verdict here.
func (c *Comm) tellThenTake(m goneMsg, ranks []int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		c.spread(m, ranks)
	}()
	t := time.NewTimer(spreadWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	c.takeVerdict(m)
}

// takeVerdict fails this rank's communicator with the verdict of m (calls
// in progress and later ones fail naming m.Root) and tells the shrink
// agreement that m.Root is gone.
func (c *Comm) takeVerdict(m goneMsg) {
	via := m.From
	if via == c.rank {
		via = -1
	}
	c.fail(transport.NewError(transport.Error{Kind: transport.KindStalled, Self: c.rank, Peer: m.Root, Via: via,
		What: "heartbeat", Detail: m.Detail}))
	a := &c.agreement
	a.mu.Lock()
	out, o := c.machine().Dead(c.agreeNow(), m.Root)
	c.agreeStep(out, o, -1)
	a.mu.Unlock()
}

// spread passes m on to ranks as a binomial tree: the first rank of each
// half takes the rest of its half. It returns once its own children have
// acknowledged (they pass it on after answering); a rank that cannot be
// told (stopped too, or gone) has its share told directly.
func (c *Comm) spread(m goneMsg, ranks []int) {
	var wg sync.WaitGroup
	for len(ranks) > 0 {
		h := (len(ranks) + 1) / 2
		to, share := ranks[0], ranks[1:h]
		ranks = ranks[h:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			mm := m
			mm.Tell = share
			var reply listenerReply
			if err := bootstrap.Ask(c.peers[to].Addr, c.secret, time.Now().Add(2*time.Second), bootstrap.NewRequest(askGone, mm), &reply); err != nil {
				c.spread(m, share)
			}
		}()
	}
	wg.Wait()
}

// receiveGone handles a verdict passed on by a peer.
func (c *Comm) receiveGone(body json.RawMessage) any {
	var m goneMsg
	if err := json.Unmarshal(body, &m); err != nil || m.Root < 0 || m.Root >= c.nranks || m.From < 0 || m.From >= c.nranks || m.Root == c.rank {
		return listenerReply{Err: fmt.Sprintf("rank %d: malformed heartbeat verdict", c.rank)}
	}
	var tell []int
	for _, r := range m.Tell {
		if r >= 0 && r < c.nranks && r != c.rank && r != m.Root {
			tell = append(tell, r)
		}
	}
	go func() {
		defer func() { recover() }()
		c.tellThenTake(m, tell)
	}()
	return listenerReply{}
}
