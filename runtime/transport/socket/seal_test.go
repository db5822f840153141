package socket_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/transport/socket"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
)

var testSecret = bytes.Repeat([]byte{0x5a}, 32)

// connectPair runs Connect on both ends at once (the hello is an exchange).
func connectPair(tb testing.TB, as, bs []net.Conn, oa, ob socket.Options) (a, b transport.Link, ea, eb error) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a, ea = socket.Connect(as, 0, 1, oa, deadline) }()
	go func() { defer wg.Done(); b, eb = socket.Connect(bs, 1, 0, ob, deadline) }()
	wg.Wait()
	return a, b, ea, eb
}

func sealedPair(conns int) transporttest.Pair {
	return func(t *testing.T) (transport.Link, transport.Link) {
		as, bs := dialPairs(t, conns)
		o := socket.Options{Encrypt: true, Secret: testSecret}
		a, b, ea, eb := connectPair(t, as, bs, o, o)
		if ea != nil || eb != nil {
			t.Fatal(ea, eb)
		}
		return a, b
	}
}

// The whole Link contract holds over encrypted links, striped and not.
func TestSealedConformance(t *testing.T) { transporttest.Run(t, sealedPair(2)) }

func TestSealedConformanceOneConnection(t *testing.T) {
	transporttest.Run(t, sealedPair(1))
}

// The plain path through Connect (the hello, then the unchanged link).
func TestConnectPlainConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Link, transport.Link) {
		as, bs := dialPairs(t, 2)
		a, b, ea, eb := connectPair(t, as, bs, socket.Options{}, socket.Options{})
		if ea != nil || eb != nil {
			t.Fatal(ea, eb)
		}
		return a, b
	})
}

// One end encrypting and the other not fails Connect on both ends with a
// message naming the setting and the peer, at once (no garbage, no hang).
func TestSealedSettingMismatch(t *testing.T) {
	for _, enc := range []bool{true, false} {
		as, bs := dialPairs(t, 1)
		start := time.Now()
		a, b, ea, eb := connectPair(t, as, bs, socket.Options{Encrypt: enc, Secret: testSecret}, socket.Options{Encrypt: !enc, Secret: testSecret})
		if a != nil || b != nil {
			t.Fatalf("a pair whose ends disagree on GOCL_SOCKET_ENCRYPT connected")
		}
		for r, err := range []error{ea, eb} {
			if err == nil || !strings.Contains(err.Error(), "GOCL_SOCKET_ENCRYPT") || !strings.Contains(err.Error(), "rank "+string(rune('1'-r))) {
				t.Errorf("rank %d: %v", r, err)
			}
			if status.CodeOf(err) != status.InvalidUsage {
				t.Errorf("rank %d: code %v, want invalid usage", r, status.CodeOf(err))
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the mismatch took %v to show", d)
		}
	}
}

// proxyPairs connects n connection pairs through a man in the middle that
// passes a's bytes to b through alter (called with the connection index,
// the offset of buf in that stream, and the bytes, which it may change).
func proxyPairs(tb testing.TB, n int, alter func(conn int, off int64, buf []byte)) (as, bs []net.Conn) {
	tb.Helper()
	ms, bs := dialPairs(tb, n) // ms: the proxy's end towards b
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	for i := range n {
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			tb.Fatal(err)
		}
		pa := <-acc // the proxy's end towards a
		as = append(as, a)
		tb.Cleanup(func() { a.Close(); pa.Close() })
		go func() { // a -> b, altered
			buf := make([]byte, 32<<10)
			var off int64
			for {
				k, err := pa.Read(buf)
				if k > 0 {
					alter(i, off, buf[:k])
					off += int64(k)
					if _, err := ms[i].Write(buf[:k]); err != nil {
						return
					}
				}
				if err != nil {
					ms[i].Close()
					return
				}
			}
		}()
		go func() { io.Copy(pa, ms[i]); pa.Close() }() // b -> a, as is
	}
	return as, bs
}

// flipAt flips one bit at offset at of connection 0's stream a -> b.
func flipAt(at int64) func(int, int64, []byte) {
	return func(conn int, off int64, buf []byte) {
		if conn == 0 && at >= off && at < off+int64(len(buf)) {
			buf[at-off] ^= 0x10
		}
	}
}

