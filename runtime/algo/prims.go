package algo

import (
	"cmp"
	"slices"
	"sync"

	"gocl/kernels"
	"gocl/runtime/status"
	"gocl/runtime/transport"
)

// The primitives, named as NCCL names them (src/device/prims_*.h). Each is
// one step of an algorithm on one chunk:
//
//	send                the peer gets a local buffer
//	copySend            the peer gets pre(local) (PreMulSum scales, others copy)
//	sendCopy            dst = local, and the peer gets it
//	recv                a frame lands in its final place (NCCL's directRecv:
//	                    links read into the destination, no FIFO copy)
//	recvReduceCopy      dst = payload ⊕ local
//	recvReduceSend      the next peer gets payload ⊕ local
//	recvReduceCopySend  dst = payload ⊕ local, finished, and the next peer gets it
//	recvCopySend        dst = payload, and the next peer gets it
//	forward             n-1 frames round the ring: recvCopySend, then recv
//	recvAllReduceCopy   a frame from every peer, then dst = all inputs
//	                    reduced in rank order (one-shot reductions)
//
// A send goes one of two ways, chosen per peer at its first frame of a call:
//
//   - lent: the link implements transport.Lender, and whatever produces the
//     frame (a copy, a reduction) writes it straight into the peer's slot, on
//     the caller's goroutine: one pass over memory per step. Frames are
//     produced in the order the peer consumes them, and every algorithm
//     sends at most one frame to a peer before it receives the frame that
//     frees the next (chunk by chunk), so a Lender buffering two frames
//     (NCCL keeps eight) can never close a cycle of waits (schedule_test.go
//     runs testdata/'s schedules over links that hold to it). A frame the
//     link will not lend but takes by reference (transport.Poster: the peer
//     reads it from this rank's memory, and wait flushes it before the
//     call returns) is posted on the caller's goroutine too, in order.
//   - queued: the frame is built in local memory and handed to the call's
//     sender goroutine (or sent inline when the link buffers it anyway), so
//     a rank receives step s+1 while step s is still going out. The sender
//     keeps every frame of the call, so queueing never blocks.

// sendMode is how this call sends to one peer.
type sendMode uint8

const (
	undecided sendMode = iota
	queued
	lent
)

// sendReq is one queued frame: whole, or (started) the rest of one that
// TrySend began on the caller's goroutine.
type sendReq struct {
	peer, step int
	data       []byte
	started    bool
}

// prims runs the primitives of one call on one rank.
type prims struct {
	c           *Ctx
	mode        []sendMode // by peer
	nontemporal bool       // the call's result is written past the caches (kernels.Nontemporal)
	move        bool       // the call's frames are plain data movement, small enough to go by reference (Ctx.moves)

	// queued frames
	mu      sync.Mutex
	q       []sendReq
	closed  bool
	wake    chan struct{} // nil until the sender goroutine starts
	done    chan error
	inlined error              // first error of a frame sent on the caller's goroutine
	pending map[int]int        // bytes sent inline to each peer during this call
	posted  []transport.Poster // links that took a frame by reference from the caller, flushed by wait
	qposted []transport.Poster // the same, from the sender goroutine, flushed by it
}

// run executes body with the call's primitives. On any error it fails the
// communicator, then waits for the sender: the call must not return while a
// goroutine still reads the caller's buffers.
func (c *Ctx) run(body func(p *prims) error) error {
	return c.runNontemporal(kernels.Nontemporal(int(c.Hdr.Count)*c.Elem), body)
}

// runNontemporal is run with the choice of non-temporal stores made by the caller.
func (c *Ctx) runNontemporal(nontemporal bool, body func(p *prims) error) error {
	p := &prims{c: c, mode: make([]sendMode, c.N), nontemporal: nontemporal, move: c.moves()}
	err := body(p)
	if err != nil {
		c.Fail(err)
	}
	serr := p.wait()
	if err == nil && serr != nil {
		c.Fail(serr)
		err = serr
	}
	return err
}

// ---- sending

