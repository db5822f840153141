package shm_test

import (
	"net"
	"os"
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/transport/shm"
	"gocl/runtime/transport/transporttest"
)

// tcpPair returns both ends of one loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
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

func pair(t *testing.T) (transport.Link, transport.Link) {
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
