package shm_test

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/transport/shm"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
)

func pair(t *testing.T) (transport.Link, transport.Link) { return connect(t) }

func connect(t testing.TB) (transport.Link, transport.Link) { return connectChannels(t, 1, 1) }

// connectChannels connects a pair whose ends offer chA and chB channels.
func connectChannels(t testing.TB, chA, chB int) (transport.Link, transport.Link) {
	return shm.ConnectPair(t, shm.Options{Channels: chA}, shm.Options{Channels: chB})
}

func TestConformance(t *testing.T) { transporttest.Run(t, pair) }

// channel returns channel i of both ends of a pair that has 3.
func channel(t *testing.T, i int) (transport.Link, transport.Link) {
	a, b := connectChannels(t, 3, 4)
	var out [2]transport.Link
	for k, l := range []transport.Link{a, b} {
		ch := l.(transport.Channeled)
		if ch.NumChannels() != 3 {
			t.Fatalf("offers 3 and 4: %d channels, want 3", ch.NumChannels())
		}
		ch.UseChannels(1, 3)
		links, _ := ch.Channels()
		out[k] = links[i]
	}
	return out[0], out[1]
}

// Every channel is a Link of its own (closing or aborting one ends the pair).
func TestChannelConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Link, transport.Link) { return channel(t, 2) })
}

// Channels are independent FIFOs: frames sent on one never show up on
// another, whatever order they are received in; UseChannels bounds what
// Channels offers; the pair agrees on the smaller offer.
func TestChannels(t *testing.T) {
	a, b := connectChannels(t, 3, 2)
	defer a.Close()
	defer b.Close()
	ca, cb := a.(transport.Channeled), b.(transport.Channeled)
	if ca.NumChannels() != 2 || cb.NumChannels() != 2 {
		t.Fatalf("offers 3 and 2: %d and %d channels, want 2", ca.NumChannels(), cb.NumChannels())
	}
	ca.UseChannels(5, 1)
	if links, lo := ca.Channels(); len(links) != 1 || lo != 1 || links[0] != a {
		t.Fatalf("UseChannels(5, 1): %d channels, at least %d", len(links), lo)
	}
	ca.UseChannels(2, 8)
	cb.UseChannels(2, 8)
	la, lo := ca.Channels()
	lb, _ := cb.Channels()
	if len(la) != 2 || lo != 2 || la[0] != a {
		t.Fatalf("UseChannels(2, 8): %d channels, at least %d", len(la), lo)
	}
	h := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 1}
	big := make([]byte, 300<<10) // Simple protocol
	for i := range big {
		big[i] = byte(i)
	}
	for ch := range 2 {
		if err := la[ch].Send(h, append(big[:len(big):len(big)], byte(ch))); err != nil {
			t.Fatal(err)
		}
		if err := la[ch].Send(h, []byte{byte(10 + ch)}); err != nil { // LL protocol
			t.Fatal(err)
		}
	}
	for ch := 1; ch >= 0; ch-- {
		got := make([]byte, len(big)+1)
		if err := lb[ch].RecvInto(h, got); err != nil {
			t.Fatal(err)
		}
		if got[len(big)] != byte(ch) || got[12345] != big[12345] {
			t.Fatalf("channel %d got another channel's frame", ch)
		}
		small := make([]byte, 1)
		if err := lb[ch].RecvInto(h, small); err != nil || small[0] != byte(10+ch) {
			t.Fatalf("channel %d: small frame %v, %v", ch, small, err)
		}
	}
	// Closing the pair's first channel ends a wait on another at once.
	done := make(chan error, 1)
	go func() { done <- lb[1].RecvInto(h, make([]byte, 8)) }()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("receive on channel 1 succeeded after the peer closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("receive on channel 1 still waiting 5 s after the peer closed channel 0")
	}
}

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
	ca, cb := shm.TCPPair(t)
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

// A lend whose filling failed is given up with Cancel: Close then unmaps
// the pair's segments (a lend held to the end kept them mapped for good,
// one pair's worth per failed call, until the process exited).
func TestCancelledLendIsUnmapped(t *testing.T) {
	a, _ := connect(t)
	ln := a.(transport.Lender)
	if _, ok, err := ln.Lend(4096); err != nil || !ok {
		t.Fatalf("Lend: %v %v", ok, err)
	}
	ln.Cancel()
	a.Close()
	if !shm.Unmapped(a) {
		t.Error("closed after a cancelled lend, the segments are still mapped")
	}
}
