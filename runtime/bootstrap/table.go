package bootstrap

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"time"

	"gocl/runtime/debuglog"
	"gocl/runtime/status"
)

// The rank table goes down a binary tree, not from the root to every rank:
// the root sends it to the first two ranks of the tree (tableTree: one rank
// per process, the process's other ranks share its copy), and the rank at
// position i passes it on to positions 2i+2 and 2i+3. The root's traffic is
// then O(N) (two tables, and a short answer naming two addresses per rank)
// where a table per rank was O(N²) and capped
// N at the message limit; a rank sends at most two tables; the table arrives
// after log2(N) hops. It travels in messages of at most tableChunk entries,
// so no message grows with N. (NCCL gives each rank its ring neighbour and
// allgathers around the ring: O(N) hops.)
//
// Faults: a child that cannot be reached (dead, or stopped before its
// handshake) is skipped: its parent sends the table to the child's children
// instead, so one rank's death costs its subtree nothing here (it is named
// later, when its peers connect to it). A rank whose table does not arrive
// whole (its parent died while sending) fails, and tells its children (the
// root's answer gave their addresses), which tell theirs: nobody below waits
// out the timeout.

// tableChunk is the most entries one message of the table carries (about
// 300 bytes each in JSON: well under maxMsg).
var tableChunk = 512

// tableMsg is one message from a parent to a child: entries of the table,
// in order, or why the table will not come.
type tableMsg struct {
	Err   string     `json:"err,omitempty"`
	Peers []PeerInfo `json:"peers,omitempty"`
}

// tableTree is the order the table goes over the network: the ranks that
// take it from their parent, one per process (the one with a table
// listener; the others take its copy in memory, shared.go), in rank order.
// Position i passes it to positions 2i+2 and 2i+3, the root (position -1)
// to 0 and 1.
type tableTree []int

func newTableTree(peers []PeerInfo) tableTree {
	var t tableTree
	for _, p := range peers {
		if p.Boot != "" {
			t = append(t, p.Rank)
		}
	}
	return t
}

// pos is rank r's position in t (-1: the root, or a rank that takes the
// table in memory).
func (t tableTree) pos(r int) int {
	if i, ok := slices.BinarySearch(t, r); ok {
		return i
	}
	return -1
}

// children are the ranks position i sends the table to.
func (t tableTree) children(i int) []int {
	var out []int
	for _, c := range []int{2*i + 2, 2*i + 3} {
		if c < len(t) {
			out = append(out, t[c])
		}
	}
	return out
}

// parent is the rank that sends position i the table (-1: the root).
func (t tableTree) parent(i int) int {
	if i < 2 {
		return -1
	}
	return t[(i-2)>>1]
}

