package shm_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/transport/shm"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
)

// tcpPair returns both ends of one loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return a, <-acc
}

func pair(t *testing.T) (transport.Link, transport.Link) { return connect(t) }

func connect(t testing.TB) (transport.Link, transport.Link) {
	ca, cb := tcpPair(t)
	dl := time.Now().Add(10 * time.Second)
	type res struct {
		l   transport.Link
		err error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := shm.Connect(cb, 1, 0, os.Getpid(), shm.Options{}, dl)
		ch <- res{l, err}
	}()
	a, err := shm.Connect(ca, 0, 1, os.Getpid(), shm.Options{}, dl)
	r := <-ch
	if err != nil || r.err != nil {
		t.Fatalf("connect: %v / %v", err, r.err)
	}
	return a, r.l
}

func TestConformance(t *testing.T) { transporttest.Run(t, pair) }

// BenchmarkPingPong is one 8-byte frame each way per iteration.
func BenchmarkPingPong(b *testing.B) {
	a, c := connect(b)
	defer a.Close()
	defer c.Close()
	h := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 1}
	buf := make([]byte, 8)
	done := make(chan struct{})
	go func() {
		rb := make([]byte, 8)
		for range b.N {
			c.RecvInto(h, rb)
			c.Send(h, rb)
		}
		close(done)
	}()
	b.ResetTimer()
	for range b.N {
		a.Send(h, buf)
		a.RecvInto(h, buf)
	}
	<-done
}

// When one side cannot map the other's segment, both sides get
// ErrUnavailable and the control connection is left clean for a fallback.
func TestUnavailableFallsBackTogether(t *testing.T) {
	ca, cb := tcpPair(t)
	defer ca.Close()
	defer cb.Close()
	dl := time.Now().Add(10 * time.Second)
	ch := make(chan error, 1)
	go func() {
		_, err := shm.Connect(cb, 1, 0, 1<<30, shm.Options{}, dl) // no such process: open fails here
		ch <- err
	}()
	_, errA := shm.Connect(ca, 0, 1, os.Getpid(), shm.Options{}, dl)
	errB := <-ch
	if !errors.Is(errA, shm.ErrUnavailable) || !errors.Is(errB, shm.ErrUnavailable) {
		t.Fatalf("want ErrUnavailable on both sides, got %v / %v", errA, errB)
	}
	go ca.Write([]byte("next"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(cb, buf); err != nil || string(buf) != "next" {
		t.Fatalf("control connection not clean after the fallback: %q, %v", buf, err)
	}
}
