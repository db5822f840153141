package agree

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A rank the heartbeats declared dead is not waited for: ranks 0 and 1 of
// 3 decide at once without rank 2, which never answers (stopped), instead
// of waiting out the join window; without the verdict they wait it out.
func TestDeadRankIsNotWaitedFor(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprint("declared=", declared), func(t *testing.T) {
			const n, window = 3, 10 * time.Second
			ms := make([]*Machine, n)
			for r := range n {
				ms[r] = New(Config{Rank: r, N: n, Timeout: window, NewID: func() ([]byte, error) { return []byte{byte(r)}, nil }})
			}
			var queue []Msg
			outcome := make([]*Outcome, 2)
			take := func(r int, out []Msg, o *Outcome) {
				queue = append(queue, out...)
				if o != nil {
					outcome[r] = o
				}
			}
			now := time.Duration(0)
			for r := range 2 {
				if declared {
					out, o := ms[r].Dead(now, 2)
					take(r, out, o)
				}
				out, o := ms[r].Start(now, false, nil)
				take(r, out, o)
			}
			for ; now < Bound(window) && (outcome[0] == nil || outcome[1] == nil); now += ms[0].Tick() {
				for len(queue) > 0 {
					m := queue[0]
					queue = queue[1:]
					if m.To == 2 { // stopped: the ask times out
						out, o := ms[m.From].Unreachable(now, 2, false)
						take(m.From, out, o)
						continue
					}
					out, o := ms[m.To].Receive(now, m)
					take(m.To, out, o)
				}
				for r := range 2 {
					out, o := ms[r].Step(now)
					take(r, out, o)
				}
			}
			for r := range 2 {
				o := outcome[r]
				if o == nil || o.Err != nil || !slices.Equal(o.Value.Members, []int{0, 1}) {
					t.Fatalf("rank %d: outcome %+v, want members [0 1]", r, o)
				}
			}
			if declared && now >= window/2 {
				t.Errorf("decided at %v with rank 2 declared dead; want well inside the join window %v", now, window)
			}
			if !declared && now < window {
				t.Errorf("decided at %v without waiting the join window %v for a silent rank", now, window)
			}
		})
	}
}
