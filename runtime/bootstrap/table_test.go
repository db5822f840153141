package bootstrap

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/runtime/status"
)

// smallChunks makes the table travel in several messages at test sizes.
func smallChunks(t *testing.T, n int) {
	old := tableChunk
	tableChunk = n
	t.Cleanup(func() { tableChunk = old })
}

// joinAll runs Join for every rank of n not in skip, each on its own
// goroutine, and returns their tables and errors.
func joinAll(t *testing.T, id ID, n int, skip map[int]bool) ([][]PeerInfo, []error) {
	return joinAllIn(t, id, n, skip, func(int) string { return "" })
}

// joinAllIn is joinAll with rank r claiming process proc(r).
func joinAllIn(t *testing.T, id ID, n int, skip map[int]bool, proc func(int) string) ([][]PeerInfo, []error) {
	t.Helper()
	tables, errs := make([][]PeerInfo, n), make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		if skip[r] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := PeerInfo{Rank: r, NRanks: n, Addr: fmt.Sprintf("127.0.0.1:%d", 1000+r), Host: "h", Proc: proc(r)}
			tables[r], errs[r] = Join(&id, me, time.Now().Add(60*time.Second))
		}()
	}
	wg.Wait()
	return tables, errs
}

func TestTheTableReachesEveryRank(t *testing.T) {
	smallChunks(t, 5)
	for _, n := range []int{1, 2, 3, 37} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			id, err := StartRoot(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			tables, errs := joinAll(t, id, n, nil)
			for r := 0; r < n; r++ {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				for p, e := range tables[r] {
					if e != tables[0][p] || e.Rank != p || e.Addr != fmt.Sprintf("127.0.0.1:%d", 1000+p) || e.Boot == "" {
						t.Fatalf("rank %d's entry %d is %+v, rank 0's %+v", r, p, e, tables[0][p])
					}
				}
			}
		})
	}
}

// fakeRank joins the root as rank r of n with a table listener the test
// holds, and returns the root's answer (and its size in bytes).
func fakeRank(t *testing.T, id ID, r, n int, boot string) (rootReply, int) {
	t.Helper()
	addr, _ := id.Root()
	c, err := dial(addr.String(), id.Secret(), time.Now().Add(10*time.Second), false)
	if err != nil {
		t.Error(err)
		return rootReply{}, 0
	}
	defer c.Close()
	if err := writeMsg(c, PeerInfo{Rank: r, NRanks: n, Boot: boot}); err != nil {
		t.Error(err)
	}
	b, _ := io.ReadAll(c)
	var reply rootReply
	if err := readMsg(strings.NewReader(string(b)), &reply); err != nil {
		t.Errorf("rank %d: the root's answer: %v", r, err)
	}
	return reply, len(b)
}

// fakeRankZero joins the root as rank 0 of n with a table listener the
// test holds, and hands the table it receives there to then, which plays
// rank 0's part in passing it on.
func fakeRankZero(t *testing.T, id ID, n int, then func(peers []PeerInfo, msgs [][]byte)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		authAccept(c, id.Secret())
		var hello [8]byte
		io.ReadFull(c, hello[:])
		peers, msgs, err := readTable(c, n)
		if err != nil {
			t.Error(err)
			return
		}
		then(peers, msgs)
	}()
	go fakeRank(t, id, 0, n, ln.Addr().String())
}

