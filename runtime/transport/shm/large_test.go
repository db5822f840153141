package shm

import (
	"testing"
	"time"

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