// encodeTable cuts peers into the messages that carry it, encoded once for
// every receiver.
func encodeTable(peers []PeerInfo) ([][]byte, error) {
	var out [][]byte
	for i := 0; i < len(peers); i += tableChunk {
		b, err := encodeMsg(tableMsg{Peers: peers[i:min(i+tableChunk, len(peers))]})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// errAbove is a failure above this rank in the tree, passed down.
type errAbove struct{ msg string }

func (e errAbove) Error() string { return e.msg }

// readTable reads the n entries of the table from c, and the messages as
// they came (to pass on), and checks that entry i is rank i of n: a table
// that is short, long or out of order is an error, not a wrong topology.
func readTable(c net.Conn, n int) ([]PeerInfo, [][]byte, error) {
	peers := make([]PeerInfo, 0, n)
	var msgs [][]byte
	for len(peers) < n {
		raw, err := readRawMsg(c)
		var m tableMsg
		if err == nil {
			err = json.Unmarshal(raw[4:], &m)
		}
		if err != nil {
			return nil, nil, err
		}
		if m.Err != "" {
			return nil, nil, errAbove{m.Err}
		}
		if len(m.Peers) == 0 || len(m.Peers) > tableChunk || len(peers)+len(m.Peers) > n {
			return nil, nil, fmt.Errorf("a message of the rank table has %d entries after %d of %d", len(m.Peers), len(peers), n)
		}
		peers = append(peers, m.Peers...)
		msgs = append(msgs, raw)
	}
	for i, p := range peers {
		if p.Rank != i || p.NRanks != n {
			return nil, nil, fmt.Errorf("entry %d of the rank table is rank %d of %d", i, p.Rank, p.NRanks)
		}
	}
	return peers, msgs, nil
}

// receiveTable takes the table on ln: from the first connection that proves
// the secret (the parent, or an ancestor standing in for a parent it could
// not reach); a stranger's is dropped. A table that breaks off is an error
// at once, naming the sender.
// from is the rank expected to send it (-1: the root), for the error.
func receiveTable(self, from, n int, ln *net.TCPListener, secret []byte, deadline time.Time) ([]PeerInfo, [][]byte, error) {
	ln.SetDeadline(deadline)
	type sender struct {
		c    net.Conn
		rank int
	}
	done := make(chan struct{})
	got := make(chan sender, 1)
	ended := make(chan error, 1)
	go func() {
		g := newGate(0)
		ended <- AcceptLoop(ln, false, func(c net.Conn) {
			if !g.enter() {
				c.Close()
				return
			}
			// The job's own ranks are given until the deadline (dial's patient
			// side); a stranger holds a slot until the table arrives at most.
			rank, _, err := greet(c, secret, deadline, done)
			g.leave()
			if err != nil {
				debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s to the rank table's listener: %v", c.RemoteAddr(), err)
				c.Close()
				return
			}
			select {
			case got <- sender{c, helloRank(rank)}:
			default:
				c.Close()
			}
		})
	}()
	defer close(done)
	var s sender
	select {
	case s = <-got:
	case err := <-ended:
		select {
		case s = <-got:
		default:
			if IsTimeout(err) {
				return nil, nil, status.Errorf(status.Timeout, "rank %d: the rank table did not come from %s (its parent in the bootstrap tree) within the timeout (GOCL_TIMEOUT, or the timeout given at init): it failed or is stuck in its init", self, rankName(from))
			}
			return nil, nil, status.Errorf(status.RemoteError, "rank %d: waiting for the rank table failed: %v", self, err)
		}
	}
	ln.Close() // nobody else is expected
	defer s.c.Close()
	s.c.SetDeadline(deadline)
	peers, msgs, err := readTable(s.c, n)
	var above errAbove
	switch {
	case err == nil:
		return peers, msgs, nil
	case errors.As(err, &above):
		return nil, nil, status.Errorf(status.RemoteError, "%s", above.msg)
	case IsTimeout(err):
		return nil, nil, status.Errorf(status.Timeout, "rank %d: the rank table from %s did not arrive whole within the timeout (GOCL_TIMEOUT, or the timeout given at init)", self, rankName(s.rank))
	}
	return nil, nil, status.Errorf(status.RemoteError, "rank %d: reading the rank table from %s failed: %v (it failed in its init)", self, rankName(s.rank), err)
}

// helloRank reads the rank a hello names (the root is -1).
func helloRank(v int) int { return int(int32(uint32(v))) }

func rankName(r int) string {
	if r < 0 {
		return "the rendezvous root"
	}
	return fmt.Sprintf("rank %d", r)
}

// sendTo dials addr and sends it msgs as rank self. A refused connection is
// not retried: the listener was up before its rank joined, so the rank is
// gone.
func sendTo(self int, addr string, msgs [][]byte, secret []byte, deadline time.Time) error {
	if deadline.IsZero() { // no init timeout: a stopped child still must not hold a sender forever
		deadline = time.Now().Add(time.Minute)
	}
	c, err := dialOnce(addr, secret, deadline)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	var hello [8]byte
	binary.LittleEndian.PutUint32(hello[0:], uint32(int32(self)))
	if _, err := c.Write(hello[:]); err != nil {
		return err
	}
	for _, m := range msgs {
		if _, err := c.Write(m); err != nil {
			return err
		}
	}
	return nil
}

// passOn sends the table to the children of self (a rank, or -1: the root)
// in the tree, at once, and to the children of a child it cannot reach. It
// fails nobody: a child that is gone is named when its peers connect to it.
func passOn(self int, tree tableTree, peers []PeerInfo, msgs [][]byte, secret []byte, deadline time.Time) {
	passOnFrom(self, tree.pos(self), tree, peers, msgs, secret, deadline) // the root's position is -1, as pos(-1)
}

// passOnFrom sends as self the table to position at's children.
func passOnFrom(self, at int, tree tableTree, peers []PeerInfo, msgs [][]byte, secret []byte, deadline time.Time) {
	kids := tree.children(at)
	done := make(chan struct{}, len(kids))
	for _, k := range kids {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := sendTo(self, peers[k].Boot, msgs, secret, deadline); err != nil {
				debuglog.Warnf(debuglog.Bootstrap, self, "cannot pass the rank table on to rank %d at %s (%v): passing it to rank %d's children", k, peers[k].Boot, err, k)
				passOnFrom(self, tree.pos(k), tree, peers, msgs, secret, deadline)
			}
		}()
	}
	for range kids {
		<-done
	}
}

// abortBelow tells self's children (at kids, from the root's answer) why the
// table will not come; each tells its own.
func abortBelow(self int, kids []string, why error, secret []byte, deadline time.Time) {
	msg, err := encodeMsg(tableMsg{Err: why.Error()})
	if err != nil {
		return
	}
	if soon := time.Now().Add(authTimeout); deadline.IsZero() || deadline.After(soon) {
		deadline = soon // a word to a live child takes no longer
	}
	for _, addr := range kids {
		go sendTo(self, addr, [][]byte{msg}, secret, deadline)
	}
}

// dialOnce is dial for a listener known to be up: it retries only a
// listener that turned the connection away.
func dialOnce(addr string, secret []byte, deadline time.Time) (net.Conn, error) {
	c, err := dial(addr, secret, deadline, true)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%s refuses connections", addr)
	}
	return c, err
}
