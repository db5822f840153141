package bootstrap

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Listeners that outlive abuse. A flood of connections that runs the
// process out of file descriptors makes Accept fail with EMFILE (or ENFILE,
// ENOBUFS, ENOMEM); a peer that resets before being accepted makes it fail
// with ECONNABORTED. None of these ends the listener: the loop backs off
// and goes on, so the root, a rank's listener (probes, the shrink
// agreement, revoke, status) and the metrics endpoint answer again once the
// flood is gone. And a listener holds at most maxHandshakes connections
// that have not yet proved the secret: the excess is closed at once, so a
// stranger's connections cost a bounded number of descriptors and
// goroutines, each for at most authTimeout.

// maxHandshakes bounds a listener's unauthenticated connections. A job's
// own ranks handshake a few at a time (a rank's listener: one per peer at
// most at once; the root: one per rank), far below it.
const maxHandshakes = 256

// authTimeout bounds a handshake so a silent stranger cannot hold a slot
// for long.
const authTimeout = 5 * time.Second

// temporary says whether an Accept error leaves the listener usable.
func temporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// backoff waits after a temporary Accept error: 5 ms doubling to 500 ms,
// reset by the next success.
type backoff time.Duration

func (b *backoff) wait() {
	d := max(time.Duration(*b)*2, 5*time.Millisecond)
	*b = backoff(min(d, 500*time.Millisecond))
	time.Sleep(time.Duration(*b))
}

func (b *backoff) reset() { *b = 0 }

// AcceptLoop accepts connections on ln and hands each to handle on its own
// goroutine until ln is closed (or, when ln has a deadline, it passes: the
// error is returned). Temporary errors back off and go on.
func AcceptLoop(ln net.Listener, retryTimeouts bool, handle func(net.Conn)) error {
	var b backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			switch {
			case temporary(err):
				b.wait()
				continue
			case retryTimeouts && errors.As(err, &ne) && ne.Timeout():
				continue
			}
			return err
		}
		b.reset()
		go handle(c)
	}
}

// gate caps the connections still handshaking on one listener.
type gate struct{ in, limit atomic.Int64 }

func newGate(n int) *gate {
	g := &gate{}
	g.limit.Store(int64(max(n, maxHandshakes)))
	return g
}

// enter takes a slot, or says the listener is full (close the connection).
func (g *gate) enter() bool {
	if g.in.Add(1) > g.limit.Load() {
		g.in.Add(-1)
		return false
	}
	return true
}

func (g *gate) leave() { g.in.Add(-1) }

// raise lets up to n handshake at once: the root, once a rank has proved
// the secret and said how many ranks will come, lets them all in at once
// rather than turning most away to dial again (4096 in-process ranks: a
// third of the rendezvous's time).
func (g *gate) raise(n int) {
	for {
		old := g.limit.Load()
		if int64(n) <= old || g.limit.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}
