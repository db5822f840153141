package transport

import (
	"testing"
	"time"
)

// Arming a call's deadline reads no clock; the first wait that asks for it
// fixes it at the timeout from then, for every later ask in the call; the
// next Arm starts over, and Arm(0) and Set are what they say.
func TestDeadlineIsReadOnlyWhenAsked(t *testing.T) {
	var d Deadline
	if got := d.UnixNano(); got != 0 {
		t.Fatalf("zero Deadline: %d, want 0 (none)", got)
	}
	d.Arm(time.Minute)
	if d.at.Load() != 0 {
		t.Fatal("Arm fixed the deadline: it must wait for the first wait that asks")
	}
	time.Sleep(20 * time.Millisecond)
	before := Now().UnixNano()
	got := d.UnixNano()
	if lo, hi := before+int64(time.Minute), Now().UnixNano()+int64(time.Minute); got < lo || got > hi {
		t.Fatalf("deadline %d, want a minute after the first ask, in [%d, %d]", got, lo, hi)
	}
	time.Sleep(time.Millisecond)
	if again := d.UnixNano(); again != got {
		t.Fatalf("second ask in one call: %d, want the first's %d", again, got)
	}
	d.Arm(time.Minute)
	if next := d.UnixNano(); next <= got {
		t.Fatalf("the next call's deadline %d is not later than the last call's %d", next, got)
	}
	d.Arm(0)
	if got := d.UnixNano(); got != 0 {
		t.Fatalf("Arm(0): %d, want 0 (none)", got)
	}
	at := time.Unix(100, 5)
	d.Set(at)
	if got := d.UnixNano(); got != at.UnixNano() {
		t.Fatalf("Set(%v): %d", at, got)
	}
	d.Set(time.Time{})
	if got := d.UnixNano(); got != 0 {
		t.Fatalf("Set(zero): %d, want 0 (none)", got)
	}
}
