// Package algo holds the collective algorithms, one collective per file, in
// NCCL's vocabulary: a call is cut into steps, a step's data into chunks, and
// each step is one of the primitives of prims.go (send, recv,
// recvReduceSend, recvCopySend, ...). Algorithms see only Links, so they run
// unchanged over every transport.
//
// Every collective has a ring form (bandwidth-optimal, pipelined in chunks)
// and a direct, one-shot form (one step of latency, for small buffers);
// allreduce, broadcast and reduce also have NCCL's double binary tree, and
// allreduce, allgather and reducescatter have recursive halving-doubling
// when the number of ranks is a power of two; allreduce has a hierarchical
// form for ranks on several hosts (hierarchical.go).
package algo

import (
	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/host"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Ctx is everything an algorithm needs for one call on one rank.
type Ctx struct {
	Rank, N int
	Links   []transport.Link // by peer rank; nil at Rank
	Hdr     wire.Header      // describes the call; Step and Len are set per frame
	Red     *kernels.Reducer // the reduction, for reducing collectives
	Elem    int              // bytes per element
	Chunk   int              // bytes per pipelined chunk (GOCL_BUFFSIZE)
	Local   int              // ranks of the call on this host (they share its caches)
	// Hosts lists the ranks of each host, in rank order, when every host
	// has the same number (AllReduceHier needs it); nil otherwise.
	Hosts [][]int
	// Scratch returns a buffer of n bytes owned by the communicator, valid
	// until the call returns. An algorithm calls it at most once per call.
	Scratch func(n int) []byte
	// Fail closes the communicator's links after an error so that a sender
	// blocked on a peer (and the peers themselves) stop waiting.
	Fail func(error)

	// sh is the frame header of the inline sends and receives: a field, so
	// that handing it to a Link does not move it to the heap at every call.
	sh wire.Header
}

// sendInline sends buf to peer as one frame of step 0 on the caller's
// goroutine, allocating nothing; the link must buffer it (c.buffered).
func (c *Ctx) sendInline(peer int, buf []byte) error {
	c.sh = c.Hdr
	return c.Links[peer].Send(&c.sh, buf)
}

// recvInline receives peer's frame of step 0 into buf, allocating nothing.
func (c *Ctx) recvInline(peer int, buf []byte) error {
	c.sh = c.Hdr
	return c.Links[peer].RecvInto(&c.sh, buf)
}

// exchangeInline sends this rank's block(c.Rank) to every peer, then
// receives each peer q's into block(q), all inline (every link must buffer
// the block): the one-shot exchange of the latency path. Peers are visited
// in a pairwise shift, so that no two ranks send to the same peer first.
func (c *Ctx) exchangeInline(block func(q int) []byte) error {
	for k := 1; k < c.N; k++ {
		if err := c.sendInline(c.peer(k), block(c.Rank)); err != nil {
			return c.failed(err)
		}
	}
	for k := 1; k < c.N; k++ {
		q := c.peer(-k)
		if err := c.recvInline(q, block(q)); err != nil {
			return c.failed(err)
		}
	}
	return nil
}

// buffered reports whether every link takes a frame of n bytes without the
// peer receiving it, so a rank may send to all before it receives. Links
// not made yet (a communicator that connects on first use) do not count:
// the algorithm's own peers are connected before it runs.
func (c *Ctx) buffered(n int) bool {
	for p, l := range c.Links {
		if p != c.Rank && l != nil && !l.Buffered(n) {
			return false
		}
	}
	return true
}

// failed fails the communicator after an error of an inline exchange (the
// primitives do it in run) and returns the error.
func (c *Ctx) failed(err error) error {
	if err != nil {
		c.Fail(err)
	}
	return err
}

func (c *Ctx) next() int      { return (c.Rank + 1) % c.N }
func (c *Ctx) prev() int      { return (c.Rank + c.N - 1) % c.N }
func (c *Ctx) peer(d int) int { return ((c.Rank+d)%c.N + c.N) % c.N }
func (c *Ctx) hdr(step int) *wire.Header {
	h := c.Hdr
	h.Step = uint32(step)
	return &h
}

// combiner reduces two partial results: the op itself, except PreMulSum,
// whose partials were scaled already and are only summed.
func (c *Ctx) combiner() *kernels.Reducer {
	if !c.Red.NeedsPrepare() {
		return c.Red
	}
	r, err := kernels.NewReducer(c.Red.Type(), abi.Sum, 1, nil)
	if err != nil {
		panic(err) // Sum exists for every valid type
	}
	return r
}

// span returns the [lo, hi) of part i when n items are split into parts
// nearly equal parts (earlier parts get the remainder).
func span(n, parts, i int) (int, int) {
	q, r := n/parts, n%parts
	lo := i*q + min(i, r)
	hi := lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// chunks is how many pipelined chunks a piece of n elements is cut into.
func (c *Ctx) chunks(n int) int {
	per := max(c.Chunk/max(c.Elem, 1), 1)
	return max((n+per-1)/per, 1)
}

// bytes converts an element range into a byte slice of buf.
func (c *Ctx) bytes(buf []byte, lo, hi int) []byte { return buf[lo*c.Elem : hi*c.Elem] }

// piece is chunk j of nsub of the element range [lo, hi) of buf.
func (c *Ctx) piece(buf []byte, lo, hi, nsub, j int) []byte {
	a, b := span(hi-lo, nsub, j)
	return c.bytes(buf, lo+a, lo+b)
}

// same reports whether two buffers start at the same address (in-place calls).
func same(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// prepare writes pre(src) into dst (a copy unless PreMulSum), skipping the
// copy when dst is src.
func (c *Ctx) prepare(dst, src []byte) {
	if c.Red != nil && c.Red.NeedsPrepare() {
		c.Red.Prepare(dst, src)
	} else if !same(dst, src) {
		copy(dst, src)
	}
}

// local finishes a reduction on one rank: recv = pre(send), finalized.
func (c *Ctx) local(send, recv []byte) {
	c.prepare(recv, send)
	c.Red.Finalize(recv)
}

// moveMax bounds the calls whose frames a link may take by reference as
// plain data movement (transport.Mover; shm's single-copy reads): above it
// the FIFO's copies, overlapped on two cores and kept in the shared cache,
// were as fast or faster (bench/SHM.md).
const moveMax = 1 << 20

// moves reports whether this call's frames are plain data movement (the
// receiver only copies them out) and its data is at most moveMax bytes: an
// allgather's result, a broadcast's message.
func (c *Ctx) moves() bool {
	n := int(c.Hdr.Count) * c.Elem
	switch c.Hdr.Coll {
	case wire.AllGather:
		n *= c.N
	case wire.Broadcast:
	default:
		return false
	}
	return n <= moveMax
}

// nontemporalResult reports whether a call writing its result to recv from
// send should write it with non-temporal stores (kernels.Nontemporal decides on
// the bytes the call keeps in the cache: its result and, out of place, its
// input beside it). Ranks sharing a host share its last-level cache, and
// while they run side by side (up to two per core) what counts is what all
// of them keep there; ranks that crowd a core more than two deep keep the
// one-rank rule (bench/TUNING.md).
func (c *Ctx) nontemporalResult(send, recv []byte) bool {
	n := int(c.Hdr.Count) * c.Elem
	if !same(send, recv) {
		n *= 2
	}
	if c.Local > 2 && c.Local <= 2*host.Cores() {
		return kernels.Nontemporal(n * c.Local / 2)
	}
	return kernels.Nontemporal(n)
}
