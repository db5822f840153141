package shm

import (
	"bytes"
	"os/exec"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/transport/transporttest"
	"gocl/runtime/wire"
)

// cmaPair connects two links of this process, each end offering CMA or not.
func cmaPair(t testing.TB, offerA, offerB bool) (*link, *link) {
	a, b := connectPair(t, Options{CMA: offerA}, Options{CMA: offerB})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*link), b.(*link)
}

func TestCMAAgreedByBothEnds(t *testing.T) {
	for _, c := range []struct{ a, b, want bool }{{true, true, true}, {true, false, false}, {false, true, false}, {false, false, false}} {
		a, b := cmaPair(t, c.a, c.b)
		if a.cma != c.want || b.cma != c.want {
			t.Errorf("offers %v/%v: ends use CMA %v/%v, want %v", c.a, c.b, a.cma, b.cma, c.want)
		}
	}
}

func TestCMAConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Link, transport.Link) { return cmaPair(t, true, true) })
}

// RecvPieces covers the frame with contiguous pieces, each a multiple of
// 64 bytes but the last, over the FIFO and over CMA.
func TestRecvPieces(t *testing.T) {
	for _, cma := range []bool{false, true} {
		a, b := cmaPair(t, cma, cma)
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

// A large frame is not lent on a CMA link (it is read from the sender's
// memory instead), a small one is.
func TestCMALendsOnlySmallFrames(t *testing.T) {
	a, _ := cmaPair(t, true, true)
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
