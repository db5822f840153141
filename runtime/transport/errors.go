package transport

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// Kind says what went wrong with a peer, for code that decides what to do
// (errors.As finds the *Error; nobody parses the sentence).
type Kind int

const (
	// KindTimeout: no progress from Peer before the deadline.
	KindTimeout Kind = iota + 1
	// KindPeerClosed: Peer's end went away without a reason (it exited, crashed,
	// or its host became unreachable).
	KindPeerClosed
	// KindPeerFailed: Peer failed or aborted and said why (Detail).
	KindPeerFailed
	// KindAborted: this end was closed, by an abort here or a failure of
	// another operation of the same communicator.
	KindAborted
	// KindMismatch: Peer sent a frame of another call (Err is the
	// *wire.MismatchError naming both calls).
	KindMismatch
	// KindStalled: a diagnosis after a timeout: Peer's process did not
	// answer a liveness probe, or it answers but is not making the call
	// (Detail says which).
	KindStalled
)

var kindNames = [...]string{KindTimeout: "timeout", KindPeerClosed: "peer closed", KindPeerFailed: "peer failed",
	KindAborted: "aborted", KindMismatch: "mismatch", KindStalled: "stalled"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// Code is the result code the C API returns for the kind.
func (k Kind) Code() status.Code {
	if k == KindTimeout || k == KindStalled {
		return status.Timeout
	}
	return status.RemoteError
}

// Error is a failure involving one peer. Peer is the rank to blame: the
// rank at the other end of the link, or the root of the wait chain when it
// was learned from another rank (Via). The rank that got the error is not
// part of it: the layer that knows the call says it once.
type Error struct {
	Kind   Kind
	Self   int    // the rank that got the error
	Peer   int    // the rank the failure is about
	Via    int    // the rank that reported it; -1 when seen on Peer's own link
	What   string // what this end was doing ("waiting for allreduce #3 ...")
	Detail string // the cause in words (a socket error, the peer's reason, a diagnosis)
	Err    error  // the underlying error, if any
}

func (e *Error) Error() string {
	var s string
	switch e.Kind {
	case KindTimeout:
		s = fmt.Sprintf("timed out: no progress from rank %d within the communicator's timeout (GOCL_TIMEOUT, or the timeout given at init)", e.Peer)
		if e.What != "" {
			s += " while " + e.What
		}
		s += ": rank " + strconv.Itoa(e.Peer) + " is stuck, too slow, or not making the same call (raise the timeout if it is only slow)"
	case KindStalled:
		s = fmt.Sprintf("timed out: rank %d stalled: %s", e.Peer, e.Detail)
	case KindPeerClosed:
		s = fmt.Sprintf("connection to rank %d lost (%s): rank %d exited, crashed, aborted its communicator or failed an earlier operation", e.Peer, e.Detail, e.Peer)
	case KindPeerFailed:
		if e.Self == e.Peer { // this rank's own failure (an abort)
			return e.Detail
		}
		s = fmt.Sprintf("rank %d failed: %s", e.Peer, e.Detail)
	case KindAborted:
		s = fmt.Sprintf("the communicator was aborted (or failed) while talking to rank %d", e.Peer)
	case KindMismatch:
		s = e.Err.Error()
	default:
		s = fmt.Sprintf("%s with rank %d: %s", e.Kind, e.Peer, e.Detail)
	}
	if e.Via >= 0 && e.Via != e.Peer {
		s += fmt.Sprintf(" (reported by rank %d)", e.Via)
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// coded wraps e with its kind's result code, so status.CodeOf sees it.
func coded(e *Error) error { return &status.Error{Code: e.Kind.Code(), Err: e} }

// ErrorOf finds the transport error in err's chain (nil if none).
func ErrorOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// NewError makes a coded transport error (the communicator uses it for the
// verdicts it reaches about a rank).
func NewError(e Error) error { return coded(&e) }

// The constructors the transports use. self is kept in Error.Self, not in
// the sentence: the communicator names the rank and the call once.

// PeerClosed is the error for a peer that went away.
func PeerClosed(self, peer int, detail string) error {
	return coded(&Error{Kind: KindPeerClosed, Self: self, Peer: peer, Via: -1, Detail: detail})
}

// PeerFailed is the error for a peer that aborted and said why. A reason
// made by AbortReason names the root of the failure, which becomes Peer
// (with the sender as Via) and keeps its kind.
func PeerFailed(self, peer int, reason string) error {
	if root, kind, msg, ok := decodeReason(reason); ok && root != peer {
		e := &Error{Kind: kind, Self: self, Peer: root, Via: peer, Detail: msg}
		if kind == KindTimeout {
			e.What, e.Detail = msg, ""
		}
		return coded(e)
	} else if ok {
		reason = msg
	}
	return coded(&Error{Kind: KindPeerFailed, Self: self, Peer: peer, Via: -1, Detail: reason})
}

// TimedOut is the error for a wait that passed its deadline.
func TimedOut(self, peer int, what string) error {
	return coded(&Error{Kind: KindTimeout, Self: self, Peer: peer, Via: -1, What: what})
}

// Aborted is the error for calls on a link closed by its own side.
func Aborted(self, peer int) error {
	return coded(&Error{Kind: KindAborted, Self: self, Peer: peer, Via: -1})
}

// CheckFrame validates a received header against the expected one; a
// disagreement is a Mismatch.
func CheckFrame(want, got *wire.Header, self, peer int) error {
	if err := wire.Match(want, got, self, peer); err != nil {
		return coded(&Error{Kind: KindMismatch, Self: self, Peer: peer, Via: -1, Err: err})
	}
	return nil
}

// reasonMark starts an abort reason made by AbortReason; a reason without it
// (an older peer, a test) is plain text.
const reasonMark = "\x01gocl-root "

// AbortReason is what Link.Abort sends for err, failing rank self: the root
// rank and kind travel with the sentence, so every rank the abort reaches
// names the same root however far it is from it. A failure not caused by
// another rank (a bad argument, an abort) names self.
func AbortReason(self int, err error) string {
	root, kind, msg := self, KindPeerFailed, err.Error()
	if e := ErrorOf(err); e != nil && e.Kind != KindAborted && e.Kind != KindMismatch {
		root, kind, msg = e.Peer, e.Kind, e.Detail
		if e.Kind == KindTimeout {
			msg = e.What
		}
	}
	return reasonMark + strconv.Itoa(root) + " " + strconv.Itoa(int(kind)) + " " + msg
}

func decodeReason(r string) (root int, kind Kind, msg string, ok bool) {
	rest, found := strings.CutPrefix(r, reasonMark)
	if !found {
		return 0, 0, "", false
	}
	f := strings.SplitN(rest, " ", 3)
	if len(f) != 3 {
		return 0, 0, "", false
	}
	root, err1 := strconv.Atoi(f[0])
	k, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || root < 0 || k <= 0 || k >= len(kindNames) {
		return 0, 0, "", false
	}
	return root, Kind(k), f[2], true
}