// A bit flipped in flight, in the header record or in any payload record,
// fails the receive with the error naming the sender (errors.As finds the
// transport error and the TamperError), and no altered byte reaches dst.
func TestSealedTamperedInFlight(t *testing.T) {
	const hello = 42 // the link hello precedes the records
	const hdr = wire.HeaderSize + 16
	const size = 3*socket.SealRecord + 1000
	for _, tc := range []struct {
		name string
		at   int64
	}{
		{"header", hello + 10},
		{"header tag", hello + hdr - 1},
		{"first record", hello + hdr + 5},
		{"third record", hello + hdr + 2*(socket.SealRecord+16) + 77},
		{"last tag", hello + hdr + 3*(socket.SealRecord+16) + 1000 + 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, bs := proxyPairs(t, 1, flipAt(tc.at))
			o := socket.Options{Encrypt: true, Secret: testSecret}
			a, b, ea, eb := connectPair(t, as, bs, o, o)
			if ea != nil || eb != nil {
				t.Fatal(ea, eb)
			}
			defer a.Close()
			defer b.Close()
			a.SetDeadline(time.Now().Add(10 * time.Second))
			b.SetDeadline(time.Now().Add(10 * time.Second))
			msg := bytes.Repeat([]byte{0xaa}, size)
			h := func() *wire.Header {
				return &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Seq: 1, Count: size}
			}
			go a.Send(h(), msg)
			dst := make([]byte, size)
			err := b.RecvInto(h(), dst)
			if err == nil {
				t.Fatal("a frame altered in flight was received")
			}
			var te *socket.TamperError
			if !errors.As(err, &te) || te.Peer != 0 || te.Self != 1 {
				t.Fatalf("want a TamperError naming rank 0, got %v", err)
			}
			if e := transport.ErrorOf(err); e == nil || e.Peer != 0 {
				t.Fatalf("want a transport error naming rank 0, got %v", err)
			}
			if !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "altered") {
				t.Fatalf("the message does not say what happened: %v", err)
			}
			for i, v := range dst {
				if v != 0 && v != 0xaa {
					t.Fatalf("byte %d of the destination is %#x: altered data reached the caller", i, v)
				}
			}
			// the link is closed: nothing after it is trusted
			if err := b.RecvInto(h(), dst); err == nil {
				t.Fatal("a receive after the tampered frame succeeded")
			}
		})
	}
}

