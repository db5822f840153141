package algo

// AllReduceRing is a reduce-scatter followed by an allgather around the ring
// (bandwidth-optimal: each rank sends 2(n-1)/n of the buffer). The buffer is
// cut into n segments and each segment into chunks; chunk j goes all the way
// round (2(n-1) steps) before chunk j+1 starts, as in NCCL, and every link
// carries one chunk per step. Every segment is reduced along the same chain,
// so all ranks get identical bits. A large call is split across channels.
func AllReduceRing(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	if nch := c.nchannels(count * c.Elem); nch > 1 {
		return c.split(nch, count, func(ch *Ctx, lo, hi int) error {
			return allReduceRing(ch, c.bytes(send, lo, hi), c.bytes(recv, lo, hi), hi-lo)
		})
	}
	return allReduceRing(c, send, recv, count)
}

func allReduceRing(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	lo0, hi0 := span(count, n, 0) // the first segment is the largest
	nsub := c.chunks(hi0 - lo0)
	piece := func(buf []byte, seg, j int) []byte {
		lo, hi := span(count, n, seg)
		return c.piece(buf, lo, hi, nsub, j)
	}
	// Step 0 of chunk j sends this rank's own segment r, pre-scaled if the
	// op wants it.
	first := func(p *prims, j int) error {
		return p.copySend(c.next(), j*2*(n-1), piece(send, r, j), piece(recv, r, j))
	}
	return c.runNontemporal(c.nontemporalResult(send, recv), func(p *prims) error {
		if err := first(p, 0); err != nil {
			return err
		}
		for j := 0; j < nsub; j++ {
			step := j * 2 * (n - 1)
			// Reduce-scatter: receive segment r-s-1, add our contribution, pass it
			// on; the last one (segment r+1) is complete here and starts the allgather.
			for s := 0; s < n-1; s++ {
				i := (r - s - 1 + 2*n) % n
				dst, local := piece(recv, i, j), piece(send, i, j)
				var err error
				if s < n-2 {
					err = p.recvReduceSend(c.Red, c.prev(), c.next(), step+s, step+s+1, local, dst)
				} else {
					err = p.recvReduceCopySend(c.prev(), c.next(), step+s, step+s+1, dst, local)
				}
				if err != nil {
					return err
				}
			}
			// Allgather: receive finished segment r-t, pass it on unless it has gone round.
			for t := 0; t < n-1; t++ {
				dst := piece(recv, (r-t+n)%n, j)
				s := step + n - 1 + t
				var err error
				if t < n-2 {
					err = p.recvCopySend(c.prev(), c.next(), s, s+1, dst)
				} else if j+1 < nsub {
					// Chunk j+1's first frame goes out before chunk j's last
					// one comes in: the peer can start on chunk j+1 while this
					// rank still waits, so a rank that is ahead keeps working.
					// Frames still go out and come in the same order on every
					// link, and at every send this rank has sent one frame more
					// than it has received, as before: a Lender buffering two
					// frames still cannot close a cycle of waits (prims.go).
					if err = first(p, j+1); err == nil {
						err = p.recv(c.prev(), s, dst)
					}
				} else {
					err = p.recv(c.prev(), s, dst)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// AllReduceDirect (one-shot) sends the whole buffer to every peer and
// reduces locally: one step of latency instead of 2(n-1), for small buffers.
// Inputs are reduced in rank order on every rank, so all ranks get identical
// bits; each peer's input is reduced where it arrived (a shared-memory FIFO
// slot), and two leading inputs are reduced in one pass, so at 2 ranks a
// call is one copy and one reduction per rank.
func AllReduceDirect(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	size := count * c.Elem
	if size == 0 {
		return nil
	}
	if size <= smallBytes && c.buffered(size) {
		return allReduceSmall(c, send, recv, size)
	}
	n, r := c.N, c.Rank
	src := send
	if same(send, recv) { // recv is overwritten before this rank's input is used, and while sends may be in flight
		src = c.Scratch(size)
		copy(src, send)
	}
	fuse := !c.Red.NeedsPrepare() // the first input needs no pre(): reduce it with the second in one pass
	var held []byte               // this rank's input, first in rank order, waiting for the second
	started := false
	add := func(x []byte) { // x is the next input in rank order
		switch {
		case held != nil:
			c.Red.Accumulate(recv, held, x)
			held = nil
		case !started:
			c.Red.Prepare(recv, x)
		default:
			c.Red.Accumulate(recv, recv, x)
		}
		started = true
	}
	return c.run(func(p *prims) error {
		// Pairwise shift: the k-th send goes to r+k, so every rendezvous-style
		// link finds its partner waiting.
		for k := 1; k < n; k++ {
			if err := p.send(c.peer(k), 0, src); err != nil {
				return err
			}
		}
		h := c.hdr(0)
		h.Len = uint64(size)
		for q := 0; q < n; q++ {
			switch {
			case q == r && q == 0 && fuse:
				held = src
			case q == r:
				add(src)
			case q == 0 && r == 1 && fuse: // rank 0's input, then ours, in one pass
				if err := c.Links[0].RecvWith(h, func(pl []byte) { c.Red.Accumulate(recv, pl, src) }); err != nil {
					return err
				}
				started = true
				q++
			default:
				if err := c.Links[q].RecvWith(h, add); err != nil {
					return err
				}
			}
		}
		c.Red.Finalize(recv)
		return nil
	})
}

// smallBytes bounds allReduceSmall: below it a second copy of a buffer
// costs less than lending FIFO slots and running the primitives.
const smallBytes = 2048

// allReduceSmall is the one-shot allreduce of a tiny buffer, run on the
// caller's goroutine with no allocation (the latency path: at 2 ranks, one
// exchange and one local reduction): this rank's input goes to every peer
// as one frame sent inline, the peers' inputs land in scratch, and all are
// reduced in rank order, so every rank gets identical bits. Every link must
// buffer size bytes.
func allReduceSmall(c *Ctx, send, recv []byte, size int) error {
	r := c.Rank
	buf := c.Scratch(c.N * size) // slot q holds rank q's input
	slot := func(q int) []byte {
		if q == r && !same(send, recv) {
			return send
		}
		return buf[q*size : (q+1)*size]
	}
	if same(send, recv) { // recv is written before the peers' inputs are all in
		copy(slot(r), send)
	}
	if err := c.exchangeInline(slot); err != nil {
		return err
	}
	reduceInOrder(c, recv, slot)
	c.Red.Finalize(recv)
	return nil
}

// reduceInOrder writes pre(slot(0)) ⊕ pre(slot(1)) ⊕ ... into dst. When
// the first input needs no pre(), it is reduced with the second in one pass.
func reduceInOrder(c *Ctx, dst []byte, slot func(p int) []byte) {
	p := 1
	if c.N > 1 && !c.Red.NeedsPrepare() {
		c.Red.Accumulate(dst, slot(0), slot(1))
		p = 2
	} else {
		c.Red.Prepare(dst, slot(0))
	}
	for ; p < c.N; p++ {
		c.Red.Accumulate(dst, dst, slot(p))
	}
}

// AllReduceTree is NCCL's double binary tree: each half of the buffer is
// reduced up one of two binary trees and broadcast back down it, in
// pipelined chunks, so a rank that is a leaf of one tree works as an inner
// node of the other. Latency grows with log2(n) instead of n. The trees' roots
// finish the result, so all ranks get identical bits.
func AllReduceTree(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	trees := DoubleTree(c.N, c.Rank, -1)
	half := [2][2]int{{0, count / 2}, {count / 2, count}}
	nsub := c.chunks(count - count/2)
	comb := c.combiner()
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ { // up: every chunk of both halves
			for t, tr := range trees {
				lo, hi := half[t][0], half[t][1]
				err := treeUp(c, p, comb, tr, 2*j+t, c.piece(send, lo, hi, nsub, j), c.piece(recv, lo, hi, nsub, j))
				if err != nil {
					return err
				}
			}
		}
		for j := 0; j < nsub; j++ { // down
			for t, tr := range trees {
				lo, hi := half[t][0], half[t][1]
				if err := treeDown(p, tr, 2*(nsub+j)+t, c.piece(recv, lo, hi, nsub, j)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// AllReduceHalvingDoubling is recursive halving (a reduce-scatter of n
// segments) then recursive doubling (an allgather): the ring's traffic in
// 2·log2(n) steps. Only for a power-of-two number of ranks. Each segment is
// finished by one rank, so all ranks get identical bits.
func AllReduceHalvingDoubling(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	if size := count * c.Elem; size <= smallBytes && c.buffered(size) {
		return allReduceDoubling(c, send, recv, size)
	}
	seg := blocks(func(i int) (int, int) { return span(count, c.N, i) })
	comb := c.combiner()
	return c.run(func(p *prims) error {
		if err := hdReduceScatter(c, p, comb, seg, send, recv, recv, 0); err != nil {
			return err
		}
		lo, hi := seg(c.Rank)
		c.Red.Finalize(c.bytes(recv, lo, hi))
		return hdAllGather(c, p, seg, recv)
	})
}

// allReduceDoubling is recursive doubling, the halving-doubling family's
// member for tiny buffers, run on the caller's goroutine like
// allReduceSmall: log2(n) exchanges of the whole buffer with partners r^1,
// r^2, r^4, ... instead of halving's 2·log2(n), which halves a tiny call's
// time (bench/CALLPATH.md, "Recursive doubling"). Each step waits for one peer, not n-1 at once as
// the one-shot does. Partials are combined lower ranks first, so every rank
// gets identical bits.
func allReduceDoubling(c *Ctx, send, recv []byte, size int) error {
	buf := c.Scratch(size)
	comb := c.combiner()
	c.Red.Prepare(recv, send)
	for mask := 1; mask < c.N; mask <<= 1 {
		q := c.Rank ^ mask
		if err := c.sendInline(q, recv); err != nil {
			return c.failed(err)
		}
		if err := c.recvInline(q, buf); err != nil {
			return c.failed(err)
		}
		if q < c.Rank {
			comb.Accumulate(recv, buf, recv)
		} else {
			comb.Accumulate(recv, recv, buf)
		}
	}
	c.Red.Finalize(recv)
	return nil
}
