package bootstrap

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each pair gets the number of connections socks gives it (both ends ask
// alike), none where it is 0, and connection i of a pair is the same
// connection at both ends.
func TestMeshOpensEachPairsCount(t *testing.T) {
	const n = 4
	secret := []byte("a test secret of at least thirty-two bytes!")
	socks := func(a, b int) int { return []int{0, 1, 3}[(a+b)%3] } // symmetric, by pair
	lns := make([]net.Listener, n)
	peers := make([]PeerInfo, n)
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r] = ln
		peers[r] = PeerInfo{Rank: r, NRanks: n, Addr: ln.Addr().String()}
	}
	all := make([][][]net.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			all[r], errs[r] = Mesh(r, peers, lns[r], secret, func(p int) int { return socks(r, p) }, time.Now().Add(10*time.Second))
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	defer func() {
		for _, cs := range all {
			for _, c := range cs {
				for _, x := range c {
					x.Close()
				}
			}
		}
	}()
	for a := range n {
		for b := a + 1; b < n; b++ {
			want := socks(a, b)
			if len(all[a][b]) != want || len(all[b][a]) != want {
				t.Fatalf("pair %d-%d: %d and %d connections, want %d", a, b, len(all[a][b]), len(all[b][a]), want)
			}
			for i := range want {
				var msg, got [8]byte
				binary.LittleEndian.PutUint32(msg[0:], uint32(a))
				binary.LittleEndian.PutUint32(msg[4:], uint32(i))
				go all[a][b][i].Write(msg[:])
				all[b][a][i].SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(all[b][a][i], got[:]); err != nil || got != msg {
					t.Fatalf("pair %d-%d connection %d: read %v, %v; want %v", a, b, i, got, err, msg)
				}
			}
		}
	}
}

// A listener full of handshakes turns connections away without a word;
// the dialer comes back until it is let in. A listener with another
// secret answers, and the dialer gives up at once.
func TestDialComesBackWhenTurnedAway(t *testing.T) {
	secret := []byte("a test secret of at least thirty-two bytes!")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			if i < 3 {
				c.Close() // busy: turned away
				continue
			}
			go func() {
				if authAccept(c, secret) != nil {
					c.Close()
				}
			}()
		}
	}()
	c, err := dial(ln.Addr().String(), secret, time.Now().Add(10*time.Second), false)
	if err != nil {
		t.Fatalf("dial after 3 turn-aways: %v", err)
	}
	c.Close()
	if n := accepted.Load(); n != 4 {
		t.Fatalf("%d connections for 3 turn-aways and a handshake, want 4", n)
	}

	other := []byte("another secret, also thirty-two bytes or more")
	if _, err := dial(ln.Addr().String(), other, time.Now().Add(10*time.Second), false); err == nil {
		t.Fatal("dial with another secret succeeded")
	} else if n := accepted.Load(); n != 5 {
		t.Fatalf("a dial with another secret connected %d times (retried a refusal that was an answer): %v", n-4, err)
	}
}
