package comm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/debuglog"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// Connect on first use (GOCL_RUNTIME_CONNECT=1, NCCL_RUNTIME_CONNECT's
// idea): init makes no link; a call first connects the peers its algorithm
// talks to (peersOf), so a job that only runs ring all-reduces holds 2
// links per rank, not N-1.
//
// The rank that needs a pair first dials its peer's listener (the one that
// answers probes, which hands the connection over: bootstrap.DialLink), and
// the peer's listener makes its end of the link at once, on its own
// goroutine, whatever the peer is doing: a send to a rank that is not yet
// in the matching call completes as it does over a link made at init
// (buffered), and a cycle of such sends cannot deadlock. When both ends
// dial at once, the higher rank's connections win: a rank that is dialing
// turns a lower rank's connections away (ErrCrossed) and takes a higher
// rank's, so exactly one link is made. A pair's state lives in pairState,
// under linkMu.

// lazyKey names one call shape whose peers are connected already.
type lazyKey struct {
	coll wire.Coll
	algo tune.Algo
	root int
}

// pairState is how far this rank is in connecting a pair on first use.
type pairState struct {
	dialing   bool          // this rank's call dials the peer
	accepting bool          // the listener takes the peer's connections and makes the link
	done      chan struct{} // closed when accepting ends
	err       error         // why accepting failed: the pair cannot be made, the communicator fails
}

// pair is p's state, made on first use: a rank holds state only for the
// pairs it has touched. The caller holds linkMu.
func (c *Comm) pair(p int) *pairState {
	st := c.pairs[p]
	if st == nil {
		st = &pairState{}
		c.pairs[p] = st
	}
	return st
}

// inbox holds the connections a peer made to this rank until the pair's
// acceptor has them all.
type inbox struct {
	mu    sync.Mutex
	conns map[int][]net.Conn // by peer, by the connection's index
	wake  chan struct{}      // closed (and replaced) at every arrival
	shut  bool
}

func (b *inbox) put(peer, idx int, conn net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		conn.Close()
		return
	}
	if b.conns == nil {
		b.conns = map[int][]net.Conn{}
	}
	cs := b.conns[peer]
	for len(cs) <= idx {
		cs = append(cs, nil)
	}
	if cs[idx] != nil {
		cs[idx].Close() // a retry's: the newer one is the peer's
	}
	cs[idx] = conn
	b.conns[peer] = cs
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// take returns peer's k connections when they are all there; else a
// channel closed at the next arrival.
func (b *inbox) take(peer, k int) ([]net.Conn, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cs := b.conns[peer]
	if len(cs) >= k && !slices.Contains(cs[:k], nil) {
		delete(b.conns, peer)
		for _, x := range cs[k:] {
			if x != nil {
				x.Close()
			}
		}
		return cs[:k], nil
	}
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return nil, b.wake
}

// drop closes what peer left in the inbox.
func (b *inbox) drop(peer int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.conns[peer] {
		if x != nil {
			x.Close()
		}
	}
	delete(b.conns, peer)
}

// close drops what is waiting and turns later arrivals away.
func (b *inbox) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shut = true
	for _, cs := range b.conns {
		for _, x := range cs {
			if x != nil {
				x.Close()
			}
		}
	}
	b.conns = nil
}

// takeLink answers a peer's AskLink on the listener: the connection goes to
// the inbox and, with the pair's first, an acceptor starts making this
// rank's end of the link (acceptPair).
func (c *Comm) takeLink(body json.RawMessage) any {
	var h bootstrap.LinkHello
	if err := json.Unmarshal(body, &h); err != nil || h.Rank < 0 || h.Rank >= c.nranks || h.Rank == c.rank || h.Index < 0 || h.Index >= 64 {
		return bootstrap.LinkReply{Err: fmt.Sprintf("rank %d: malformed link request", c.rank)}
	}
	if !c.lazy {
		return bootstrap.LinkReply{Err: fmt.Sprintf("rank %d does not connect on first use: set GOCL_RUNTIME_CONNECT alike on every rank", c.rank)}
	}
	if err := c.usable(); err != nil {
		return bootstrap.LinkReply{Err: err.Error()}
	}
	q := h.Rank
	c.linkMu.Lock()
	st := c.pair(q)
	// Turned away: q's connections lost the race, to this rank's own or
	// (the link is made already) to the higher rank's, which q takes.
	if c.links[q] != nil || st.dialing && q < c.rank && !st.accepting {
		c.linkMu.Unlock()
		return bootstrap.LinkReply{Crossed: true}
	}
	start := !st.accepting
	if start {
		st.accepting, st.done, st.err = true, make(chan struct{}), nil
	}
	c.linkMu.Unlock()
	return bootstrap.Takeover{Reply: bootstrap.LinkReply{}, Take: func(conn net.Conn) {
		c.in.put(q, h.Index, conn)
		if start {
			go c.acceptPair(q)
		}
	}}
}

