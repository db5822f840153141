package shm

import (
	"bytes"
	"os/exec"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
)

// cmaPair connects two links of this process, each end with its CMA mode.
func cmaPair(t testing.TB, modeA, modeB CMAMode) (*link, *link) {
	a, b := connectPair(t, Options{CMA: modeA}, Options{CMA: modeB})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*link), b.(*link)
}

// Both ends must offer CMA (in either mode) for the pair to agree; each end
// then sends every large frame that way only in CMAAll.
func TestCMAAgreedByBothEnds(t *testing.T) {
	for _, c := range []struct {
		a, b       CMAMode
		want       bool
		allA, allB bool
	}{
		{CMAAll, CMAAll, true, true, true}, {CMAAll, CMAOff, false, false, false}, {CMAOff, CMAAll, false, false, false},
		{CMAOff, CMAOff, false, false, false}, {CMAMove, CMAMove, true, false, false}, {CMAMove, CMAAll, true, false, true},
		{CMAMove, CMAOff, false, false, false},
	} {
		a, b := cmaPair(t, c.a, c.b)
		if a.cma != c.want || b.cma != c.want || a.cmaAll != c.allA || b.cmaAll != c.allB {
			t.Errorf("modes %v/%v: ends agree %v/%v, send all %v/%v; want %v, %v/%v", c.a, c.b, a.cma, b.cma, a.cmaAll, b.cmaAll, c.want, c.allA, c.allB)
		}
	}
}

func TestCMAConformance(t *testing.T) {
	for _, m := range []CMAMode{CMAAll, CMAMove} {
		t.Run(map[CMAMode]string{CMAAll: "all", CMAMove: "move"}[m], func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) (transport.Link, transport.Link) { return cmaPair(t, m, m) })
		})
	}
}

