package shm

import (
	"testing"
	"time"
	"unsafe"

	"gocl/runtime/wire"
)

// Two lent frames of MaxPiece must fit in the data ring behind a frame that
// left it misaligned, without the peer receiving: prims lends both before
// it receives, on both ends of a pair at once.
func TestTwoLentPiecesFitAfterAnyFrame(t *testing.T) {
	for _, first := range []int{0, LLMax + 1, 8 << 10, MaxPiece - 64, MaxPiece + 1} {
		a, b := cmaPair(t, false, false)
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

// Once the peer has read every frame, the next one starts at the data
// ring's start, so the frames of calls that fit the ring reuse the same
// (cached) bytes instead of cycling through all of it.
func TestRingRestartsWhenEmpty(t *testing.T) {
	a, b := cmaPair(t, false, false)
	a.SetDeadline(time.Now().Add(2 * time.Second))
	b.SetDeadline(time.Now().Add(2 * time.Second))
	h := func(step int) *wire.Header { return &wire.Header{Kind: wire.KindColl, Step: uint32(step)} }
	ring := &a.send.data()[0]
	for i, n := range []int{LLMax + 1, 100_000, MaxPiece} {
		if err := a.Send(h(2*i), make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if err := b.RecvInto(h(2*i), make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		slot, ok, err := a.Lend(8 << 10)
		if err != nil || !ok {
			t.Fatalf("lend after a %d-byte frame: ok %v, %v", n, ok, err)
		}
		if &slot[0] != ring {
			t.Errorf("after a %d-byte frame was read, the next starts %d bytes into the ring, want 0", n, uintptr(unsafe.Pointer(&slot[0]))-uintptr(unsafe.Pointer(ring)))
		}
		if err := a.Commit(h(2*i + 1)); err != nil {
			t.Fatal(err)
		}
		if err := b.RecvInto(h(2*i+1), make([]byte, 8<<10)); err != nil {
			t.Fatal(err)
		}
	}
}