// acceptPair makes this rank's end of the link to q over the connections
// q dials, on the listener's side: it does not wait for a call of this
// rank's to need the pair.
func (c *Comm) acceptPair(q int) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	cands := c.candidatesTo(q)
	var l transport.Link
	conns, err := c.awaitConns(q, socks(cands), deadline)
	if err == nil {
		l, err = c.linkPair(q, cands, conns, deadline)
	}
	if err == nil {
		err = c.adopt(q, l)
	}
	c.in.drop(q)
	c.linkMu.Lock()
	st := c.pair(q)
	st.accepting, st.err = false, err
	close(st.done)
	c.linkMu.Unlock()
	if err != nil {
		// As a link that fails at init fails the init: this rank's calls
		// get the cause (a setting that differs, say), not a timeout later.
		c.fail(err)
	}
}

// awaitConns waits for the k connections q makes to this one, until
// deadline or until the communicator fails.
func (c *Comm) awaitConns(q, k int, deadline time.Time) ([]net.Conn, error) {
	if k == 0 {
		return nil, nil
	}
	for {
		conns, wake := c.in.take(q, k)
		if conns != nil {
			return conns, nil
		}
		if err := c.usable(); err != nil {
			return nil, err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, status.Errorf(status.Timeout, "rank %d: rank %d began connecting on first use but did not finish within the timeout", c.rank, q)
		}
		select {
		case <-wake:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// needFor connects the peers a call of coll by algorithm a (root: rooted
// collectives' root, else -1) talks to, once per call shape.
func (c *Comm) needFor(coll wire.Coll, a tune.Algo, root int) error {
	k := lazyKey{coll, a, root}
	if c.lastReady == k || c.ready[k] {
		c.lastReady = k // a job repeats its call shape: a compare, not a map lookup, per call (bench/CALLPATH.md)
		return nil
	}
	if err := c.need(c.peersOf(coll, a, root)); err != nil {
		return err
	}
	if c.ready == nil {
		c.ready = map[lazyKey]bool{}
	}
	c.ready[k] = true
	return nil
}

// need connects this rank to the peers it has no link to yet, all at
// once (the pairs' handshakes wait on different peers). Links made before
// an error are kept.
func (c *Comm) need(peers []int) error {
	var missing []int
	c.linkMu.Lock()
	for _, p := range peers {
		if p != c.rank && c.links[p] == nil && !slices.Contains(missing, p) {
			missing = append(missing, p)
		}
	}
	c.linkMu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	return status.Parallel(len(missing), func(i int) error { return c.connectPair(missing[i], deadline) })
}

// connectPair makes the link to p from this rank's call: it dials p, or
// waits for the link p's connections are making here.
func (c *Comm) connectPair(p int, deadline time.Time) error {
	for {
		c.linkMu.Lock()
		st := c.pair(p)
		switch {
		case c.links[p] != nil:
			c.linkMu.Unlock()
			return nil
		case st.err != nil:
			err := st.err
			c.linkMu.Unlock()
			return err
		case st.accepting:
			done := st.done
			c.linkMu.Unlock()
			if err := c.awaitPeer(p, deadline, done); err != nil {
				return err
			}
			c.linkMu.Lock()
			err := st.err
			linked := c.links[p] != nil
			c.linkMu.Unlock()
			if !linked && err != nil {
				return err
			}
			continue
		}
		st.dialing = true
		c.linkMu.Unlock()
		err := c.dialPair(p, deadline)
		c.linkMu.Lock()
		st.dialing = false
		c.linkMu.Unlock()
		if !errors.Is(err, bootstrap.ErrCrossed) {
			return err
		}
		// p is the higher rank and dials this one: its connections make
		// the link here (acceptPair).
		if err := c.awaitPeer(p, deadline, nil); err != nil {
			return err
		}
	}
}

// dialPair dials p's listener and makes this end of the link.
func (c *Comm) dialPair(p int, deadline time.Time) error {
	cands := c.candidatesTo(p)
	k := socks(cands)
	conns := make([]net.Conn, 0, k)
	for i := 0; i < k; i++ {
		x, err := bootstrap.DialLink(c.peers[p].Addr, c.secret, deadline, c.rank, i)
		if err != nil {
			for _, y := range conns {
				y.Close()
			}
			switch {
			case errors.Is(err, bootstrap.ErrCrossed):
				return err
			case errors.Is(err, syscall.ECONNREFUSED):
				return c.peerGone(p, "connecting on first use:", err)
			}
			return status.Errorf(status.RemoteError, "rank %d: cannot connect to rank %d at %s on first use: %v", c.rank, p, c.peers[p].Addr, err)
		}
		conns = append(conns, x)
	}
	l, err := c.linkPair(p, cands, conns, deadline)
	if err != nil {
		return err
	}
	return c.adopt(p, l)
}

// awaitPeer waits until p's connections have made the link here: done
// closes, or (nil) the link appears. It waits on p as a link's wait does:
// a timeout is diagnosed along the wait chain (blame), and a peer whose
// listener refuses connections (its communicator is gone) ends the wait.
func (c *Comm) awaitPeer(p int, deadline time.Time, done <-chan struct{}) error {
	wait := bootstrap.ProbeWait(c.timeout)
	nextProbe := time.Now().Add(wait)
	// Without done (this rank's dial crossed p's) nothing signals the
	// link's arrival: look again after a pause that starts short, as the
	// crossing dial is usually a round trip away, and grows to 20 ms.
	pause := 500 * time.Microsecond
	tick := time.NewTimer(pause)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-tick.C:
		}
		pause = min(2*pause, 20*time.Millisecond)
		tick.Reset(pause)
		c.linkMu.Lock()
		st := *c.pair(p)
		linked := c.links[p] != nil
		c.linkMu.Unlock()
		if linked || done == nil && (st.accepting || st.err != nil) {
			return nil // connected, being connected or failed: the caller looks again
		}
		if err := c.usable(); err != nil {
			return err
		}
		now := time.Now()
		if !deadline.IsZero() && now.After(deadline) {
			return transport.NewError(transport.Error{Kind: transport.KindTimeout, Self: c.rank, Peer: p, Via: -1,
				What: fmt.Sprintf("waiting for rank %d to connect on first use", p)})
		}
		if now.After(nextProbe) {
			if _, err := c.ask(p, wait); errors.Is(err, syscall.ECONNREFUSED) {
				return c.peerGone(p, "it did not finish connecting on first use, and", err)
			}
			nextProbe = time.Now().Add(wait)
		}
	}
}

// peerGone is the error for peer p whose listener refused a connection
// (after what the detail begins with): its communicator is gone, as
// culprit.go names it.
func (c *Comm) peerGone(p int, doing string, err error) error {
	return transport.NewError(transport.Error{Kind: transport.KindPeerClosed, Self: c.rank, Peer: p, Via: -1,
		Detail: doing + " its probe port refuses connections", Err: err})
}

// adopt makes l this rank's link to p, from the call's goroutine or the
// listener's: it shares the call deadline and takes the channel counts the
// ranks agreed on as links made at init do, and is aborted at once if the
// communicator failed meanwhile.
func (c *Comm) adopt(p int, l transport.Link) error {
	s, ok := l.(transport.DeadlineSharer)
	if !ok {
		l.Close()
		return status.Errorf(status.InternalError, "rank %d: the %s link to rank %d cannot be made on first use (it does not share the call's deadline): set GOCL_RUNTIME_CONNECT=0", c.rank, l.Name(), p)
	}
	s.ShareDeadline(&c.deadline)
	c.linkMu.Lock()
	if ch, ok := l.(transport.Channeled); ok && c.chHave > 0 {
		if ch.NumChannels() < c.chHave {
			c.linkMu.Unlock()
			l.Close()
			return status.Errorf(status.InternalError, "rank %d: the link to rank %d made on first use has %d channels where the ranks agreed on %d at init (its shared memory fell back): set GOCL_MAX_NCHANNELS=1 or GOCL_RUNTIME_CONNECT=0", c.rank, p, ch.NumChannels(), c.chHave)
		}
		ch.UseChannels(c.chLo, c.chHave)
	}
	c.links[p] = l
	c.linkMu.Unlock()
	debuglog.Infof(debuglog.Init, c.rank, "channel to rank %d (pid %d, %s) via %s, on first use", p, c.peers[p].Pid, c.peers[p].Addr, l.Name())
	if c.unusable.Load() { // failed or freed while the link was made
		if err := c.AsyncError(); err != nil {
			l.Abort(transport.AbortReason(c.rank, err))
		} else {
			l.Close()
		}
	}
	return nil
}