// produce sends a frame of n bytes to peer that fill writes: into the peer's
// lent slot when it has one, else into tmp, which is then posted by
// reference or queued.
func (p *prims) produce(peer, step, n int, fill func(out []byte) error, tmp []byte) error {
	if n == 0 {
		return nil
	}
	if p.mode[peer] != queued {
		if l, ok := p.c.Links[peer].(transport.Lender); ok {
			slot, ok, err := l.Lend(n)
			if err != nil {
				return err
			}
			if ok {
				p.mode[peer] = lent
				if err := fill(slot[:n]); err != nil {
					l.Cancel()
					return err
				}
				return l.Commit(p.c.hdr(step))
			}
		}
		if ps, ok := p.c.Links[peer].(transport.Poster); ok {
			if err := fill(tmp); err != nil {
				return err
			}
			posted, err := ps.Post(p.c.hdr(step), tmp[:n])
			if posted {
				p.mode[peer] = lent
				p.posted = flushLater(p.posted, ps)
				return err
			}
			// Queued from now on (earlier frames are posted already, so the
			// order holds); never sent inline, since a link may hold a frame
			// it did not lend until its peer has read it.
			p.mode[peer] = queued
			p.enqueue(peer, step, tmp)
			return nil
		}
		p.mode[peer] = queued
	}
	if err := fill(tmp); err != nil {
		return err
	}
	p.enqueue(peer, step, tmp)
	return nil
}

// mover is peer's link when it takes n bytes of this call's data movement
// by reference (transport.Mover), else nil. Not after a frame was queued
// for the peer: one posted now would overtake it.
func (p *prims) mover(peer, n int) transport.Mover {
	if !p.move || p.mode[peer] == queued {
		return nil
	}
	if m, ok := p.c.Links[peer].(transport.Mover); ok && m.Moves(n) {
		return m
	}
	return nil
}

// moveRef hands src to m by reference; wait flushes it.
func (p *prims) moveRef(m transport.Mover, step int, src []byte) error {
	err := m.Move(p.c.hdr(step), src)
	p.posted = flushLater(p.posted, m)
	return err
}

// flushLater adds ps to the links a call flushes before it returns (each
// once): they took frames by reference.
func flushLater(posted []transport.Poster, ps transport.Poster) []transport.Poster {
	if !slices.Contains(posted, ps) {
		posted = append(posted, ps)
	}
	return posted
}

// send: the peer gets src.
func (p *prims) send(peer, step int, src []byte) error {
	if m := p.mover(peer, len(src)); m != nil {
		return p.moveRef(m, step, src)
	}
	if p.mode[peer] == queued { // the common path: no closure
		if len(src) > 0 {
			p.enqueue(peer, step, src)
		}
		return nil
	}
	return p.produce(peer, step, len(src), func(out []byte) error {
		if !same(out, src) {
			transport.CopyCached(out, src)
		}
		return nil
	}, src)
}

// copySend: the peer gets pre(src); tmp holds it when the peer cannot lend.
func (p *prims) copySend(peer, step int, src, tmp []byte) error {
	if !p.c.Red.NeedsPrepare() {
		return p.send(peer, step, src)
	}
	return p.produce(peer, step, len(src), func(out []byte) error {
		p.c.Red.Prepare(out, src)
		return nil
	}, tmp)
}

// sendCopy: dst = src, and the peer gets it; block by block when the peer
// lends its slot, so that src is read from memory once. When it does not,
// src itself is the frame (posted by reference or queued: the caller's
// input, unchanged until the call ends) and dst is copied after: a peer
// that reads the sender's memory (shm's single copy) reads src while this
// rank copies it, instead of waiting for the copy.
func (p *prims) sendCopy(peer, step int, src, dst []byte) error {
	if same(src, dst) {
		return p.send(peer, step, src)
	}
	if m := p.mover(peer, len(src)); m != nil { // the peer reads src while this rank copies it
		err := p.moveRef(m, step, src)
		if err == nil {
			kernels.Copy(dst, src, p.nontemporal)
		}
		return err
	}
	lent := false
	err := p.produce(peer, step, len(src), func(out []byte) error {
		if !same(out, src) {
			lent = true
			copyTwice(out, dst, src, p.nontemporal)
		}
		return nil
	}, src)
	if err == nil && !lent {
		kernels.Copy(dst, src, p.nontemporal)
	}
	return err
}

