package bootstrap

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"gocl/runtime/debuglog"
)

// StartRoot makes a new unique id and serves one rendezvous for it in the
// background: it waits for every rank's PeerInfo, then answers each and
// sends the table down the tree (table.go).
// It stops when the rendezvous is done, once every rank has had its failure,
// or after timeout (0: none), whichever comes first.
func StartRoot(timeout time.Duration) (ID, error) {
	ifc, err := ChooseIface()
	if err != nil {
		return ID{}, err
	}
	return StartRootOn(ifc, timeout)
}

// StartRootOn is StartRoot with the root listening on ifc: the interface of
// the communicator an id is made from (a split, shrink or grow), or of
// MASTER_ADDR (from_env), so a single-host job stays on loopback.
func StartRootOn(ifc Iface, timeout time.Duration) (ID, error) {
	ln, err := ifc.Listen()
	if err != nil {
		return ID{}, err
	}
	id, err := NewID(ln.Addr().(*net.TCPAddr))
	if err != nil {
		ln.Close()
		return ID{}, err
	}
	debuglog.Infof(debuglog.Bootstrap, -1, "bootstrap root listening on %s", ln.Addr())
	stop := make(chan struct{})
	rootsMu.Lock()
	roots[id] = stop
	rootsMu.Unlock()
	go func() {
		serveRoot(ln, id.Secret(), timeout, stop)
		rootsMu.Lock()
		delete(roots, id)
		rootsMu.Unlock()
	}()
	return id, nil
}

// The roots this process serves, to stop one nobody will join (a shrink
// proposal that was not chosen).
var (
	rootsMu sync.Mutex
	roots   = map[ID]chan struct{}{}
)

// StopRoot ends the rendezvous of id, served here, if it still runs: its
// listener closes and a rank that joined gets a failure.
func StopRoot(id ID) {
	rootsMu.Lock()
	stop, ok := roots[id]
	delete(roots, id)
	rootsMu.Unlock()
	if ok {
		close(stop)
	}
}

type arrival struct {
	conn net.Conn
	info PeerInfo
}

// serveRoot runs one rendezvous. A rank that joined and then leaves before
// the table is sent (its init timed out or was interrupted, its process
// died) fails the rendezvous for every rank at once: without it the others
// would wait out their whole timeout, holding their connections here.
func serveRoot(ln *net.TCPListener, secret []byte, timeout time.Duration, stop <-chan struct{}) {
	defer ln.Close()
	arrivals := make(chan arrival)
	gone := make(chan arrival)
	done := make(chan struct{})
	defer close(done)
	go acceptRanks(ln, secret, arrivals, done)

	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	byRank := map[int]arrival{}
	told := map[int]bool{} // after a failure: the ranks answered with it, or gone
	nranks := 0
	var failure string
	expired, left := false, false // what the failure is: the root's timeout, a rank gone
	// failAll sends the failure to every rank waiting; the root stays to
	// answer late ranks with it until each rank has had it (or the expiry).
	failAll := func(msg string) {
		if failure == "" {
			failure = msg
			debuglog.Warnf(debuglog.Bootstrap, -1, "bootstrap root: %s", msg)
		}
		for r, b := range byRank {
			writeMsg(b.conn, rootReply{Err: failure, Expired: expired, Left: left})
			b.conn.Close()
			told[r] = true
		}
		byRank = map[int]arrival{}
	}
	for {
		select {
		case <-stop:
			failAll("the rendezvous was withdrawn (a shrink proposal that was not chosen)")
			return
		case a := <-arrivals:
			switch {
			case a.info.NRanks <= 0 || a.info.Rank < 0 || a.info.Rank >= a.info.NRanks:
				failAll(fmt.Sprintf("rank %d joined with nranks %d", a.info.Rank, a.info.NRanks))
			case nranks != 0 && a.info.NRanks != nranks:
				failAll(fmt.Sprintf("ranks disagree on the communicator size: rank %d says nranks=%d, others said %d", a.info.Rank, a.info.NRanks, nranks))
			case byRank[a.info.Rank].conn != nil:
				failAll(fmt.Sprintf("rank %d joined twice (from %s and %s): every process must pass a different rank", a.info.Rank, byRank[a.info.Rank].conn.RemoteAddr(), a.conn.RemoteAddr()))
			}
			if nranks == 0 && a.info.NRanks > 0 {
				nranks = a.info.NRanks
			}
			if failure != "" {
				writeMsg(a.conn, rootReply{Err: failure, Expired: expired, Left: left})
				a.conn.Close()
				told[a.info.Rank] = true
				if nranks > 0 && len(told) >= nranks {
					return // every rank has its answer
				}
				continue
			}
			byRank[a.info.Rank] = a
			go watchJoined(a, gone, done)
			if len(byRank) == nranks {
				peers := make([]PeerInfo, nranks)
				for r, b := range byRank {
					peers[r] = b.info
				}
				msgs, err := encodeTable(peers)
				if err != nil {
					failAll(fmt.Sprintf("cannot encode the rank table: %v", err))
					return
				}
				tree := newTableTree(peers)
				leader := map[string]int{} // the rank that takes the table for each process
				for _, r := range tree {
					if p := peers[r].Proc; p != "" {
						if _, ok := leader[p]; !ok {
							leader[p] = r
						}
					}
				}
				if bad := orphans(peers, leader); bad != "" {
					failAll(bad)
					return
				}
				for r, b := range byRank {
					reply := rootReply{From: -1}
					if i := tree.pos(r); i >= 0 {
						reply.From = tree.parent(i)
						for _, k := range tree.children(i) {
							reply.Kids = append(reply.Kids, peers[k].Boot)
						}
					} else {
						reply.From, reply.Local = leader[peers[r].Proc], true
					}
					writeMsg(b.conn, reply)
					b.conn.Close()
				}
				var deadline time.Time
				if timeout > 0 {
					deadline = time.Now().Add(timeout)
				}
				ln.Close()
				passOn(-1, tree, peers, msgs, secret, deadline)
				debuglog.Infof(debuglog.Bootstrap, -1, "bootstrap root: all %d ranks joined", nranks)
				return
			}
		case a := <-gone:
			if byRank[a.info.Rank].conn != a.conn {
				continue // answered already
			}
			delete(byRank, a.info.Rank)
			a.conn.Close()
			told[a.info.Rank] = true
			left = failure == ""
			failAll(fmt.Sprintf("rank %d left the rendezvous before every rank had joined (its init timed out or was interrupted, or its process died): start the communicator again", a.info.Rank))
			if len(told) >= nranks {
				return
			}
		case <-expire:
			if failure == "" {
				expired = true
				var missing []string
				for r := 0; r < nranks; r++ {
					if byRank[r].conn == nil {
						missing = append(missing, fmt.Sprint(r))
					}
				}
				failAll(fmt.Sprintf("rendezvous timed out after %s (the init timeout, GOCL_TIMEOUT unless given): %d of %d ranks joined, missing ranks [%s]",
					timeout, len(byRank), nranks, strings.Join(missing, " ")))
			}
			return
		}
	}
}

