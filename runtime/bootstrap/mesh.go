package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"gocl/runtime/debuglog"
	"gocl/runtime/status"
)

// Mesh opens socks(peer) authenticated TCP connections between this rank
// and every peer (none where it is 0); socks must give both ends of a pair
// the same count. The higher rank dials, the lower accepts on ln; after the
// handshake the dialer names itself (rank, index). conns[p][i] is
// connection i to peer p, in the same order on both sides.
func Mesh(self int, peers []PeerInfo, ln net.Listener, secret []byte,
	socks func(peer int) int, deadline time.Time) ([][]net.Conn, error) {
	n := len(peers)
	conns := make([][]net.Conn, n)
	expect := 0
	for p := 0; p < n; p++ {
		if k := socks(p); p != self && k > 0 {
			conns[p] = make([]net.Conn, k)
			if p > self {
				expect += k
			}
		}
	}
	closeAll := func() {
		for _, cs := range conns {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
	}

	accepted := make(chan error, 1)
	go func() { accepted <- acceptPeers(self, ln, secret, conns, expect, deadline) }()

	var dialErr error
	for p := 0; p < self && dialErr == nil; p++ {
		for i := 0; i < len(conns[p]); i++ {
			c, err := dial(peers[p].Addr, secret, deadline, false)
			if err == nil {
				var hello [8]byte
				binary.LittleEndian.PutUint32(hello[0:], uint32(self))
				binary.LittleEndian.PutUint32(hello[4:], uint32(i))
				_, err = c.Write(hello[:])
			}
			if err != nil {
				dialErr = status.Errorf(status.RemoteError, "rank %d: cannot connect to rank %d at %s: %v", self, p, peers[p].Addr, err)
				break
			}
			conns[p][i] = c
		}
	}
	if dialErr != nil {
		ln.Close() // stops the acceptor
		<-accepted
		closeAll()
		return nil, dialErr
	}
	if err := <-accepted; err != nil {
		closeAll()
		return nil, err
	}
	return conns, nil
}

// acceptPeers takes expect connections from the higher ranks. Each accepted
// connection is greeted on its own goroutine, so a stranger that connects
// and stays silent (or dribbles bytes) holds no one up: it is dropped at
// authTimeout, or when the mesh is complete.
func acceptPeers(self int, ln net.Listener, secret []byte, conns [][]net.Conn, expect int, deadline time.Time) error {
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(deadline)
	}
	type greeted struct {
		c         net.Conn
		peer, idx int
		err       error
	}
	results := make(chan greeted)
	failed := make(chan error, 1)
	done, acceptorGone := make(chan struct{}), make(chan struct{})
	defer func() {
		// The acceptor must be gone before we return: the listener then
		// answers liveness probes (Serve), and a leftover Accept here would
		// take those connections and drop them.
		close(done)
		if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
			d.SetDeadline(time.Now())
		}
		<-acceptorGone
	}()
	go func() { // ends when ln is closed or its deadline passes
		defer close(acceptorGone)
		g := newGate(2 * expect) // the job's own sockets all fit in it
		err := AcceptLoop(ln, false, func(c net.Conn) {
			if !g.enter() {
				c.Close() // too many strangers at once
				return
			}
			peer, idx, err := greet(c, secret, time.Now().Add(authTimeout), done)
			g.leave()
			select {
			case results <- greeted{c, peer, idx, err}:
			case <-done:
				debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s: not authenticated when the mesh was complete", c.RemoteAddr())
				c.Close()
			}
		})
		select {
		case failed <- err:
		default:
		}
	}()
	for got := 0; got < expect; {
		select {
		case g := <-results:
			err := g.err
			if err == nil && (g.peer <= self || g.peer >= len(conns) || g.idx >= len(conns[g.peer]) || conns[g.peer][g.idx] != nil) {
				err = fmt.Errorf("unexpected connection as rank %d socket %d", g.peer, g.idx)
			}
			if err != nil {
				debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s: %v", g.c.RemoteAddr(), err)
				g.c.Close()
				continue
			}
			conns[g.peer][g.idx] = g.c
			got++
		case err := <-failed:
			var missing []int
			for p := self + 1; p < len(conns); p++ {
				for _, x := range conns[p] {
					if x == nil {
						missing = append(missing, p)
						break
					}
				}
			}
			if IsTimeout(err) {
				return status.Errorf(status.Timeout, "rank %d: ranks %v timed out: did not connect within the timeout (GOCL_TIMEOUT, or the timeout given at init)", self, missing)
			}
			return status.Errorf(status.RemoteError, "rank %d: accepting connections from ranks %v failed: %v", self, missing, err)
		}
	}
	return nil
}

// greet authenticates an accepted connection and reads who it is, by the
// time given. A stranger still greeting when done closes is cut off there.
func greet(c net.Conn, secret []byte, by time.Time, done <-chan struct{}) (peer, idx int, err error) {
	c.SetDeadline(by)
	stop := cutOffWhen(c, done) // unblocks the reads below
	defer func() {
		stop() // the watcher is gone before c is handed on
		c.SetDeadline(time.Time{})
	}()
	if err := authAccept(c, secret); err != nil {
		return 0, 0, err
	}
	var hello [8]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return 0, 0, err
	}
	return int(binary.LittleEndian.Uint32(hello[0:])), int(binary.LittleEndian.Uint32(hello[4:])), nil
}

// AskLink is the request by which a rank hands its peer one of their
// link's TCP connections when the pair connects on first use
// (GOCL_RUNTIME_CONNECT): Mesh's hello, over the listener that answers
// probes, which then hands the connection over (Takeover).
const AskLink = "link"

// LinkHello names a connection made on first use: the dialing rank and the
// connection's index among the pair's.
type LinkHello struct {
	Rank  int `json:"rank"`
	Index int `json:"index"`
}

// ErrCrossed is DialLink's answer when the peer turned the connection
// away because the pair is being connected the other way: the peer is the
// higher rank and dials this one at the same time (or has done so).
var ErrCrossed = errors.New("the pair is being connected from the other end")

// LinkReply answers AskLink.
type LinkReply struct {
	Err     string `json:"err,omitempty"`
	Crossed bool   `json:"crossed,omitempty"` // ErrCrossed
}

// DialLink opens connection idx of self's link to the rank listening at
// addr: authenticated, announced with AskLink, and plain TCP once the
// listener has taken it. A refusal is ErrCrossed or an error naming why.
func DialLink(addr string, secret []byte, deadline time.Time, self, idx int) (net.Conn, error) {
	s, err := Dial(addr, secret, deadline)
	if err != nil {
		return nil, err
	}
	var reply LinkReply
	if err := s.Ask(deadline, NewRequest(AskLink, LinkHello{Rank: self, Index: idx}), &reply); err != nil {
		s.Close()
		return nil, err
	}
	switch {
	case reply.Crossed:
		s.Close()
		return nil, ErrCrossed
	case reply.Err != "":
		s.Close()
		return nil, errors.New(reply.Err)
	}
	s.c.SetDeadline(time.Time{})
	return s.c, nil
}
