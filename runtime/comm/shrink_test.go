package comm

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/config/configtest"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// sumOfRanks all-reduces each rank's float32 rank over c and checks the
// sum, so a communicator made of the wrong ranks fails.
func sumOfRanks(c *Comm, globalRank int, globals []int) error {
	buf := make([]byte, 4*7)
	for i := 0; i < 7; i++ {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(globalRank)))
	}
	if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: 7, Type: abi.Float32}); err != nil {
		return err
	}
	want := 0
	for _, g := range globals {
		want += g
	}
	for i := 0; i < 7; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])); got != float32(want) {
			return status.Errorf(status.InternalError, "element %d: %v, want %d (ranks %v)", i, got, want, globals)
		}
	}
	return nil
}

// shrinkAll has each rank in ranks call Shrink, rank r after delay(r), and
// returns their new communicators and errors, indexed by old rank.
func shrinkAll(comms []*Comm, ranks []int, exclude func(r int) []int, delay func(r int) time.Duration) ([]*Comm, []error) {
	out := make([]*Comm, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay(r))
			var ex []int
			if exclude != nil {
				ex = exclude(r)
			}
			out[r], errs[r] = comms[r].Shrink(ex, exclude == nil, ShrinkDefault, Options{})
		}()
	}
	wg.Wait()
	return out, errs
}

// checkShrunk checks that every survivor got a communicator of the
// survivors, in their old order, that all-reduces right.
func checkShrunk(t *testing.T, subs []*Comm, errs []error, survivors []int) {
	t.Helper()
	for _, r := range survivors {
		if errs[r] != nil {
			t.Fatalf("rank %d: shrink: %v", r, errs[r])
		}
		if subs[r].NRanks() != len(survivors) || subs[r].Rank() != slices.Index(survivors, r) {
			t.Errorf("rank %d: got rank %d of %d, want %d of %d", r, subs[r].Rank(), subs[r].NRanks(),
				slices.Index(survivors, r), len(survivors))
		}
	}
	if t.Failed() {
		return
	}
	var wg sync.WaitGroup
	for _, r := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sumOfRanks(subs[r], r, survivors); err != nil {
				t.Errorf("rank %d: all-reduce on the shrunk communicator: %v", r, err)
			}
		}()
	}
	wg.Wait()
	for _, r := range survivors {
		subs[r].Destroy()
	}
}

// A rank dies inside a collective; the survivors notice at different
// times, agree that it is gone without being told, and carry on.
func TestShrinkAgreesOnTheDeadRank(t *testing.T) {
	transports(t, func(t *testing.T) {
		for _, dead := range []int{0, 2} { // 0: the first coordinator is the one gone
			comms, err := InitAll(4, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			survivors := complement([]int{dead}, 4)
			var wg sync.WaitGroup
			for _, r := range survivors {
				wg.Add(1)
				go func() { defer wg.Done(); allReduce(comms[r], 1<<12) }()
			}
			time.Sleep(20 * time.Millisecond)
			comms[dead].Abort() // its process is gone: links closed, probes refused
			wg.Wait()
			subs, errs := shrinkAll(comms, survivors, nil, func(r int) time.Duration { return time.Duration(r) * 30 * time.Millisecond })
			checkShrunk(t, subs, errs, survivors)
			for _, r := range survivors {
				comms[r].Destroy()
			}
		}
	})
}

// A second rank dies while the survivors shrink: they still end up with
// one communicator, without both.
func TestShrinkSurvivesADeathDuringTheShrink(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "3")
	comms, err := InitAll(5, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	comms[1].Abort()
	go func() { time.Sleep(40 * time.Millisecond); comms[3].Abort() }()
	// rank 3 starts shrinking too, and dies on the way
	survivors := []int{0, 2, 4}
	subs, errs := shrinkAll(comms, []int{0, 2, 3, 4}, nil, func(r int) time.Duration { return time.Duration(r) * 20 * time.Millisecond })
	if subs[3] != nil {
		subs[3].Abort()
	}
	checkShrunk(t, subs, errs, survivors)
	for _, r := range survivors {
		comms[r].Destroy()
	}
}

// An explicit list: the excluded rank does not call shrink; a healthy
// communicator shrinks too; survivors that disagree on the list fail.
func TestShrinkExcludeList(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "3")
	comms, err := InitAll(4, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	subs, errs := shrinkAll(comms, []int{0, 1, 3}, func(int) []int { return []int{2} }, func(int) time.Duration { return 0 })
	checkShrunk(t, subs, errs, []int{0, 1, 3})
	// the parent is still healthy: it keeps working after a shrink
	clique2 := []int{0, 1, 2, 3}
	var wg sync.WaitGroup
	for _, r := range clique2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sumOfRanks(comms[r], r, clique2); err != nil {
				t.Errorf("rank %d: the parent after a shrink: %v", r, err)
			}
		}()
	}
	wg.Wait()
	// rank 3 names another list than rank 0, the coordinator
	_, errs = shrinkAll(comms, []int{0, 3}, func(r int) []int {
		if r == 3 {
			return []int{1, 2}
		}
		return []int{2, 3}[:1]
	}, func(int) time.Duration { return 0 })
	wantErr(t, "rank 3", errs[3], status.RemoteError, "same list")
	for _, c := range comms {
		c.Abort()
	}
}

