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
	// Cancel gives the lent slot up unsent, when filling it failed (the call
	// fails, and with it the communicator): what the lend held (the shared
	// mapping) is released, and the link is fit only to be closed.
	Cancel()
}

// PieceReceiver is a Link that can hand a frame's payload over in pieces,
// each where it lies (a FIFO slot, or a cache-sized buffer that a
// single-copy read has just filled), so a reduction consumes a large frame
// without first gathering it into one buffer.
type PieceReceiver interface {
	// RecvPieces receives the frame want describes (want.Len set), calling
	// use(off, piece) for consecutive pieces that cover it in order. Every
	// piece but the last is a multiple of 64 bytes (whole elements of every
	// type); piece is valid only during the call.
	RecvPieces(want *wire.Header, use func(off int, piece []byte)) error
}

// Poster is a Link that can send a large frame by reference: the peer reads
// it from the sender's memory (shm's cross-memory attach), so the frame's
// bytes must stay unchanged, and in place, until Flush returns.
type Poster interface {
	// Post sends data as one frame if the link takes it by reference
	// (posted true) and returns without waiting for the peer to read it;
	// posted false: the link did not take it, use Send.
	Post(h *wire.Header, data []byte) (posted bool, err error)
	// Flush waits until the peer has read every frame posted so far.
	Flush() error
}

// Mover is a Poster that also takes by reference a frame of plain data
// movement (bytes the peer only copies out, as an allgather's blocks or a
// broadcast's message, never reduces) where its single copy is worth it for
// those though not for frames the peer reduces.
type Mover interface {
	Poster
	// Moves reports whether Move takes a frame of n bytes.
	Moves(n int) bool
	// Move sends data by reference as Post does; only for a size Moves took.
	Move(h *wire.Header, data []byte) error
}

// Prober is a Link that can tell, without blocking, whether a frame from the
// peer is waiting to be received (receives from any source poll it).
type Prober interface {
	// Pending reports whether the next Recv would find a frame (or an error)
	// without waiting.
	Pending() bool
}

// Channeled is a Link made of several FIFOs to its peer (shm's channels,
// NCCL's word), each a Link of its own: a large call is cut into parts, one
// per channel, each run on its own goroutine. The communicator agrees the
// counts at init (NumChannels, UseChannels) so every rank splits a call
// alike; the algorithms split by Channels.
type Channeled interface {
	// NumChannels is how many channels the pair has.
	NumChannels() int
	// UseChannels sets how many channels Channels offers: at most hi (and
	// at most NumChannels), and lo, the fewest a split call should use.
	UseChannels(lo, hi int)
	// Channels returns the links of each channel (the first is the link
	// itself; the slice is shared, not to be modified) and the fewest
	// channels a split call uses.
	Channels() (links []Link, min int)
}

// TrySender is a Link that can start a frame without waiting on its peer:
// TrySend writes what the kernel takes now and returns. A sender may then
// go on at once (receive, reduce) instead of handing every frame that might
// not fit the kernel's buffers to a goroutine, whose hand-offs between
// threads cost more than a 32-64 KiB frame takes to cross a link.
type TrySender interface {
	// TrySend writes as much of the frame as goes without waiting: all of
	// it (done true), or a part, which Finish or Abandon must end before
	// the link carries anything else. Nothing written is done false too:
	// Finish then sends the whole frame.
	TrySend(h *wire.Header, data []byte) (done bool, err error)
	// Finish writes the rest of the frame TrySend started, waiting as Send
	// does (up to the deadline); it may run on another goroutine.
	Finish() error
	// Abandon gives the started frame up: the link is closed, since its
	// peer would read a frame cut short.
	Abandon()
}
