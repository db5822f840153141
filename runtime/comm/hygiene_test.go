package comm

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// held counts what this process holds: goroutines and file descriptors
// (sockets, memfd segments, eventfds...).
func held() (goroutines, fds int) {
	ents, _ := os.ReadDir("/proc/self/fd")
	return runtime.NumGoroutine(), len(ents)
}

// settles waits for the counts to come back to base (a closed link's
// goroutines end a moment after Close returns).
func settles(t *testing.T, what string, base [2]int) {
	t.Helper()
	var g, f int
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
		if g, f = held(); g <= base[0] && f <= base[1] {
			return
		}
	}
	buf := make([]byte, 1<<16)
	var links []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		links = append(links, l)
	}
	t.Errorf("after %s: %d goroutines (was %d), %d fds (was %d): %v\n%s", what, g, base[0], f, base[1], links, buf[:runtime.Stack(buf, true)])
}

// Goroutines and fds return to their counts after destroy, after abort
// (one rank aborts while the others wait in a collective), and after a peer
// fails mid-collective, over every transport.
func TestResourcesReturn(t *testing.T) {
	transports(t, func(t *testing.T) {
		const n = 3
		// Warm-up: process-wide things made once (the netpoller's epoll fd,
		// the rendezvous of NewUniqueID's first use) are not per communicator.
		warm, err := InitAll(n, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range warm {
			c.Destroy()
		}
		time.Sleep(50 * time.Millisecond)
		g, f := held()
		base := [2]int{g, f}
		for _, how := range []string{"destroy", "abort", "peer failure"} {
			comms, err := InitAll(n, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = allReduce(c, 1000)
					if how == "destroy" || errs[r] != nil {
						return
					}
					switch { // a second call the failing rank never makes
					case r == 0 && how == "abort":
						time.Sleep(50 * time.Millisecond)
						c.Abort()
					case r == n-1 && how == "peer failure":
						time.Sleep(50 * time.Millisecond)
						c.fail(fmt.Errorf("rank %d: simulated death", r))
					default:
						errs[r] = allReduce(c, 300_001)
						if errs[r] == nil {
							errs[r] = fmt.Errorf("rank %d: the collective succeeded without its peer", r)
						} else {
							errs[r] = nil // the expected failure
						}
					}
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("%s: rank %d: %v", how, r, err)
				}
			}
			for r, c := range comms {
				if how == "abort" && r == 0 {
					continue // aborted: already released
				}
				c.Destroy()
			}
			settles(t, how, base)
		}
	})
}
