package socket_test

import (
	"net"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/transport/socket"
	"gocl/runtime/transport/transporttest"
)

// pair connects two ends over two loopback TCP connections (striping on).
func pair(t *testing.T) (transport.Link, transport.Link) { return pairOf(t, 2) }

// pairOf connects two ends over conns loopback TCP connections.
func pairOf(t *testing.T, conns int) (transport.Link, transport.Link) {
	as, bs := dialPairs(t, conns)
	return socket.New(as, 0, 1), socket.New(bs, 1, 0)
}

// dialPairs connects n loopback TCP connection pairs, closed when tb ends.
func dialPairs(tb testing.TB, n int) (as, bs []net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	for range n {
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			tb.Fatal(err)
		}
		as, bs = append(as, a), append(bs, <-acc)
	}
	tb.Cleanup(func() {
		for i := range as {
			as[i].Close()
			bs[i].Close()
		}
	})
	return as, bs
}

func TestConformance(t *testing.T) { transporttest.Run(t, pair) }

// One connection per peer (GOCL_NSOCKS_PERTHREAD=1): no striping.
func TestConformanceOneConnection(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Link, transport.Link) { return pairOf(t, 1) })
}
