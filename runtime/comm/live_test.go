package comm

import (
	"sync"
	"testing"
	"time"
)

// The sampler walks the links once a second, not at every tick: a tick in
// between leaves the rates' samples alone, and the next second's gives the
// bytes moved over that second.
func TestSamplerWalksLinksOnceASecond(t *testing.T) {
	comms := localComms(t, 2)
	// Synthetic times an hour ahead: the background sampler, at the real
	// time, finds the last walk in its future and does not walk.
	t0 := time.Now().Add(time.Hour)
	t.Cleanup(func() { // the real sampler walks again
		registry.mu.Lock()
		registry.ratesAt = time.Time{}
		registry.mu.Unlock()
	})
	sample(t0)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := allReduce(c, 1<<16); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	sample(t0.Add(300 * time.Millisecond)) // a tick: no walk
	registry.mu.Lock()
	r := registry.comms[comms[0]].links[1]
	registry.mu.Unlock()
	if !r.at[1].Equal(t0) || !r.at[0].IsZero() {
		t.Fatalf("a tick within the second sampled the links: %v", r.at)
	}
	t1 := t0.Add(time.Second)
	sample(t1)
	registry.mu.Lock()
	r = registry.comms[comms[0]].links[1]
	v := comms[0].view(registry.comms[comms[0]], t1)
	registry.mu.Unlock()
	if !r.at[0].Equal(t0) || !r.at[1].Equal(t1) || r.sent[1] <= r.sent[0] {
		t.Fatalf("the second's walk: %+v", r)
	}
	if want := float64(r.sent[1] - r.sent[0]); v.SendBps != want {
		t.Errorf("send rate %v B/s, want %v (the bytes of the second)", v.SendBps, want)
	}
}

// Above statusAllLinks ranks a view lists only the links that moved bytes
// in the last second (or are waited on) and counts the others, so rank 0's
// gather of every view grows with N, not N²; at or under it, every link.
func TestLargeViewsListBusyLinks(t *testing.T) {
	const n = statusAllLinks + 6
	comms := localComms(t, n)
	t0 := time.Now().Add(time.Hour) // as in TestSamplerWalksLinksOnceASecond
	t.Cleanup(func() {
		registry.mu.Lock()
		registry.ratesAt = time.Time{}
		registry.mu.Unlock()
	})
	sample(t0)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := allReduce(c, 1<<16); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	t1 := t0.Add(time.Second)
	sample(t1)
	registry.mu.Lock()
	v := comms[0].view(registry.comms[comms[0]], t1)
	registry.mu.Unlock()
	if len(v.Links) == 0 || len(v.Links)+v.IdleLinks+v.Unconnected != n-1 || len(v.Links) > n/2 {
		t.Fatalf("%d ranks: %d links listed, %d idle, %d not made; want the busy ones listed and the rest counted", n, len(v.Links), v.IdleLinks, v.Unconnected)
	}
	for _, l := range v.Links {
		if l.SendBps == 0 && l.RecvBps == 0 && l.Waiting == nil {
			t.Errorf("an idle link is listed: %+v", l)
		}
	}
	small := localComms(t, 3)
	registry.mu.Lock()
	v = small[0].view(registry.comms[small[0]], t1)
	registry.mu.Unlock()
	if len(v.Links) != 2 || v.IdleLinks != 0 {
		t.Errorf("3 ranks: %d links listed, %d idle; want every link", len(v.Links), v.IdleLinks)
	}
}
