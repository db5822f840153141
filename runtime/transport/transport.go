// Package transport defines the Link, the one interface every transport
// implements (inproc within a process, shm between processes of one host,
// socket otherwise; CUDA IPC later), its optional capabilities, and the
// errors they share. transporttest checks a Link against the contract.
package transport

import (
	"time"

	"gocl/runtime/wire"
)

// Link is one rank's ordered, reliable message pipe to one peer, both ways.
// Frames arrive in the order they were sent. At most one goroutine sends and
// one goroutine receives on a Link at a time (the algorithms guarantee it).
type Link interface {
	// Send writes one frame: h (h.Len is set to len(data)) then data. It
	// returns once data may be reused.
	Send(h *wire.Header, data []byte) error
	// RecvInto reads the next frame, checks it against want (want.Len is set
	// to len(dst)) and stores its payload in dst.
	RecvInto(want *wire.Header, dst []byte) error
	// RecvWith reads the next frame of want.Len bytes like RecvInto and passes
	// the payload to use; the slice is only valid during the call, which lets
	// a reduction read the bytes where they already are.
	RecvWith(want *wire.Header, use func(payload []byte)) error
	// SetDeadline bounds every later Send and Recv; the zero time means none.
	SetDeadline(t time.Time)
	// Close fails blocked and later calls on this end and makes the peer's
	// calls fail with a "peer closed" error.
	Close() error
	// Abort is Close that first tells the peer why (best effort), so a
	// failure deep in the ring reaches every rank with its root cause.
	Abort(reason string)
	// Name says which transport this is, for logs ("inproc", "shm", "socket").
	Name() string
	// Buffered reports whether Sends totalling n bytes return without the
	// peer receiving anything (the kernel buffers them), so they may be done
	// inline by a rank that receives only afterwards.
	Buffered(n int) bool
	// Failure says, without blocking or consuming anything, why the link
	// can no longer be used (nil while it can): this end closed, or the
	// peer's abort with its verdict (shm: on the control connection;
	// socket: an abort frame at the front of a connection). Waits check it
	// before reporting a timeout or a lost connection, so a rank that timed
	// out on a peer which has just failed reads the peer's own verdict there
	// (transporttest's VerdictBeatsTimeout).
	Failure() error
}