// sealedOverProxy connects an encrypted pair through proxyPairs(n, alter).
func sealedOverProxy(t *testing.T, n int, alter func(int, int64, []byte)) (a, b transport.Link) {
	as, bs := proxyPairs(t, n, alter)
	o := socket.Options{Encrypt: true, Secret: testSecret}
	a, b, ea, eb := connectPair(t, as, bs, o, o)
	if ea != nil || eb != nil {
		t.Fatal(ea, eb)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	return a, b
}

func wantTamper(t *testing.T, err error, what string) {
	t.Helper()
	var te *socket.TamperError
	if !errors.As(err, &te) || te.Peer != 0 || te.Self != 1 {
		t.Fatalf("%s: want a TamperError naming rank 0, got %v", what, err)
	}
}

// A frame recorded in flight and played again in place of a later one
// (same size, same connection: the bytes are genuine) does not open: the
// record's counter is not the connection's next one.
func TestSealedReplayedFrame(t *testing.T) {
	const hello, size = 42, 1000
	const frame = wire.HeaderSize + 16 + size + 16
	var first []byte
	a, b := sealedOverProxy(t, 1, func(_ int, off int64, buf []byte) {
		for i := range buf {
			switch at := off + int64(i) - hello; {
			case at >= 0 && at < frame:
				first = append(first, buf[i])
			case at >= frame && at < 2*frame:
				buf[i] = first[at-frame]
			}
		}
	})
	msg := bytes.Repeat([]byte{7}, size)
	h := func(seq uint64) *wire.Header { return &wire.Header{Kind: wire.KindColl, Seq: seq, Count: size} }
	go func() { a.Send(h(1), msg); a.Send(h(1), msg) }()
	got := make([]byte, size)
	if err := b.RecvInto(h(1), got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the genuine frame: %v", err)
	}
	wantTamper(t, b.RecvInto(h(1), got), "the replayed frame")
}

// The bytes of one connection of a pair put on another (each part of a
// striped frame is the same size, so the records line up) do not open:
// every connection and direction has a key of its own.
func TestSealedRecordsMovedToAnotherConnection(t *testing.T) {
	const hello = 42 // only connection 0 carries the link hello
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var conn0 []byte // connection 0's stream after its hello
	a, b := sealedOverProxy(t, 2, func(conn int, off int64, buf []byte) {
		mu.Lock()
		defer mu.Unlock()
		if conn == 0 {
			for i := range buf {
				if off+int64(i) >= hello {
					conn0 = append(conn0, buf[i])
				}
			}
			cond.Broadcast()
			return
		}
		for int64(len(conn0)) < off+int64(len(buf)) {
			cond.Wait()
		}
		copy(buf, conn0[off:])
	})
	size := 2 * socket.StripeMin
	msg := bytes.Repeat([]byte{9}, size)
	h := func() *wire.Header { return &wire.Header{Kind: wire.KindColl, Seq: 1, Count: uint64(size)} }
	go a.Send(h(), msg)
	wantTamper(t, b.RecvInto(h(), make([]byte, size)), "connection 0's records on connection 1")
}

// Records that do not come from the peer's key (a stranger without the
// job's secret, here a peer with another one) fail the same way.
func TestSealedOtherSecret(t *testing.T) {
	as, bs := dialPairs(t, 1)
	a, b, ea, eb := connectPair(t, as, bs, socket.Options{Encrypt: true, Secret: testSecret},
		socket.Options{Encrypt: true, Secret: bytes.Repeat([]byte{1}, 32)})
	if ea != nil || eb != nil {
		t.Fatal(ea, eb)
	}
	defer a.Close()
	defer b.Close()
	b.SetDeadline(time.Now().Add(10 * time.Second))
	go a.Send(&wire.Header{Kind: wire.KindColl}, []byte("hello"))
	err := b.RecvInto(&wire.Header{Kind: wire.KindColl}, make([]byte, 5))
	var te *socket.TamperError
	if !errors.As(err, &te) || te.Peer != 0 {
		t.Fatalf("want a TamperError naming rank 0, got %v", err)
	}
}

// Nothing of the payload or the header crosses the wire in the clear, and
// the same payload sent twice looks different each time.
func TestSealedWireIsCiphertext(t *testing.T) {
	var mu sync.Mutex
	var wire0 []byte
	as, bs := proxyPairs(t, 1, func(conn int, _ int64, buf []byte) {
		mu.Lock()
		wire0 = append(wire0, buf...)
		mu.Unlock()
	})
	o := socket.Options{Encrypt: true, Secret: testSecret}
	a, b, ea, eb := connectPair(t, as, bs, o, o)
	if ea != nil || eb != nil {
		t.Fatal(ea, eb)
	}
	defer a.Close()
	defer b.Close()
	secret := []byte("the quick brown fox jumps over the lazy dog, 0123456789")
	msg := bytes.Repeat(secret, 1000)
	for range 2 {
		h := &wire.Header{Kind: wire.KindColl, Seq: 0x1234567}
		sent := make(chan error, 1)
		go func() { sent <- a.Send(h, msg) }()
		got := make([]byte, len(msg))
		if err := b.RecvInto(&wire.Header{Kind: wire.KindColl, Seq: 0x1234567}, got); err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatal("the payload arrived changed")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if bytes.Contains(wire0, secret[:16]) {
		t.Fatal("the payload crossed the wire in the clear")
	}
	if len(wire0) < 2*len(msg) {
		t.Fatalf("only %d bytes on the wire", len(wire0))
	}
}

// A peer's abort travels sealed and is read as its verdict, by the receive
// and by Failure.
func TestSealedAbortVerdict(t *testing.T) {
	a, b := sealedPair(2)(t)
	defer b.Close()
	a.Abort("rank 0 gave up: out of memory")
	var seen atomic.Bool
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if f := b.Failure(); f != nil {
			if !strings.Contains(f.Error(), "out of memory") {
				t.Fatalf("Failure: %v", f)
			}
			seen.Store(true)
			break
		}
	}
	if !seen.Load() {
		t.Fatal("Failure never reported the peer's abort")
	}
	err := b.RecvInto(&wire.Header{Kind: wire.KindColl}, make([]byte, 10))
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindPeerFailed || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("receive: %v", err)
	}
}
