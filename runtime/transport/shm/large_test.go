package shm

import (
	"bytes"
	"testing"
	"time"

	"gocl/runtime/wire"
)

// Two lent frames of MaxPiece must fit in the data ring behind a frame that
// left it misaligned, without the peer receiving: prims lends both before
// it receives, on both ends of a pair at once.
func TestTwoLentPiecesFitAfterAnyFrame(t *testing.T) {
	for _, first := range []int{0, LLMax + 1, 8 << 10, MaxPiece - 64, MaxPiece + 1} {
		a, b := cmaPair(t, CMAOff, CMAOff)
		a.SetDeadline(time.Now().Add(2 * time.Second))
		b.SetDeadline(time.Now().Add(2 * time.Second))
		h := func(step int) *wire.Header { return &wire.Header{Kind: wire.KindColl, Step: uint32(step)} }
		if first > 0 {
			if err := a.Send(h(0), make([]byte, first)); err != nil {
				t.Fatalf("after %d bytes: %v", first, err)
			}
			if err := b.RecvInto(h(0), make([]byte, first)); err != nil {
				t.Fatalf("after %d bytes: %v", first, err)
			}
		}
		for i := 1; i <= 2; i++ {
			slot, ok, err := a.Lend(MaxPiece)
			if err != nil || !ok {
				t.Fatalf("after %d bytes: lend %d of MaxPiece: ok %v, %v", first, i, ok, err)
			}
			slot[0] = byte(i)
			if err := a.Commit(h(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i <= 2; i++ {
			got := make([]byte, MaxPiece)
			if err := b.RecvInto(h(i), got); err != nil || got[0] != byte(i) {
				t.Fatalf("after %d bytes: frame %d: %v (first byte %d)", first, i, err, got[0])
			}
		}
	}
}

// Frames that the peer receives before the next is sent keep to the first
// pages of the data ring instead of walking (and faulting in) all of it.
func TestSmallFramesReuseTheRingStart(t *testing.T) {
	a, b := cmaPair(t, CMAOff, CMAOff)
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	h := &wire.Header{Kind: wire.KindColl}
	for i := range 3000 {
		n := 2048 + 64*(i%7)
		out := make([]byte, n)
		out[n-1] = byte(i)
		if err := a.Send(h, out); err != nil {
			t.Fatal(err)
		}
		in := make([]byte, n)
		if err := b.RecvInto(h, in); err != nil || in[n-1] != byte(i) {
			t.Fatalf("frame %d: %v (last byte %d)", i, err, in[n-1])
		}
	}
	if f := a.fresh; f > 4*pageBytes {
		t.Errorf("3000 frames of 2-2.4 KiB, each received before the next, touched %d bytes of the data ring, want at most %d", f, 4*pageBytes)
	}
}

// With ranks sharing a core the receiver often still holds the previous
// frame when the next is sent, so the ring is never empty: small frames must
// still cycle through the ring's first hotBytes rather than walk all of it.
func TestSmallFramesOneAheadStayHot(t *testing.T) {
	a, b := cmaPair(t, CMAOff, CMAOff)
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	h := &wire.Header{Kind: wire.KindColl}
	frame := func(i int) []byte {
		out := make([]byte, 512+64*(i%5))
		for j := range out {
			out[j] = byte(i + j)
		}
		return out
	}
	if err := a.Send(h, frame(0)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3000; i++ {
		if err := a.Send(h, frame(i)); err != nil { // frame i-1 is still unread
			t.Fatal(err)
		}
		want := frame(i - 1)
		in := make([]byte, len(want))
		if err := b.RecvInto(h, in); err != nil || !bytes.Equal(in, want) {
			t.Fatalf("frame %d: %v, or wrong bytes", i-1, err)
		}
		if pos := a.dhead % dataBytes; pos > hotBytes {
			t.Fatalf("after %d frames of 0.5-0.75 KiB, one always unread, the ring's head is at %d, want at most %d", i+1, pos, hotBytes)
		}
	}
}
