package transport

import "gocl/runtime/wire"

// Optional capabilities of a Link, found by type assertion (as io.WriterTo
// is): the algorithms and the communicator use them where a link has them
// and fall back to the plain Link methods otherwise.

// Lender is a Link that can lend the memory the peer will read its next frame
// from, so a producer (a reduction, a copy) writes the payload there directly:
// one pass over memory instead of a write into a buffer that Send copies.
type Lender interface {
	// Lend waits (up to the link's deadline) for room for one frame of n
	// bytes and returns the memory to fill. ok is false when the link cannot
	// lend n bytes at all (the caller then uses Send). Between Lend and
	// Commit no other Send or Lend may happen on the link.
	Lend(n int) (slot []byte, ok bool, err error)
	// Commit sends the lent slot as one frame with header h (h.Len is set to
	// the lent size).
	Commit(h *wire.Header) error
}

// Prober is a Link that can tell, without blocking, whether a frame from the
// peer is waiting to be received (receives from any source poll it).
type Prober interface {
	// Pending reports whether the next Recv would find a frame (or an error)
	// without waiting.
	Pending() bool
}

// Failer is a Link that says, without blocking or consuming anything, why it
// can no longer be used (nil while it can): this end closed, or the peer's
// abort with its verdict (shm: on the control connection; socket: an abort
// frame at the front of a connection). Every transport is one, and its
// waits check it before reporting a timeout or a lost connection; a rank
// that timed out on a peer which has just failed reads the peer's own
// verdict there (transporttest's VerdictBeatsTimeout).
type Failer interface {
	Failure() error
}
