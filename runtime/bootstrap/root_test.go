package bootstrap

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"gocl/runtime/status"
)

// joinAsync runs Join for rank of n on its own goroutine.
func joinAsync(id ID, rank, n int) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := Join(&id, PeerInfo{Rank: rank, NRanks: n}, time.Now().Add(30*time.Second))
		out <- err
	}()
	return out
}

// within returns the error a join reports, failing t if it takes longer
// than d: the point of these tests is that nobody waits out a timeout.
func within(t *testing.T, d time.Duration, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("the join did not end within %v", d)
		return nil
	}
}

// rootGone waits until the root's listener refuses connections.
func rootGone(t *testing.T, id ID) {
	t.Helper()
	addr, _ := id.Root()
	for end := time.Now().Add(5 * time.Second); ; {
		c, err := net.Dial("tcp", addr.String())
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if c != nil {
			c.Close()
		}
		if time.Now().After(end) {
			t.Fatalf("the root still listens at %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A rank that joins and then goes (killed, or its init gave up) fails the
// rendezvous for the ranks waiting at once, and the root ends once every
// rank has had its answer: it holds no connection for a rank that will not
// come (a shrink's survivor killed between the decision and the join).
func TestRootFailsTheRanksWhenAJoinedRankLeaves(t *testing.T) {
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	first := joinAsync(id, 0, 3)
	addr, _ := id.Root()
	c, err := dial(addr.String(), id.Secret(), time.Now().Add(10*time.Second), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMsg(c, PeerInfo{Rank: 1, NRanks: 3}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	c.Close() // rank 1 dies in the rendezvous
	err = within(t, 5*time.Second, first)
	if status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "rank 1 left the rendezvous") {
		t.Fatalf("rank 0's join: %v, want a remote error saying rank 1 left", err)
	}
	err = within(t, 5*time.Second, joinAsync(id, 2, 3)) // a late rank gets the same answer
	if err == nil || !strings.Contains(err.Error(), "rank 1 left the rendezvous") {
		t.Fatalf("rank 2's join: %v, want a failure saying rank 1 left", err)
	}
	rootGone(t, id)
}

// A rank that never comes: the ranks waiting get the root's timeout, which
// names it, and the root's connections close with it.
func TestRootTimesOutNamingTheMissingRank(t *testing.T) {
	id, err := StartRoot(300 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	err = within(t, 5*time.Second, joinAsync(id, 0, 2))
	if status.CodeOf(err) != status.Timeout || !strings.Contains(err.Error(), "missing ranks [1]") {
		t.Fatalf("join: %v, want a timeout naming rank 1", err)
	}
	rootGone(t, id)
}

// Ranks answered with the success close the root at once.
func TestRootEndsWithTheRendezvous(t *testing.T) {
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a, b := joinAsync(id, 0, 2), joinAsync(id, 1, 2)
	for _, ch := range []<-chan error{a, b} {
		if err := within(t, 5*time.Second, ch); err != nil {
			t.Fatal(err)
		}
	}
	rootGone(t, id)
}
