package socket_test

import (
	"net"
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/transport/socket"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
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

// A peer that sent part of a frame and closed, both before the receive
// began: the receive fails at once. The netpoller is edge-triggered, and the
// end came with the data, so a receiver that waited after a short read
// instead of reading on to EAGAIN waited out its whole deadline.
func TestPeerClosedMidFrameFailsAtOnce(t *testing.T) {
	as, bs := dialPairs(t, 1)
	b := socket.New(bs, 1, 0)
	defer b.Close()
	h := wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Seq: 3, Count: 1 << 18, Len: 1 << 20}
	var hb [wire.HeaderSize]byte
	h.Encode(hb[:])
	if _, err := (&net.Buffers{hb[:], make([]byte, 1000)}).WriteTo(as[0]); err != nil {
		t.Fatal(err)
	}
	as[0].Close()
	time.Sleep(50 * time.Millisecond) // data and FIN are both there before the receive
	b.SetDeadline(time.Now().Add(20 * time.Second))
	want := wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Seq: 3, Count: 1 << 18}
	start := time.Now()
	err := b.RecvInto(&want, make([]byte, 1<<20))
	if err == nil {
		t.Fatal("a frame cut short was received")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the receive failed only after %v (%v)", d, err)
	}
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindPeerClosed {
		t.Fatalf("want the peer's lost connection, got %v", err)
	}
}

func TestChunkFor(t *testing.T) {
	for _, tc := range []struct {
		gbit float64
		want int
	}{{0.1, 256 << 10}, {1, 256 << 10}, {2, 256 << 10}, {4, 512 << 10}, {10, 2 << 20}, {25, socket.Chunk}, {100, socket.Chunk}} {
		if got := socket.ChunkFor(tc.gbit / 8); got != tc.want {
			t.Errorf("ChunkFor(%g Gbit/s) = %d, want %d", tc.gbit, got, tc.want)
		}
	}
}
