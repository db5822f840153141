package transport

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// Code finds the kind and the rank to blame with errors.As, through any
// wrapping; the sentence names the blamed rank and never the rank that got it.
func TestErrorsCarryKindAndPeer(t *testing.T) {
	want := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 4}
	got := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 5}
	cases := []struct {
		err  error
		kind Kind
		code status.Code
		peer int
		says string
	}{
		{TimedOut(7, 3, "waiting for allreduce #0"), KindTimeout, status.Timeout, 3, "no progress from rank 3"},
		{PeerClosed(7, 3, "connection reset"), KindPeerClosed, status.RemoteError, 3, "connection to rank 3 lost (connection reset)"},
		{PeerFailed(7, 3, "out of memory"), KindPeerFailed, status.RemoteError, 3, "rank 3 failed: out of memory"},
		{Aborted(7, 3), KindAborted, status.RemoteError, 3, "aborted"},
		{CheckFrame(want, got, 7, 3), KindMismatch, status.RemoteError, 3, "disagree"},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("allreduce #0 failed on rank 7: %w", c.err)
		var e *Error
		if !errors.As(wrapped, &e) || e.Kind != c.kind || e.Peer != c.peer || e.Self != 7 {
			t.Errorf("%v: errors.As found %+v, want kind %v, peer %d", c.err, e, c.kind, c.peer)
		}
		if status.CodeOf(wrapped) != c.code {
			t.Errorf("%v: code %v, want %v", c.err, status.CodeOf(wrapped), c.code)
		}
		if !strings.Contains(c.err.Error(), c.says) || (c.kind != KindMismatch && strings.Contains(c.err.Error(), "rank 7")) {
			t.Errorf("%q: want %q, and no mention of rank 7", c.err, c.says)
		}
	}
	if CheckFrame(want, want, 7, 3) != nil {
		t.Error("matching frames reported as a mismatch")
	}
}

// An abort reason carries the root rank and the kind to every rank it
// reaches, which then blames the root, not the sender.
func TestAbortReasonCarriesTheRoot(t *testing.T) {
	stalled := NewError(Error{Kind: KindStalled, Self: 0, Peer: 2, Via: -1, Detail: "did not answer"})
	e := ErrorOf(PeerFailed(1, 0, AbortReason(0, fmt.Errorf("allreduce failed on rank 0: %w", stalled))))
	if e == nil || e.Kind != KindStalled || e.Peer != 2 || e.Via != 0 || e.Self != 1 {
		t.Fatalf("relayed verdict: %+v", e)
	}
	if s := e.Error(); !strings.Contains(s, "rank 2 stalled: did not answer") || !strings.Contains(s, "(reported by rank 0)") {
		t.Errorf("relayed verdict says %q", s)
	}
	// a failure of the sender itself names the sender
	own := ErrorOf(PeerFailed(1, 0, AbortReason(0, status.Errorf(status.InvalidArgument, "bad buffer"))))
	if own.Kind != KindPeerFailed || own.Peer != 0 || own.Via != -1 || own.Error() != "rank 0 failed: bad buffer" {
		t.Errorf("sender's own failure: %+v (%q)", own, own.Error())
	}
	// a plain reason (no root) is the sender's
	if p := ErrorOf(PeerFailed(1, 0, "\x01gocl-root x y z")); p.Peer != 0 || p.Kind != KindPeerFailed {
		t.Errorf("malformed reason: %+v", p)
	}
}
