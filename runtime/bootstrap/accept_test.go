package bootstrap

import (
	"bytes"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flaky is a listener whose Accept fails like a process out of file
// descriptors (EMFILE), then like an aborted connection, before it works.
type flaky struct {
	net.Listener
	fails atomic.Int32
}

func (f *flaky) Accept() (net.Conn, error) {
	switch n := f.fails.Add(1); {
	case n <= 6:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	case n <= 9:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.ECONNABORTED}
	}
	return f.Listener.Accept()
}

// A listener that runs out of descriptors, or sees an aborted connection,
// backs off and goes on answering; it ends only when closed.
func TestListenerOutlivesAcceptErrors(t *testing.T) {
	secret := bytes.Repeat([]byte{5}, 32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Listener: ln}
	done := make(chan struct{})
	go func() { Serve(f, 0, secret, func(r Request) any { return r.Kind }); close(done) }()
	var got string
	if err := Ask(ln.Addr().String(), secret, time.Now().Add(10*time.Second), NewRequest("after-emfile", nil), &got); err != nil || got != "after-emfile" {
		t.Fatalf("after 9 failed accepts: %q, %v", got, err)
	}
	ln.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end when its listener closed")
	}
}

// A flood of silent connections (strangers that never handshake) holds at
// most maxHandshakes of them, each for at most authTimeout: the rest are
// closed at once. Once the flood stops, a rank's request is answered at
// once (during it, a request may find the cap full and retry, as the
// agreement and the probes do).
func TestListenerSurvivesAFlood(t *testing.T) {
	secret := bytes.Repeat([]byte{6}, 32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go Serve(ln, 0, secret, func(r Request) any { return r.Kind })
	before := runtime.NumGoroutine()
	const flood = 3 * maxHandshakes
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break // this process's own limit: the flood is big enough
		}
		conns = append(conns, c)
	}
	// The listener closes what is past the cap: reads there end at once.
	closed := 0
	buf := make([]byte, 1)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
		}
	}
	n := len(conns)
	if held := n - closed; held > maxHandshakes {
		t.Errorf("%d silent connections held, more than the cap %d", held, maxHandshakes)
	}
	if g := runtime.NumGoroutine() - before; g > maxHandshakes+50 {
		t.Errorf("%d goroutines for %d silent connections", g, n)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	var got string
	start := time.Now()
	for {
		err := Ask(ln.Addr().String(), secret, time.Now().Add(time.Second), NewRequest("after-flood", nil), &got)
		if err == nil && got == "after-flood" {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("after the flood: %q, %v", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d silent connections, %d closed at once; once they stopped, a request answered in %v", n, closed, time.Since(start))
}
