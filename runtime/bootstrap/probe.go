package bootstrap

import (
	"errors"
	"net"
	"time"

	"gocl/runtime/debuglog"
)

// After init each rank keeps its bootstrap listener open and answers
// liveness probes on it: a peer that timed out waiting asks what this rank
// is doing, on a path that does not depend on the links, so a rank whose
// process is stopped (or hung outside gocl) is told apart from one that
// is itself waiting for someone else.

// Serve answers every authenticated connection on ln with one message,
// answer()'s value, until ln is closed. Strangers are logged and dropped.
func Serve(ln net.Listener, self int, secret []byte, answer func() any) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Time{}) // the mesh's accept deadline
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		go func() {
			defer func() { recover() }()
			defer c.Close()
			c.SetDeadline(time.Now().Add(authTimeout))
			if err := authAccept(c, secret); err != nil {
				debuglog.Warnf(debuglog.Bootstrap, self, "dropped connection from %s: %v", c.RemoteAddr(), err)
				return
			}
			writeMsg(c, answer())
		}()
	}
}

// Ask reads the answer of the rank serving at addr into reply. It does not
// retry: a refused connection is an answer too (the process is gone).
func Ask(addr string, secret []byte, deadline time.Time, reply any) error {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if err := authDial(c, secret); err != nil {
		return err
	}
	return readMsg(c, reply)
}