// With CMAMove a large frame is still lent and posted through the FIFO
// (frames the peer reduces), and only Move sends by reference: frames of
// CMAMin bytes or more, read back whole (RecvInto) and in pieces
// (RecvPieces), with Flush returning once the peer has read them.
func TestCMAMoveTakesOnlyMovedFrames(t *testing.T) {
	a, b := cmaPair(t, CMAMove, CMAMove)
	if _, ok, err := a.Lend(CMAMin); !ok || err != nil {
		t.Fatalf("Lend(CMAMin) with CMAMove: ok %v, err %v; want lent (the FIFO)", ok, err)
	}
	a.Cancel()
	if posted, err := a.Post(&wire.Header{Kind: wire.KindColl}, make([]byte, CMAMin)); posted || err != nil {
		t.Fatalf("Post(CMAMin) with CMAMove: posted %v, err %v; want not posted", posted, err)
	}
	if a.Moves(MoveMin-1) || !a.Moves(MoveMin) {
		t.Fatalf("Moves(MoveMin-1) %v, Moves(MoveMin) %v; want false, true", a.Moves(MoveMin-1), a.Moves(MoveMin))
	}
	off, _ := cmaPair(t, CMAOff, CMAMove)
	if off.Moves(MoveMin) {
		t.Fatal("Moves(CMAMin) on a pair that did not agree on CMA")
	}
	for i, n := range []int{MoveMin, CMAMin + cmaStep + 3, MaxPiece + 5} {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		h := wire.Header{Kind: wire.KindColl, Coll: wire.AllGather, Seq: uint64(i), Count: uint64(n)}
		if err := a.Move(&h, data); err != nil {
			t.Fatalf("%d bytes: Move: %v", n, err)
		}
		got := make([]byte, n)
		done := make(chan error, 1)
		go func() { done <- a.Flush() }()
		want := h
		want.Len = uint64(n)
		if i%2 == 0 {
			if err := b.RecvInto(&want, got); err != nil {
				t.Fatalf("%d bytes: RecvInto: %v", n, err)
			}
		} else if err := b.RecvPieces(&want, func(off int, p []byte) { copy(got[off:], p) }); err != nil {
			t.Fatalf("%d bytes: RecvPieces: %v", n, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%d bytes: Flush: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes moved by reference arrived different", n)
		}
	}
}

// RecvPieces covers the frame with contiguous pieces, each a multiple of
// 64 bytes but the last, over the FIFO and over CMA.
func TestRecvPieces(t *testing.T) {
	for _, cma := range []bool{false, true} {
		mode := map[bool]CMAMode{false: CMAOff, true: CMAAll}[cma]
		a, b := cmaPair(t, mode, mode)
		sizes := []int{1, 100, LLMax + 1, CMAMin - 1, CMAMin, CMAMin + cmaStep + 3, MaxPiece + 5, 2*MaxPiece + 3*cmaStep + 9}
		for i, n := range sizes {
			data := make([]byte, n)
			for j := range data {
				data[j] = byte(j*7 + n)
			}
			h := wire.Header{Kind: wire.KindColl, Step: uint32(i)}
			done := make(chan error, 1)
			go func() { hh := h; done <- a.Send(&hh, data) }()
			got := make([]byte, 0, n)
			want := h
			want.Len = uint64(n)
			err := b.RecvPieces(&want, func(off int, p []byte) {
				if off != len(got) {
					t.Errorf("cma %v, %d bytes: piece at %d, want %d", cma, n, off, len(got))
				}
				if off+len(p) < n && len(p)%64 != 0 {
					t.Errorf("cma %v, %d bytes: inner piece of %d bytes", cma, n, len(p))
				}
				got = append(got, p...)
			})
			if err != nil {
				t.Fatalf("cma %v, %d bytes: %v", cma, n, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("cma %v, %d bytes: send: %v", cma, n, err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("cma %v, %d bytes: pieces differ from the frame", cma, n)
			}
		}
	}
}

// With CMAAll a large frame is not lent (it is read from the sender's
// memory instead), a small one is.
func TestCMALendsOnlySmallFrames(t *testing.T) {
	a, _ := cmaPair(t, CMAAll, CMAAll)
	if _, ok, err := a.Lend(CMAMin); ok || err != nil {
		t.Fatalf("Lend(CMAMin) on a CMA link: ok %v, err %v; want not lent", ok, err)
	}
	if _, ok, err := a.Lend(CMAMin - 64); !ok || err != nil {
		t.Fatalf("Lend(CMAMin-64): ok %v, err %v; want lent", ok, err)
	}
	a.Commit(&wire.Header{Kind: wire.KindColl})
}

// Reading from a process that has exited fails with an error, never a hang.
func TestReadPeerOfExitedProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	var b [8]byte
	if err := readPeer(cmd.Process.Pid, b[:], 4096); err == nil {
		t.Fatal("read from an exited process succeeded")
	}
}

// A frame posted by address that its sender takes back (its link closes,
// or its flush fails) is never read: the receiver fails instead of
// returning bytes the sender's caller may be reusing. A frame the receiver
// has read is not withdrawn, and does not hold the close up.
func TestWithdrawnFrameIsNotRead(t *testing.T) {
	a, b := cmaPair(t, CMAMove, CMAMove)
	data := bytes.Repeat([]byte{7}, MoveMin)
	h := wire.Header{Kind: wire.KindColl, Coll: wire.AllGather, Seq: 1, Count: uint64(MoveMin)}
	if err := a.Move(&h, data); err != nil {
		t.Fatal(err)
	}
	want := h
	want.Len = uint64(len(data))
	got := make([]byte, len(data))
	if err := b.RecvInto(&want, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("first frame: %v, equal %v", err, bytes.Equal(got, data))
	}
	h.Seq = 2
	if err := a.Move(&h, data); err != nil {
		t.Fatal(err)
	}
	a.Close() // withdraws frame 2 (frame 1 is read: nothing to wait for)
	for i := range data {
		data[i] = 9 // the caller reuses its buffer
	}
	want.Seq = 2
	err := b.RecvInto(&want, got)
	if err == nil {
		t.Fatalf("a withdrawn frame was received: %v...", got[:4])
	}
	t.Logf("receiving a withdrawn frame: %v", err)
}

// A flush that finds every frame posted by address already read (the
// sender learnt it while waiting for a slot) forgets them too: the list a
// close would withdraw does not grow call after call.
func TestFlushForgetsFramesReadBefore(t *testing.T) {
	a, b := cmaPair(t, CMAMove, CMAMove)
	big := make([]byte, MoveMin)
	got := make([]byte, MoveMin)
	small := []byte{1, 2, 3, 4}
	for round := range 3 {
		h := wire.Header{Kind: wire.KindColl, Coll: wire.AllGather, Seq: uint64(round), Count: 1}
		if err := a.Move(&h, big); err != nil {
			t.Fatal(err)
		}
		want := h
		if err := b.RecvInto(&want, got); err != nil {
			t.Fatal(err)
		}
		for i := range llSlots + 2 { // past a whole ring of slots: slotFree refreshes the sender's view
			h := wire.Header{Kind: wire.KindColl, Coll: wire.AllGather, Seq: uint64(round), Step: uint32(i), Count: 1}
			if err := a.Send(&h, small); err != nil {
				t.Fatal(err)
			}
			want := h
			if err := b.RecvInto(&want, got[:len(small)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		if len(a.refs) != 0 {
			t.Fatalf("round %d: %d frames posted by address still listed after a flush", round, len(a.refs))
		}
	}
}