// copyTwice copies src into out (cached: a FIFO slot, read next) and into
// dst (with non-temporal stores when nontemporal), a block at a time, so that src is read once.
func copyTwice(out, dst, src []byte, nontemporal bool) {
	const block = 16 << 10 // stays in L1 between its two copies
	for o := 0; o < len(src); o += block {
		e := min(o+block, len(src))
		kernels.Copy(out[o:e], src[o:e], false)
		kernels.Copy(dst[o:e], src[o:e], nontemporal)
	}
}

// ---- receiving

// recv: the frame of step from peer lands in dst. A result large enough
// to bypass the caches (p.nontemporal) is copied out of a shared-memory FIFO with
// non-temporal stores.
func (p *prims) recv(peer, step int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if s, ok := p.c.Links[peer].(transport.PieceReceiver); ok && p.nontemporal {
		h := p.c.hdr(step)
		h.Len = uint64(len(dst))
		return s.RecvPieces(h, func(off int, pl []byte) { kernels.Copy(dst[off:off+len(pl)], pl, true) })
	}
	return p.c.Links[peer].RecvInto(p.c.hdr(step), dst)
}

// recvReduceCopy: dst = payload ⊕ local, reduced by red (c.Red when local is
// this rank's input, c.combiner() when it is a partial result).
func (p *prims) recvReduceCopy(red *kernels.Reducer, peer, step int, dst, local []byte) error {
	if len(dst) == 0 {
		return nil
	}
	h := p.c.hdr(step)
	h.Len = uint64(len(dst))
	if s, ok := p.c.Links[peer].(transport.PieceReceiver); ok {
		return s.RecvPieces(h, func(off int, pl []byte) {
			red.Accumulate(dst[off:off+len(pl)], pl, local[off:off+len(pl)])
		})
	}
	return p.c.Links[peer].RecvWith(h, func(pl []byte) { red.Accumulate(dst, pl, local) })
}

// recvReduceSend: to gets payload ⊕ local as its frame of step next; tmp
// holds it when to cannot lend.
func (p *prims) recvReduceSend(red *kernels.Reducer, from, to, step, next int, local, tmp []byte) error {
	return p.produce(to, next, len(local), func(out []byte) error {
		return p.recvReduceCopy(red, from, step, out, local)
	}, tmp)
}

// recvReduceCopySend: dst = payload ⊕ local, finished (Avg divides), and to
// gets it as its frame of step next: one pass (kernels.AccumulateCopy), the payload and local read
// once, the result written to the peer's slot and to dst together.
func (p *prims) recvReduceCopySend(from, to, step, next int, dst, local []byte) error {
	return p.produce(to, next, len(dst), func(out []byte) error {
		h := p.c.hdr(step)
		h.Len = uint64(len(dst))
		if s, ok := p.c.Links[from].(transport.PieceReceiver); ok {
			return s.RecvPieces(h, func(off int, pl []byte) {
				e := off + len(pl)
				p.c.Red.AccumulateCopy(out[off:e], dst[off:e], pl, local[off:e], p.nontemporal)
			})
		}
		return p.c.Links[from].RecvWith(h, func(pl []byte) { p.c.Red.AccumulateCopy(out, dst, pl, local, p.nontemporal) })
	}, dst)
}

// recvAllReduceCopy: every peer's frame of step 0 lands in slot(peer)
// (peers taken r-1, r-2, ..., the pairwise shift they send in), then dst =
// slot(0) ⊕ slot(1) ⊕ ... ⊕ slot(N-1), finished (Avg divides). slot(Rank)
// holds this rank's input already. The inputs are reduced in rank order, so
// every rank that reduces the same inputs gets identical bits.
func (p *prims) recvAllReduceCopy(dst []byte, slot func(q int) []byte) error {
	c := p.c
	for k := 1; k < c.N; k++ {
		q := c.peer(-k)
		if err := p.recv(q, 0, slot(q)); err != nil {
			return err
		}
	}
	reduceInOrder(c, dst, slot)
	c.Red.Finalize(dst)
	return nil
}

