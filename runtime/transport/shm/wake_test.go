package shm

import (
	"sync/atomic"
	"testing"
	"time"

	"gocl/runtime/wire"
)

// A receiver asleep on the futex is woken by the frame that its sender
// posts (post bumps the futex word only when the receiver's sleep flag is
// set), LL and Simple frames alike, well before the waits' 1 s backstop.
func TestSleepingReceiverIsWoken(t *testing.T) {
	a, b := cmaPair(t, CMAOff, CMAOff)
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	// Each side its own header: Send and RecvInto both write its Len.
	sh, rh := &wire.Header{Kind: wire.KindColl}, &wire.Header{Kind: wire.KindColl}
	for _, n := range []int{8, LLMax, LLMax + 1, 4096} {
		for range 3 {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- b.RecvInto(rh, make([]byte, n)) }()
			for atomic.LoadUint32(a.send.u32(offRecvWait)) == 0 { // the receiver is about to sleep
				if time.Since(start) > 5*time.Second {
					t.Fatalf("%d B: the receiver never went to sleep", n)
				}
				time.Sleep(50 * time.Microsecond)
			}
			time.Sleep(2 * time.Millisecond) // and is asleep by now, normally
			sent := time.Now()
			if err := a.Send(sh, make([]byte, n)); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("%d B: %v", n, err)
			}
			if d := time.Since(sent); d > 500*time.Millisecond {
				t.Fatalf("%d B: the sleeping receiver took %v to see the frame: the post did not wake it", n, d)
			}
		}
	}
}
