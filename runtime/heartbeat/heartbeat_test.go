package heartbeat

import (
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocl/runtime/bootstrap"
)

// fake is a rank of a job of fakes: its own listener, answered as a
// communicator's would be (a probe gets an answer unless the rank is
// stopped; a verdict is received), and the verdicts it took.
type fake struct {
	rank    int
	peers   []bootstrap.PeerInfo
	stopped atomic.Bool
	failed  atomic.Bool
	mu      sync.Mutex
	took    []Verdict
	hold    chan struct{} // a stopped rank's answers wait on it
}

func (f *fake) Rank() int                     { return f.rank }
func (f *fake) Ranks() int                    { return len(f.peers) }
func (f *fake) Peer(p int) bootstrap.PeerInfo { return f.peers[p] }
func (f *fake) Secret() []byte                { return nil }
func (f *fake) Unusable() bool                { return f.failed.Load() }
func (f *fake) Take(v Verdict) {
	f.mu.Lock()
	f.took = append(f.took, v)
	f.mu.Unlock()
	f.failed.Store(true)
}

func (f *fake) verdicts() []Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Verdict(nil), f.took...)
}

func (f *fake) serve(req bootstrap.Request) any {
	if f.stopped.Load() {
		<-f.hold // stopped: the connection stays open, nothing comes back
	}
	switch req.Kind {
	case bootstrap.AskProbe:
		return map[string]int{"calls": 0}
	case AskGone:
		if err := Receive(f, req.Body); err != nil {
			return map[string]string{"err": err.Error()}
		}
	}
	return struct{}{}
}

// job starts n fakes on loopback, each in a process of its own unless
// procs names them (same string: same process).
func job(t *testing.T, n int, procs []string) []*fake {
	t.Helper()
	hold := make(chan struct{})
	peers := make([]bootstrap.PeerInfo, n)
	fs := make([]*fake, n)
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		proc := string(rune('a' + r))
		if procs != nil {
			proc = procs[r]
		}
		peers[r] = bootstrap.PeerInfo{Rank: r, NRanks: n, Addr: ln.Addr().String(), Host: "h/boot", Proc: proc, Pid: 1000 + r}
		fs[r] = &fake{rank: r, peers: peers, hold: hold}
		go bootstrap.Serve(ln, r, nil, fs[r].serve)
		t.Cleanup(func() { ln.Close() })
	}
	t.Cleanup(func() { close(hold) })
	return fs
}

func TestWatchedIsTheNextProcess(t *testing.T) {
	fs := job(t, 5, []string{"a", "a", "b", "c", "c"})
	want := []int{-1, 2, 3, -1, 0}
	for r, f := range fs {
		if got := watched(f); got != want[r] {
			t.Errorf("rank %d watches %d, want %d", r, got, want[r])
		}
	}
	if got := watched(job(t, 1, nil)[0]); got != -1 {
		t.Errorf("a lone rank watches %d", got)
	}
	if w := Watch(fs[0], time.Second); w != nil {
		t.Error("a rank whose next rank shares its process started a watcher")
	}
	if w := Watch(fs[1], 0); w != nil {
		t.Error("a zero timeout (heartbeats off) started a watcher")
	}
	var none *Watcher
	none.Stop() // no watcher: nothing to stop or log
	none.Log()
}

// A stopped rank is named on every other rank, from the rank that watched
// it, and the rank itself is not told (it is stopped).
func TestAStoppedRankIsNamedOnEveryRank(t *testing.T) {
	const n, stopped = 7, 3
	fs := job(t, n, nil)
	timeout := 300 * time.Millisecond
	// Only the stopped rank's watcher runs: on a loaded host another one
	// could take a slow healthy peer for stopped, which is its job but not
	// this test's.
	w := Watch(fs[stopped-1], timeout)
	t.Cleanup(w.Stop)
	time.Sleep(2 * period(timeout)) // the watcher has heard its peer
	fs[stopped].stopped.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for r, f := range fs {
		if r == stopped {
			continue
		}
		for len(f.verdicts()) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		vs := f.verdicts()
		if len(vs) != 1 {
			t.Fatalf("rank %d took %d verdicts, want 1: %+v", r, len(vs), vs)
		}
		v := vs[0]
		if v.Root != stopped || v.From != stopped-1 || !strings.Contains(v.Detail, "stopped answering gocl's heartbeats") || !strings.Contains(v.Detail, "pid 1003, host h)") {
			t.Errorf("rank %d took %+v, want rank %d named by rank %d with its pid and host", r, v, stopped, stopped-1)
		}
	}
	if vs := fs[stopped].verdicts(); len(vs) != 0 {
		t.Errorf("the stopped rank took %+v", vs)
	}
}

// A watcher stopped (its communicator freed), or whose peer's listener is
// closed (the peer freed its communicator), ends without a verdict.
func TestAWatcherEndsQuietly(t *testing.T) {
	fs := job(t, 3, nil)
	timeout := 200 * time.Millisecond
	w := Watch(fs[0], timeout)
	w.Stop()
	w.Stop() // twice is fine
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()                               // an address that refuses
	fs[2].peers[0].Addr = ln.Addr().String() // rank 2 watches rank 0, whose listener is gone
	w2 := Watch(fs[2], timeout)
	time.Sleep(3 * timeout)
	w2.Stop()
	for r, f := range fs {
		if vs := f.verdicts(); len(vs) != 0 {
			t.Errorf("rank %d took %+v", r, vs)
		}
	}
}

func TestReceiveRefusesWhatIsMalformed(t *testing.T) {
	f := job(t, 3, nil)[1]
	for _, body := range []string{`{`, `{"root": 3, "from": 0}`, `{"root": -1, "from": 0}`, `{"root": 0, "from": 9}`, `{"root": 1, "from": 0}`} {
		if err := Receive(f, json.RawMessage(body)); err == nil || !strings.Contains(err.Error(), "rank 1: malformed heartbeat verdict") {
			t.Errorf("%s: got %v", body, err)
		}
	}
	if err := Receive(f, json.RawMessage(`{"root": 2, "from": 0, "detail": "d", "tell": [7, 1, 2, -1]}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(f.verdicts()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if vs := f.verdicts(); len(vs) != 1 || vs[0].Root != 2 || vs[0].From != 0 {
		t.Errorf("took %+v", vs)
	}
}
