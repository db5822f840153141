// Package algo holds the collective algorithms, one collective per file, in
// NCCL's vocabulary: a call is cut into steps, a step's data into chunks, and
// chunks are pipelined through the links. Algorithms see only Links, so they
// run unchanged over every transport.
package algo

import (
	"gocl/kernels"
	"gocl/runtime/status"
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
	// Scratch returns a buffer of n bytes owned by the communicator, valid
	// until the call returns.
	Scratch func(n int) []byte
	// Fail closes the communicator's links after an error so that a sender
	// blocked on a peer (and the peers themselves) stop waiting.
	Fail func(error)
}

func (c *Ctx) next() int      { return (c.Rank + 1) % c.N }
func (c *Ctx) prev() int      { return (c.Rank + c.N - 1) % c.N }
func (c *Ctx) peer(d int) int { return ((c.Rank+d)%c.N + c.N) % c.N }
func (c *Ctx) hdr(step int) *wire.Header {
	h := c.Hdr
	h.Step = uint32(step)
	return &h
}

// recvInto receives the frame of step from peer into dst.
func (c *Ctx) recvInto(peer, step int, dst []byte) error {
	return c.Links[peer].RecvInto(c.hdr(step), dst)
}

// recvReduce receives the frame of step from peer (len(dst) bytes) and
// writes dst = payload ⊕ pre(local).
func (c *Ctx) recvReduce(peer, step int, dst, local []byte) error {
	h := c.hdr(step)
	h.Len = uint64(len(dst))
	return c.Links[peer].RecvWith(h, func(p []byte) { c.Red.Accumulate(dst, p, local) })
}

// sendReq is one queued frame.
type sendReq struct {
	peer, step int
	data       []byte
}

// sender sends queued frames in order on its own goroutine, so a rank can
// receive step s+1 while step s is still going out. Its queue holds every
// frame of the call, so enqueueing never blocks (a bounded queue could close
// a cycle of full queues around the ring). Frames a link buffers anyway go
// out inline until the first one that could wait: small messages then cost
// no goroutine hand-off, which is most of their latency.
type sender struct {
	c       *Ctx
	frames  int
	q       chan sendReq // nil until the goroutine starts
	done    chan error
	inlined error
	pending map[int]int // bytes sent inline to each peer during this call
}

func (c *Ctx) newSender(frames int) *sender { return &sender{c: c, frames: frames} }

func (s *sender) start() {
	s.q = make(chan sendReq, s.frames)
	s.done = make(chan error, 1)
	go s.loop()
}

func (s *sender) loop() {
	var err error
	defer func() { s.done <- err }()
	defer status.Catch(&err)
	for r := range s.q {
		if err == nil {
			err = s.c.Links[r.peer].Send(s.c.hdr(r.step), r.data)
		}
	}
}

func (s *sender) send(peer, step int, data []byte) {
	if s.q == nil {
		l := s.c.Links[peer]
		// The kernel must be able to hold everything sent inline to this
		// peer in this call: the peer may not read until it has sent too.
		if l.Buffered(s.pending[peer] + len(data)) {
			if s.pending == nil {
				s.pending = map[int]int{}
			}
			s.pending[peer] += len(data)
			if s.inlined == nil {
				if s.inlined = l.Send(s.c.hdr(step), data); s.inlined != nil {
					s.c.Fail(s.inlined) // unblock this rank's receives now
				}
			}
			return
		}
		s.start()
	}
	s.q <- sendReq{peer, step, data}
}

// wait closes the queue and returns the first send error.
func (s *sender) wait() error {
	if s.q == nil {
		return s.inlined
	}
	close(s.q)
	err := <-s.done
	if s.inlined != nil {
		return s.inlined
	}
	return err
}

// run executes body with a sender of capacity frames. On any error it fails
// the communicator, then waits for the sender: the call must not return while
// a goroutine still reads the caller's buffers.
func (c *Ctx) run(frames int, body func(s *sender) error) error {
	s := c.newSender(frames)
	err := body(s)
	if err != nil {
		c.Fail(err)
	}
	serr := s.wait()
	if err == nil && serr != nil {
		c.Fail(serr)
		err = serr
	}
	return err
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
