// Package heartbeat finds a stopped rank between calls and in them.
//
// A killed rank is found at once (the kernel closes its sockets); a stopped
// one (SIGSTOP, a debugger, a frozen VM, a host cut off without a reset)
// keeps its sockets open and would hold every peer until the communicator's
// timeout. So each process is watched by the one before it in rank order, a
// ring over processes (O(1) per process whatever N): the last rank of each
// run of ranks in one process asks the next rank, in another process, for
// its liveness every period over one sealed session to its bootstrap
// listener, answered by gocl's own goroutines (a rank busy in Python or XLA
// still answers). A peer silent for the heartbeat timeout is declared gone:
// the watcher passes the verdict on over the listeners in a binomial tree
// (O(log N) hops) and fails its communicator with it, so every rank's call
// in progress, or its next one, fails naming the silent rank, and a shrink
// does not wait for it.
//
// The package sees its communicator through Member: the ranks' listeners,
// the job's secret, and what to do with a verdict.
package heartbeat

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
	"gocl/runtime/debuglog"
)

// AskGone is the listener request that carries a verdict.
const AskGone = "gone"

// Member is a communicator as its heartbeat sees it.
type Member interface {
	Rank() int
	Ranks() int
	Peer(p int) bootstrap.PeerInfo // its listener, process, pid and host
	Secret() []byte                // the job's, for the listeners' handshake
	Unusable() bool                // failed or freed: the links say the rest
	// Take fails the communicator with v (calls in progress and later ones
	// fail naming v.Root) and tells its shrink agreement that v.Root is gone.
	Take(v Verdict)
}

// Verdict is the finding that a rank stopped answering.
type Verdict struct {
	Root   int    `json:"root"`   // the silent rank
	From   int    `json:"from"`   // the rank whose heartbeat found it
	Detail string `json:"detail"` // the verdict in words
	Tell   []int  `json:"tell"`   // the ranks the recipient passes it on to
}

// period is how often a watcher asks: five asks per timeout, at most one a
// second.
func period(timeout time.Duration) time.Duration {
	return min(max(timeout/5, 10*time.Millisecond), time.Second)
}

// watched is the rank m's heartbeat watches: the next rank when it lives in
// another process, else none (-1).
func watched(m Member) int {
	self, n := m.Rank(), m.Ranks()
	next := (self + 1) % n
	if next == self || m.Peer(next).Proc == m.Peer(self).Proc {
		return -1
	}
	return next
}

// Watcher is one rank's heartbeat, and what it measured: the margin the
// timeout leaves on this host.
type Watcher struct {
	m       Member
	peer    int
	timeout time.Duration
	asks    atomic.Int64
	slowest atomic.Int64 // the slowest answer, in ns
	// stop ends the watcher when the communicator is released, and closing
	// its session ends an ask in progress: nothing of it outlives Stop.
	stop     chan struct{}
	stopOnce sync.Once
	session  atomic.Pointer[bootstrap.Session]
}

// Watch starts m's watcher when timeout is on and m has a peer to watch
// (nil otherwise); it ends when m fails or Stop is called.
func Watch(m Member, timeout time.Duration) *Watcher {
	p := watched(m)
	if timeout <= 0 || p < 0 {
		return nil
	}
	w := &Watcher{m: m, peer: p, timeout: timeout, stop: make(chan struct{})}
	go w.run()
	return w
}

// Stop ends the watcher, if any, at once.
func (w *Watcher) Stop() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		close(w.stop)
		if s := w.session.Load(); s != nil {
			s.Close()
		}
	})
}

// Log writes what the watcher measured (GOCL_DEBUG=INFO).
func (w *Watcher) Log() {
	if w != nil {
		debuglog.Infof(debuglog.Init, w.m.Rank(), "heartbeat on rank %d: %d asks, slowest answer %v (GOCL_HEARTBEAT_TIMEOUT %v)",
			w.peer, w.asks.Load(), time.Duration(w.slowest.Load()).Round(time.Microsecond), w.timeout)
	}
}