func TestShrinkArguments(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "3")
	comms, err := InitAll(3, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := comms[1]
	for _, tc := range []struct {
		ex    []int
		flags ShrinkFlags
		want  string
	}{
		{[]int{3}, 0, "out of range"},
		{[]int{-1}, 0, "out of range"},
		{[]int{1}, 0, "excludes itself"},
		{[]int{0, 0}, 0, "excluded twice"},
		{[]int{0}, 7, "shrinkFlags is 7"},
	} {
		_, err := c.Shrink(tc.ex, false, tc.flags, Options{})
		wantErr(t, "shrink", err, status.InvalidArgument, "rank 1", tc.want)
	}
	for _, c := range comms {
		c.Destroy()
	}
	if _, err := c.Shrink(nil, true, 0, Options{}); status.CodeOf(err) != status.InvalidUsage {
		t.Errorf("shrink after destroy: %v", err)
	}
}

// Revoke ends a call that waits for ranks that never join it, on every
// rank, and leaves a communicator the (all living) ranks can shrink.
func TestRevokeThenShrink(t *testing.T) {
	transports(t, func(t *testing.T) {
		configtest.Setenv(t, "GOCL_TIMEOUT", "30")
		comms, err := InitAll(3, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- allReduce(comms[0], 1<<10) }() // ranks 1 and 2 never join
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		comms[2].Revoke()
		select {
		case err := <-done:
			wantErr(t, "rank 0", err, status.RemoteError, "revoked")
			if d := time.Since(start); d > time.Second {
				t.Errorf("the revoked call took %v to end", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("revoke did not end rank 0's call")
		}
		subs, errs := shrinkAll(comms, []int{0, 1, 2}, nil, func(int) time.Duration { return 0 })
		checkShrunk(t, subs, errs, []int{0, 1, 2})
		for _, c := range comms {
			c.Destroy()
		}
	})
}

// growAll has every rank of comms (in rank order) grow to one more rank,
// joined by a new last rank through the id comms[0] hands out, and returns
// the grown communicators and their errors, indexed by new rank.
func growAll(t *testing.T, comms []*Comm) ([]*Comm, []error) {
	t.Helper()
	id, err := comms[0].GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	n := len(comms) + 1
	grown := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == n-1 {
				grown[r], errs[r] = GrowJoin(id, n, r, Options{})
				return
			}
			grown[r], errs[r] = comms[r].Grow(n, nil, Options{})
		}()
	}
	wg.Wait()
	return grown, errs
}

// A new rank joins a shrunk communicator.
func TestGrow(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "5")
	comms, err := InitAll(3, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	grown, errs := growAll(t, comms)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: grow: %v", r, err)
		}
	}
	checkShrunk(t, grown, errs, []int{0, 1, 2, 3})
	// without an id on rank 0 every rank gets the same error
	_, _ = comms[0].GetUniqueID() // a fresh one, then forgotten:
	comms[0].growID = nil
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[r] = comms[r].Grow(4, nil, Options{}) }()
	}
	wg.Wait()
	for r := 0; r < 3; r++ {
		wantErr(t, "grow without an id", errs[r], status.InvalidUsage, "goclCommGetUniqueId")
	}
	if _, err := comms[1].Grow(2, &bootstrap.ID{}, Options{}); status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("grow to fewer ranks: %v", err)
	}
	for _, c := range comms {
		c.Destroy()
	}
}

// Goroutines and fds return to their counts after a rank dies, the
// survivors shrink, grow back with a new rank, and destroy everything, over
// every transport: what a leaked OS thread would need (a goroutine left
// waiting) is counted exactly here; test_recovery.py can only bound the
// threads, which the Go runtime keeps once started.
func TestShrinkResourcesReturn(t *testing.T) {
	transports(t, func(t *testing.T) {
		cycle := func() {
			comms, err := InitAll(4, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			comms[1].Abort()
			survivors := []int{0, 2, 3}
			subs, errs := shrinkAll(comms, survivors, nil, func(int) time.Duration { return 0 })
			for _, r := range survivors {
				if errs[r] != nil {
					t.Fatalf("rank %d: shrink: %v", r, errs[r])
				}
				comms[r].Destroy()
			}
			grown, errs := growAll(t, []*Comm{subs[0], subs[2], subs[3]})
			for _, r := range survivors {
				subs[r].Destroy()
			}
			checkShrunk(t, grown, errs, []int{0, 1, 2, 3}) // destroys the grown ones
		}
		cycle() // warm-up: process-wide things made once
		time.Sleep(50 * time.Millisecond)
		g, f := held()
		for i := 0; i < 3; i++ {
			cycle()
		}
		settles(t, "three kill-shrink-grow cycles", [2]int{g, f})
	})
}