// The root answers each rank in a few bytes that do not grow with N and
// sends the table itself only to ranks 0 and 1, in messages of at most
// tableChunk entries: O(N) in all, where it used to send N tables.
func TestTheRootSendsTheTableTwice(t *testing.T) {
	smallChunks(t, 7)
	const n = 50
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lns := make([]net.Listener, n)
	for r := range lns {
		if lns[r], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer lns[r].Close()
	}
	type table struct {
		rank, msgs int
		peers      []PeerInfo
		err        error
	}
	got := make(chan table, n)
	for r, ln := range lns {
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			tb := table{rank: r}
			if tb.err = authAccept(c, id.Secret()); tb.err == nil {
				var hello [8]byte
				io.ReadFull(c, hello[:])
				if from := helloRank(int(binary.LittleEndian.Uint32(hello[:]))); from != -1 {
					tb.err = fmt.Errorf("the table came from rank %d, not the root", from)
				}
				for tb.err == nil && len(tb.peers) < n {
					var m tableMsg
					if tb.err = readMsg(c, &m); tb.err == nil && len(m.Peers) > tableChunk {
						tb.err = fmt.Errorf("a message of %d entries", len(m.Peers))
					}
					tb.peers = append(tb.peers, m.Peers...)
					tb.msgs++
				}
			}
			got <- tb
		}()
	}
	replies := make([]int, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, size := fakeRank(t, id, r, n, lns[r].Addr().String())
			replies[r] = size
			if want := len(tableTree(ranksUpTo(n)).children(r)); len(reply.Kids) != want || want > 0 && reply.Kids[0] != lns[2*r+2].Addr().String() {
				t.Errorf("rank %d's answer names children %v, want rank %d's address first of %d", r, reply.Kids, 2*r+2, want)
			}
		}()
	}
	wg.Wait()
	for i := 0; i < 2; i++ {
		tb := <-got
		if tb.err != nil || tb.rank > 1 || len(tb.peers) != n || tb.msgs != (n+tableChunk-1)/tableChunk {
			t.Fatalf("rank %d got %d entries in %d messages from the root: %v", tb.rank, len(tb.peers), tb.msgs, tb.err)
		}
	}
	select { // the root is done: nobody else got a table from it
	case tb := <-got:
		t.Fatalf("rank %d got a table from the root", tb.rank)
	case <-time.After(200 * time.Millisecond):
	}
	for r, size := range replies {
		if size > 120 {
			t.Errorf("the root's answer to rank %d is %d bytes: it must not grow with the number of ranks", r, size)
		}
	}
}