func (w *Watcher) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *Watcher) run() {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	tick := time.NewTicker(period(w.timeout))
	defer tick.Stop()
	p, addr := w.peer, w.m.Peer(w.peer).Addr
	var s *bootstrap.Session
	drop := func() {
		if s != nil {
			w.session.Store(nil)
			s.Close()
			s = nil
		}
	}
	defer drop()
	heard := time.Now()
	for {
		select {
		case <-tick.C:
		case <-w.stop:
			return
		}
		if w.m.Unusable() {
			return
		}
		// The peer has until timeout after it was last heard, and at least
		// half the timeout from this ask: a watcher that was itself stopped
		// or starved does not blame its peer for its own silence.
		now := time.Now()
		deadline := heard.Add(w.timeout)
		if d := now.Add(w.timeout / 2); d.After(deadline) {
			deadline = d
		}
		var err error
		if s == nil {
			if s, err = bootstrap.Dial(addr, w.m.Secret(), deadline); err == nil {
				w.session.Store(s)
				if w.stopped() { // stopped meanwhile: Stop may have missed the session
					return
				}
			}
		}
		if err == nil {
			var answer json.RawMessage // any answer is a sign of life
			err = s.Ask(deadline, bootstrap.NewRequest(bootstrap.AskProbe, nil), &answer)
		}
		switch {
		case w.stopped():
			return
		case err == nil:
			heard = time.Now()
			w.asks.Add(1)
			if d := int64(heard.Sub(now)); d > w.slowest.Load() {
				w.slowest.Store(d)
			}
			continue
		case errors.Is(err, syscall.ECONNREFUSED):
			return // its listener is closed: it freed the communicator or exited
		case !time.Now().Before(deadline) || time.Since(heard) >= w.timeout:
			// Silent until the deadline, or unreachable (no route: this
			// host's link is down) for the whole timeout.
			if w.m.Unusable() {
				return
			}
			w.declareGone(p, time.Since(heard))
			return
		}
		drop() // reset or closed: ask again on a new session
	}
}

// declareGone tells every other rank that p is silent, then takes the
// verdict here.
func (w *Watcher) declareGone(p int, silent time.Duration) {
	m := w.m
	pi := m.Peer(p)
	host, _, _ := strings.Cut(pi.Host, "/") // the name, without boot and namespace ids
	detail := fmt.Sprintf("it stopped answering gocl's heartbeats: nothing heard from its process (pid %d, host %s) for %.1f s (GOCL_HEARTBEAT_TIMEOUT=%g s); it did not exit (that closes its connections): it is stopped (SIGSTOP, a debugger), frozen or swapped out, or its host lost the network",
		pi.Pid, host, silent.Seconds(), w.timeout.Seconds())
	debuglog.Warnf(debuglog.Init, m.Rank(), "heartbeat: rank %d: %s", p, detail)
	var others []int
	for r := range m.Ranks() {
		if r != m.Rank() && r != p {
			others = append(others, r)
		}
	}
	// Told before failing here: a process whose call fails may exit at
	// once, and the others must not depend on it staying. Every reachable
	// rank is asked at once; ranks that do not answer (a partition) cost
	// their share a retry each, so this rank waits for it at most
	// spreadWait, and the telling goes on meanwhile.
	tellThenTake(m, Verdict{Root: p, From: m.Rank(), Detail: detail}, others)
}

// spreadWait bounds how long a rank holds its own failure back while it
// passes a verdict on.
const spreadWait = 2 * time.Second

// tellThenTake spreads v to ranks, then (or after spreadWait) takes it.
func tellThenTake(m Member, v Verdict, ranks []int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		spread(m, v, ranks)
	}()
	t := time.NewTimer(spreadWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	m.Take(v)
}

// spread passes v on to ranks as a binomial tree: the first rank of each
// half takes the rest of its half. It returns once its own children have
// acknowledged (they pass it on after answering); a rank that cannot be
// told (stopped too, or gone) has its share told directly.
func spread(m Member, v Verdict, ranks []int) {
	var wg sync.WaitGroup
	for len(ranks) > 0 {
		h := (len(ranks) + 1) / 2
		to, share := ranks[0], ranks[1:h]
		ranks = ranks[h:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			vv := v
			vv.Tell = share
			var ack json.RawMessage
			if err := bootstrap.Ask(m.Peer(to).Addr, m.Secret(), time.Now().Add(2*time.Second), bootstrap.NewRequest(AskGone, vv), &ack); err != nil {
				spread(m, v, share)
			}
		}()
	}
	wg.Wait()
}

// Receive handles a verdict a peer passed on (an AskGone request's body):
// it passes it on to the ranks named and takes it, in the background, and
// says at once what was malformed, if anything.
func Receive(m Member, body json.RawMessage) error {
	var v Verdict
	n, self := m.Ranks(), m.Rank()
	if err := json.Unmarshal(body, &v); err != nil || v.Root < 0 || v.Root >= n || v.From < 0 || v.From >= n || v.Root == self {
		return fmt.Errorf("rank %d: malformed heartbeat verdict", self)
	}
	var tell []int
	for _, r := range v.Tell {
		if r >= 0 && r < n && r != self && r != v.Root {
			tell = append(tell, r)
		}
	}
	go func() {
		defer func() { recover() }()
		tellThenTake(m, v, tell)
	}()
	return nil
}
