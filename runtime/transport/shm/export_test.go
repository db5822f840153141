package shm

import (
	"net"
	"os"
	"testing"
	"time"

	"gocl/runtime/transport"
)

// For the external tests (package shm_test).
var (
	ConnectPair = connectPair
	TCPPair     = tcpPair
)

// connectPair connects two links of this process over a loopback TCP
// connection, the ends offering a and b.
func connectPair(t testing.TB, a, b Options) (transport.Link, transport.Link) {
	ca, cb := tcpPair(t)
	dl := time.Now().Add(10 * time.Second)
	type res struct {
		l   transport.Link
		err error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := Connect(cb, 1, 0, os.Getpid(), b, dl)
		ch <- res{l, err}
	}()
	la, err := Connect(ca, 0, 1, os.Getpid(), a, dl)
	r := <-ch
	if err != nil || r.err != nil {
		t.Fatalf("connect: %v / %v", err, r.err)
	}
	return la, r.l
}

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

// Unmapped reports whether Close has unmapped l's segments.
func Unmapped(l transport.Link) bool { return l.(*link).users.Load() < 0 }