// A rank that is gone before the table reaches it (its listener refuses) is
// stepped over: its parent sends the table to its children, who init.
func TestAGoneRankIsSteppedOver(t *testing.T) {
	const n, gone = 8, 2 // rank 2's children are 6 and 7
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := ln.Addr().String()
	ln.Close()
	go fakeRank(t, id, gone, n, deadAddr)
	_, errs := joinAll(t, id, n, map[int]bool{gone: true})
	for r, err := range errs {
		if r != gone && err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A parent that dies while sending the table fails its child at once, and
// the child's children through it: a remote error naming the parent, not a
// wait for the timeout.
func TestATableBrokenOffFailsTheSubtree(t *testing.T) {
	smallChunks(t, 3)
	const n = 8 // rank 0 sends to 2 and 3; rank 2 to 6 and 7
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fakeRankZero(t, id, n, func(peers []PeerInfo, msgs [][]byte) { // sends rank 3 all of the table and rank 2 one message
		sendTo(0, peers[3].Boot, msgs, id.Secret(), time.Now().Add(10*time.Second))
		sendTo(0, peers[2].Boot, msgs[:1], id.Secret(), time.Now().Add(10*time.Second))
	})
	_, errs := joinAll(t, id, n, map[int]bool{0: true})
	for r, err := range errs {
		switch r {
		case 0:
		case 2, 6, 7:
			if status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "rank 2: reading the rank table from rank 0 failed") {
				t.Errorf("rank %d: %v, want a remote error saying rank 2's table from rank 0 broke off", r, err)
			}
		default:
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	}
}

func ranksUpTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// The ranks of one process share one copy of the table: the tree runs over
// the processes' lowest ranks, the others take their copy in memory, and
// nothing is left behind.
func TestRanksOfOneProcessShareTheTable(t *testing.T) {
	smallChunks(t, 4)
	const n = 23
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proc := func(r int) string { // ranks 0-9 in one process, then 3 each, rank 22 alone
		switch {
		case r < 10:
			return "p0"
		case r == 22:
			return ""
		}
		return fmt.Sprintf("p%d", 1+(r-10)/3)
	}
	tables, errs := joinAllIn(t, id, n, nil, proc)
	first := map[string]int{}
	for r := 0; r < n; r++ {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if _, ok := first[proc(r)]; !ok {
			first[proc(r)] = r
		}
		l := first[proc(r)]
		if len(tables[r]) != n || proc(r) != "" && &tables[r][0] != &tables[l][0] {
			t.Fatalf("rank %d does not hold rank %d's copy of the table", r, l)
		}
		if r != l && &tables[r][0] == &tables[l][0] && proc(r) == "" {
			t.Fatalf("rank %d, a process of its own, holds rank %d's copy", r, l)
		}
		for p, e := range tables[r] {
			if e.Rank != p || e.Proc != proc(p) {
				t.Fatalf("rank %d's entry %d is %+v", r, p, e)
			}
		}
	}
	for i, r := range first { // distinct processes, distinct copies
		for j, q := range first {
			if i != j && &tables[r][0] == &tables[q][0] {
				t.Fatalf("processes %q and %q share a copy", i, j)
			}
		}
	}
	tree := newTableTree(tables[0])
	procs := map[string]bool{}
	for _, r := range tree {
		if procs[proc(r)] {
			t.Fatalf("the tree %v holds two ranks of process %q", tree, proc(r))
		}
		procs[proc(r)] = true
	}
	if len(tree) != 6 {
		t.Fatalf("the tree runs over ranks %v, want one per process (6)", tree)
	}
	sharedMu.Lock()
	left := len(shared)
	sharedMu.Unlock()
	if left != 0 {
		t.Fatalf("%d shared tables left after every rank took its own", left)
	}
}

// A process's rank that takes the table, whose table breaks off, fails the
// process's other ranks with its cause (a remote error naming the sender),
// not at the timeout (a timeout error).
func TestASharedTableBrokenOffFailsTheProcess(t *testing.T) {
	const n = 4 // ranks 0 and 1 alone, 2 and 3 in one process: one of them takes the table from rank 0
	id, err := StartRoot(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proc := func(r int) string { return map[int]string{2: "q", 3: "q"}[r] }
	// Rank 0's child in the tree is the process's rank that takes the
	// table (position 2): rank 0 breaks the table off in mid-message.
	fakeRankZero(t, id, n, func(peers []PeerInfo, msgs [][]byte) {
		lead := newTableTree(peers)[2]
		sendTo(0, peers[lead].Boot, [][]byte{msgs[0][:len(msgs[0])/2]}, id.Secret(), time.Now().Add(10*time.Second))
	})
	_, errs := joinAllIn(t, id, n, map[int]bool{0: true}, proc)
	for _, r := range []int{2, 3} {
		if status.CodeOf(errs[r]) != status.RemoteError || !strings.Contains(errs[r].Error(), ": reading the rank table from rank 0 failed") {
			t.Errorf("rank %d: %v, want the broken table named", r, errs[r])
		}
	}
	if errs[1] != nil {
		t.Errorf("rank 1: %v", errs[1])
	}
}

// The root names a table no rank can take: a rank that joined to take its
// process's copy where no rank of that process takes one, or a process
// with two takers (orphans); a real process always has exactly one.
func TestOrphansAreNamed(t *testing.T) {
	peers := []PeerInfo{{Rank: 0, Proc: "a", Boot: "x:1"}, {Rank: 1, Proc: "a"}, {Rank: 2, Proc: "", Boot: "x:2"}}
	leader := func(peers []PeerInfo) map[string]int {
		m := map[string]int{}
		for _, r := range newTableTree(peers) {
			if p := peers[r].Proc; p != "" {
				if _, ok := m[p]; !ok {
					m[p] = r
				}
			}
		}
		return m
	}
	if bad := orphans(peers, leader(peers)); bad != "" {
		t.Fatalf("a good table: %s", bad)
	}
	noLeader := append([]PeerInfo(nil), peers...)
	noLeader[1].Proc = "b"
	if bad := orphans(noLeader, leader(noLeader)); !strings.Contains(bad, "rank 1 joined to take the rank table from another rank of its process, and none has joined") {
		t.Errorf("a rank whose process has no taker: %q", bad)
	}
	two := append([]PeerInfo(nil), peers...)
	two[1].Boot = "x:3"
	if bad := orphans(two, leader(two)); !strings.Contains(bad, "ranks 0 and 1 both take the rank table for one process") {
		t.Errorf("a process with two takers: %q", bad)
	}
}
