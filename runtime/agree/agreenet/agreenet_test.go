package agreenet

import (
	"encoding/json"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"gocl/runtime/agree"
	"gocl/runtime/bootstrap"
)

// fake is a rank of a job of fakes: its own listener answering the
// agreement's requests, as a communicator's does.
type fake struct {
	rank  int
	addrs []string
	node  *Node
}

func (f *fake) Rank() int             { return f.rank }
func (f *fake) Ranks() int            { return len(f.addrs) }
func (f *fake) Addr(p int) string     { return f.addrs[p] }
func (f *fake) Secret() []byte        { return nil }
func (f *fake) Window() time.Duration { return 4 * time.Second } // a request waits bootstrap.ProbeWait: 1 s
func (f *fake) NewRoot(time.Duration) (bootstrap.ID, error) {
	var id bootstrap.ID // a proposal's name; nobody joins it here
	for i := range id {
		id[i] = byte(f.rank + 1)
	}
	return id, nil
}

// job starts n ranks on loopback; those in gone have a listener that is
// closed (their process exited), those in stopped one that accepts and
// never answers (a stopped process), and neither has a node.
func job(t *testing.T, n int, gone, stopped []int) []*fake {
	t.Helper()
	addrs := make([]string, n)
	fs := make([]*fake, n)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[r] = ln.Addr().String()
		if slices.Contains(gone, r) {
			ln.Close()
			continue
		}
		if slices.Contains(stopped, r) {
			go bootstrap.Serve(ln, r, nil, func(bootstrap.Request) any { <-hold; return struct{}{} })
			t.Cleanup(func() { ln.Close() })
			continue
		}
		f := &fake{rank: r, addrs: addrs}
		f.node = New(f)
		fs[r] = f
		go bootstrap.Serve(ln, r, nil, func(req bootstrap.Request) any {
			if req.Kind != Ask {
				return struct{}{}
			}
			return f.node.Receive(req.Body)
		})
		t.Cleanup(func() { ln.Close() })
	}
	return fs
}

// agreeAll runs Agree on every live rank at once and checks that they
// decided the same members, want.
func agreeAll(t *testing.T, fs []*fake, explicit bool, exclude []int, want []int) {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]agree.Outcome, len(fs))
	errs := make([]error, len(fs))
	for r, f := range fs {
		if f == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r], errs[r] = f.node.Agree(explicit, exclude)
		}()
	}
	wg.Wait()
	var first *agree.Value
	for r, f := range fs {
		if f == nil {
			continue
		}
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		v := got[r].Value
		if !slices.Equal(v.Members, want) {
			t.Errorf("rank %d decided members %v, want %v", r, v.Members, want)
		}
		if first == nil {
			first = &v
		} else if !v.Equal(*first) {
			t.Errorf("rank %d decided %+v, rank of the first decision %+v", r, v, *first)
		}
	}
}

func TestEveryRankDecidesTheSameMembers(t *testing.T) {
	agreeAll(t, job(t, 4, nil, nil), false, nil, []int{0, 1, 2, 3})
}

// A rank whose listener refuses (its process exited) is agreed away.
func TestAGoneRankIsLeftOut(t *testing.T) {
	agreeAll(t, job(t, 5, []int{2}, nil), false, nil, []int{0, 1, 3, 4})
}

// An exclude list is taken as given, by every rank alike.
func TestAnExcludeList(t *testing.T) {
	fs := job(t, 4, nil, nil)
	fs[3] = nil // excluded: it does not take part
	agreeAll(t, fs, true, []int{3}, []int{0, 1, 2})
}

// A stopped rank (its listener accepts, nothing answers) is agreed away,
// also when a heartbeat's verdict (Dead) named it first (then nobody waits
// for its answers).
func TestAStoppedRankIsLeftOut(t *testing.T) {
	agreeAll(t, job(t, 4, nil, []int{1}), false, nil, []int{0, 2, 3})
	fs := job(t, 4, nil, []int{1})
	for _, f := range fs {
		if f != nil {
			f.node.Dead(1)
		}
	}
	agreeAll(t, fs, false, nil, []int{0, 2, 3})
}

func TestReceiveIgnoresWhatIsMalformed(t *testing.T) {
	f := job(t, 3, nil, nil)[1]
	for _, body := range []string{`{`, `{"from": 7, "to": 1}`, `{"from": 1, "to": 1}`, `{"from": 0, "to": 2}`, `{"from": -1, "to": 1}`} {
		if got := f.node.Receive(json.RawMessage(body)); len(got) != 0 {
			t.Errorf("%s: replies %+v", body, got)
		}
	}
}