// forward is a ring's all-gather half: n-1 frames come in from prev at
// steps step, step+1, ... into dst(t), and each but the last goes on to next.
func (p *prims) forward(prev, next, n, step int, dst func(t int) []byte) error {
	for t := 0; t < n-1; t++ {
		var err error
		if t < n-2 {
			err = p.recvCopySend(prev, next, step+t, step+t+1, dst(t))
		} else {
			err = p.recv(prev, step+t, dst(t))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// recvCopySend: dst = payload, and to gets it as its frame of step next,
// block by block so that the payload is read from memory once.
func (p *prims) recvCopySend(from, to, step, next int, dst []byte) error {
	if m := p.mover(to, len(dst)); m != nil {
		if err := p.recv(from, step, dst); err != nil {
			return err
		}
		return p.moveRef(m, next, dst)
	}
	return p.produce(to, next, len(dst), func(out []byte) error {
		if same(out, dst) {
			return p.recv(from, step, dst)
		}
		h := p.c.hdr(step)
		h.Len = uint64(len(dst))
		return p.c.Links[from].RecvWith(h, func(pl []byte) { copyTwice(out, dst, pl, p.nontemporal) })
	}, dst)
}

// ---- the sender goroutine

func (p *prims) enqueue(peer, step int, data []byte) {
	started := false
	if p.wake == nil {
		l := p.c.Links[peer]
		// A link that can start a frame without waiting (sockets) takes
		// what fits at once, and the sender goroutine starts only for the
		// rest: between two processes a hand-off to a goroutine costs more
		// than the small frame's whole trip (bench/CALLPATH.md, "Inline sends").
		if ts, ok := l.(transport.TrySender); ok {
			if p.inlined != nil {
				return
			}
			done, err := ts.TrySend(p.c.hdr(step), data)
			if err != nil {
				p.inlined = err
				p.c.Fail(err) // unblock this rank's receives now
			}
			if done || err != nil {
				return
			}
			started = true
		} else if l.Buffered(p.pending[peer] + len(data)) {
			// The kernel must be able to hold everything sent inline to
			// this peer in this call: the peer may not read until it has
			// sent too.
			if p.pending == nil {
				p.pending = map[int]int{}
			}
			p.pending[peer] += len(data)
			if p.inlined == nil {
				if p.inlined = l.Send(p.c.hdr(step), data); p.inlined != nil {
					p.c.Fail(p.inlined) // unblock this rank's receives now
				}
			}
			return
		}
		p.wake = make(chan struct{}, 1)
		p.done = make(chan error, 1)
		go p.loop()
	}
	p.mu.Lock()
	p.q = append(p.q, sendReq{peer, step, data, started})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *prims) loop() {
	var err error
	defer func() { p.done <- err }()
	defer status.Catch(&err)
	defer p.c.catchFault() // a count larger than the buffers
	panicOnFault()
	var batch []sendReq
	for {
		p.mu.Lock()
		batch, p.q = p.q, batch[:0]
		closed := p.closed
		p.mu.Unlock()
		for _, r := range batch {
			switch {
			case err == nil:
				err = p.sendQueued(r)
			case r.started: // the link's stream is cut mid-frame: it must close
				p.c.Links[r.peer].(transport.TrySender).Abandon()
			}
		}
		if len(batch) == 0 {
			if closed {
				for _, l := range p.qposted {
					if ferr := l.Flush(); err == nil {
						err = ferr
					}
				}
				return
			}
			<-p.wake
		}
	}
}

// sendQueued sends one queued frame: by reference where the link takes it
// (transport.Poster; the buffers of a call stay put until the call ends, and
// the loop flushes those links before it does), else with Send.
func (p *prims) sendQueued(r sendReq) error {
	l := p.c.Links[r.peer]
	if r.started {
		return l.(transport.TrySender).Finish()
	}
	if ps, ok := l.(transport.Poster); ok {
		posted, err := ps.Post(p.c.hdr(r.step), r.data)
		if posted {
			p.qposted = flushLater(p.qposted, ps)
			return err
		}
	}
	return l.Send(p.c.hdr(r.step), r.data)
}

// wait flushes the frames posted by reference, closes the queue and returns
// the first send error.
func (p *prims) wait() error {
	var ferr error
	for _, l := range p.posted {
		if err := l.Flush(); ferr == nil {
			ferr = err
		}
	}
	if p.wake == nil {
		return cmp.Or(p.inlined, ferr)
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	err := <-p.done
	return cmp.Or(p.inlined, err, ferr)
}
