package shm_test

import (
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// A link that shares the communicator's Deadline (transport.DeadlineSharer)
// moves frames under it, a wait that has to sleep times out at the shared
// timeout, and SetDeadline gives the link its own deadline back.
func TestSharedDeadline(t *testing.T) {
	a, b := connect(t)
	defer a.Close()
	defer b.Close()
	var d transport.Deadline
	b.(transport.DeadlineSharer).ShareDeadline(&d)
	h := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 2}
	for range 100 {
		d.Arm(time.Minute)
		if err := a.Send(h, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		if err := b.RecvInto(h, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	d.Arm(50 * time.Millisecond)
	start := time.Now()
	err := b.RecvInto(h, make([]byte, 8))
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindTimeout {
		t.Fatalf("receive with nothing sent and a shared 50 ms deadline: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Fatalf("timed out after %v, want about 50 ms", took)
	}
	if d.UnixNano() == 0 {
		t.Fatal("the timed-out wait did not take its deadline from the shared Deadline")
	}
	b.SetDeadline(time.Now().Add(-time.Second)) // the link's own, already passed
	d.Arm(time.Minute)
	err = b.RecvInto(h, make([]byte, 8))
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindTimeout {
		t.Fatalf("after SetDeadline in the past: %v, want a timeout (the link's own deadline, not the shared one)", err)
	}
}