// orphans names a table no rank can take: a rank that joined without a
// table listener (another rank of its process takes the table for it) where
// no rank of its process has one, or a process with two.
func orphans(peers []PeerInfo, leader map[string]int) string {
	for _, p := range peers {
		switch l, ok := leader[p.Proc]; {
		case p.Boot == "" && !ok:
			return fmt.Sprintf("rank %d joined to take the rank table from another rank of its process, and none has joined to take it", p.Rank)
		case p.Boot != "" && p.Proc != "" && l != p.Rank:
			return fmt.Sprintf("ranks %d and %d both take the rank table for one process", l, p.Rank)
		}
	}
	return ""
}

// watchJoined reports a joined rank whose connection ends before the root
// answers it: a rank sends nothing after its PeerInfo, so a read returns
// only when the rank is gone (or the root closed the connection itself).
func watchJoined(a arrival, gone chan<- arrival, done <-chan struct{}) {
	var b [1]byte
	a.conn.Read(b[:])
	select {
	case gone <- a:
	case <-done:
	}
}

// maxRootHandshakes bounds how far a rank's word raises the root's gate.
const maxRootHandshakes = 1 << 16

// acceptRanks authenticates connections and reads each rank's PeerInfo.
func acceptRanks(ln *net.TCPListener, secret []byte, out chan<- arrival, done <-chan struct{}) {
	g := newGate(0)
	AcceptLoop(ln, false, func(c net.Conn) {
		if !g.enter() {
			c.Close() // too many strangers at once
			return
		}
		c.SetDeadline(time.Now().Add(authTimeout))
		// A stranger still here when the rendezvous ends is cut off then,
		// not at authTimeout.
		stop := cutOffWhen(c, done)
		err := authAccept(c, secret)
		var info PeerInfo
		if err == nil {
			err = readMsg(c, &info)
		}
		stop()
		g.leave()
		if err != nil {
			debuglog.Warnf(debuglog.Bootstrap, -1, "bootstrap root: dropped connection from %s: %v", c.RemoteAddr(), err)
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		g.raise(min(info.NRanks, maxRootHandshakes))
		select {
		case out <- arrival{c, info}:
		case <-done:
			c.Close()
		}
	})
}

// cutOffWhen is the stranger watchdog of a connection still handshaking: when
// done closes, c's deadline becomes now, which unblocks its reads and writes.
// The function it returns stops the watchdog and returns once it is gone, so
// that c can be handed on with no watchdog left to touch it.
func cutOffWhen(c net.Conn, done <-chan struct{}) (stop func()) {
	stopc, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			c.SetDeadline(time.Now())
		case <-stopc:
		}
	}()
	return func() { close(stopc); <-stopped }
}
