package bootstrap

import (
	"encoding/json"
	"net"
	"sync"
	"time"

	"gocl/runtime/debuglog"
)

// After init each rank keeps its bootstrap listener open and answers
// requests on it, on a path that does not depend on the links: liveness
// probes (a peer that timed out waiting asks what this rank is doing, so a
// rank whose process is stopped, or hung outside gocl, is told apart from
// one that is itself waiting for someone else) and the survivors'
// agreement when the communicator shrinks.

// ProbeWait bounds one request to a rank's listener (a liveness probe, an
// agreement message) in a communicator of that timeout: long enough for a
// loaded host to answer, short next to the timeout that started it.
func ProbeWait(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 200*time.Millisecond), time.Second)
}

// AskProbe asks a rank's listener for its liveness: a peer that timed out
// following the wait chain, and the heartbeat.
const AskProbe = "probe"

// Request is one question to a rank's listener: Kind names it, Body is
// the kind's own JSON.
type Request struct {
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body,omitempty"`
}

// NewRequest makes a request of kind with body (nil: none).
func NewRequest(kind string, body any) Request {
	r := Request{Kind: kind}
	if body != nil {
		r.Body, _ = json.Marshal(body)
	}
	return r
}

// Serve answers every authenticated connection on ln: it reads one
// Request and writes handle's answer, both sealed (seal.go), until ln is
// closed. Strangers are
// logged and dropped. handle may block (a shrink's coordinator answers when
// it has decided); it bounds its own wait.
func Serve(ln net.Listener, self int, secret []byte, handle func(Request) any) {
	serve(ln, self, secret, handle, true)
}

// ServeUnsealed is Serve without sealing, for the status endpoint, whose
// clients (gocl status, in Python's standard library) speak the handshake
// and plain messages; its requests carry no secret of the job.
func ServeUnsealed(ln net.Listener, self int, secret []byte, handle func(Request) any) {
	serve(ln, self, secret, handle, false)
}

func serve(ln net.Listener, self int, secret []byte, handle func(Request) any, sealing bool) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Time{}) // the mesh's accept deadline
	}
	g := newGate(0)
	// Sessions outlive their accept: closing the listener (the communicator
	// is released) ends them too, so an asker hears that it is gone.
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	closed := false
	defer func() {
		mu.Lock()
		closed = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	AcceptLoop(ln, true, func(c net.Conn) {
		defer func() { recover() }()
		mu.Lock()
		if closed {
			mu.Unlock()
			c.Close()
			return
		}
		open[c] = true
		mu.Unlock()
		defer func() {
			if c == nil {
				return // handed over
			}
			mu.Lock()
			delete(open, c)
			mu.Unlock()
			c.Close()
		}()
		if !g.enter() {
			return // too many strangers at once
		}
		c.SetDeadline(time.Now().Add(authTimeout))
		key, err := authAcceptKey(c, secret)
		if err != nil {
			g.leave()
			debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s: %v", c.RemoteAddr(), err)
			return
		}
		var req Request
		var s *sealed
		if sealing {
			if s, err = newSealed(key, false); err == nil {
				err = s.read(c, &req)
			}
		} else {
			err = readMsg(c, &req)
		}
		g.leave()
		if err != nil {
			debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s: %v", c.RemoteAddr(), err)
			return
		}
		c.SetDeadline(time.Time{}) // an authenticated peer; handle bounds its own wait
		if !sealing {
			writeMsg(c, handle(req))
			return
		}
		// A sealed connection may carry more requests (a Session): answer
		// each until the asker closes it, or hand it over.
		for err == nil {
			ans := handle(req)
			if t, ok := ans.(Takeover); ok {
				if err = s.write(c, t.Reply); err == nil {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					t.Take(c)
					c = nil // the deferred close must not close it now
				}
				return
			}
			if err = s.write(c, ans); err == nil {
				req = Request{}
				err = s.read(c, &req)
			}
		}
	})
}

// Takeover is a handler's answer that ends the request loop: Serve writes
// Reply, then hands the connection to Take, which owns it from then on
// (a link's connection made on first use: DialLink).
type Takeover struct {
	Reply any
	Take  func(net.Conn)
}

// Ask sends req to the rank serving at addr and reads its answer into
// reply. It does not retry: a refused connection is an answer too (the
// process is gone, or its communicator was freed).
func Ask(addr string, secret []byte, deadline time.Time, req Request, reply any) error {
	s, err := Dial(addr, secret, deadline)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Ask(deadline, req, reply)
}

// Session is one authenticated, sealed connection to a rank's listener that
// carries requests one after another (heartbeats: no handshake, no new
// socket per question). One goroutine uses it at a time.
type Session struct {
	c net.Conn
	s *sealed
}

// Dial opens a session with the rank serving at addr, authenticated before
// deadline.
func Dial(addr string, secret []byte, deadline time.Time) (*Session, error) {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(deadline)
	key, err := authDialKey(c, secret)
	if err == nil {
		var s *sealed
		if s, err = newSealed(key, true); err == nil {
			return &Session{c: c, s: s}, nil
		}
	}
	c.Close()
	return nil, err
}

// Ask sends req and reads the answer into reply before deadline. After an
// error the session is unusable: close it.
func (s *Session) Ask(deadline time.Time, req Request, reply any) error {
	s.c.SetDeadline(deadline)
	if err := s.s.write(s.c, req); err != nil {
		return err
	}
	return s.s.read(s.c, reply)
}

// Close ends the session.
func (s *Session) Close() error { return s.c.Close() }
