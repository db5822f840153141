package algo

import "gocl/kernels"

// AllGatherRing passes blocks around the ring: at step t a rank forwards the
// block it received at step t-1, so each link carries (n-1) blocks. Chunk j
// of every block goes round before chunk j+1 starts. This rank's own block
// is copied into place as it is sent, in one pass over it.
func AllGatherRing(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	block := func(i int) []byte { return recv[i*count*c.Elem : (i+1)*count*c.Elem] }
	if n == 1 {
		if !same(send, block(r)) {
			copy(block(r), send)
		}
		return nil
	}
	nsub := c.chunks(count)
	return c.runGather(count, func(p *prims) error {
		for j := 0; j < nsub; j++ {
			step := j * (n - 1)
			own := c.piece(block(r), 0, count, nsub, j)
			if err := p.sendCopy(c.next(), step, c.piece(send, 0, count, nsub, j), own); err != nil {
				return err
			}
			if err := p.forward(c.prev(), c.next(), n, step, func(t int) []byte {
				return c.piece(block((r-t-1+n)%n), 0, count, nsub, j)
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGatherDirect sends this rank's block to every peer at once. When every
// link buffers a block, the frames go inline on the caller's goroutine with
// no allocation (the latency path).
func AllGatherDirect(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	size := count * c.Elem
	block := func(i int) []byte { return recv[i*size : (i+1)*size] }
	own := !same(send, block(r))
	if n == 1 || c.buffered(size) {
		if own {
			copy(block(r), send)
		}
		if n == 1 {
			return nil
		}
		return c.exchangeInline(block)
	}
	return c.runGather(count, func(p *prims) error {
		for k := 1; k < n; k++ {
			if err := p.send(c.peer(k), 0, send); err != nil {
				return err
			}
		}
		if own { // after the sends, so that peers need not wait for it
			kernels.Copy(block(r), send, p.nontemporal)
		}
		for k := 1; k < n; k++ {
			q := c.peer(-k)
			if err := p.recv(q, 0, block(q)); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGatherHalvingDoubling is recursive doubling: log2(n) exchanges of ever
// larger ranges of blocks; at other n, Bruck's: ceil(log2 n) rounds.
func AllGatherHalvingDoubling(c *Ctx, send, recv []byte, count int) error {
	r := c.Rank
	own := recv[r*count*c.Elem : (r+1)*count*c.Elem]
	if c.N == 1 {
		if !same(send, own) {
			copy(own, send)
		}
		return nil
	}
	seg := blocks(func(i int) (int, int) { return i * count, (i + 1) * count })
	return c.runGather(count, func(p *prims) error {
		if !same(send, own) {
			kernels.Copy(own, send, p.nontemporal)
		}
		if c.N&(c.N-1) != 0 {
			return bruckAllGather(c, p, seg, recv)
		}
		return hdAllGather(c, p, seg, recv)
	})
}

// bruckAllGather is Bruck's allgather, for any n: in the round of distance
// d (1, 2, 4, ...) a rank holds the d blocks from its own on (r, r+1, ...,
// mod n), sends the first min(d, n-d) of them to rank r-d and takes as many
// from rank r+d, so ceil(log2 n) rounds where a ring takes n-1, each rank
// sending n-1 blocks in all as on the ring. Blocks stay in their places in
// buf: a range that wraps past block n-1 goes as two pieces, cut alike at
// both ends (they name the same blocks).
func bruckAllGather(c *Ctx, p *prims, seg blocks, buf []byte) error {
	n, r := c.N, c.Rank
	// Frames of the blocks [b, b+k) mod n, in order.
	frames := func(b, k int) [][]byte {
		var out [][]byte
		for _, span := range [][2]int{{b, min(b+k, n)}, {0, max(b+k-n, 0)}} {
			if span[1] <= span[0] {
				continue
			}
			lo, hi := seg.elems(span[0], span[1])
			nsub := c.chunks(hi - lo)
			for j := 0; j < nsub; j++ {
				out = append(out, c.piece(buf, lo, hi, nsub, j))
			}
		}
		return out
	}
	step := 0
	for d := 1; d < n; d *= 2 {
		k := min(d, n-d)
		to, from := (r-d+n)%n, (r+d)%n
		out, in := frames(r, k), frames(from, k)
		// Alternated, as a ring forwards: a rank never has more than one
		// frame out that its receiver has not started taking.
		for i := 0; i < max(len(out), len(in)); i++ {
			if i < len(out) {
				if err := p.send(to, step+i, out[i]); err != nil {
					return err
				}
			}
			if i < len(in) {
				if err := p.recv(from, step+i, in[i]); err != nil {
					return err
				}
			}
		}
		lo, hi := seg.elems(0, k)
		step += c.chunks(hi-lo) + 1 // the most frames k blocks take, alike on every rank
	}
	return nil
}

// runGather is run for an allgather: its result is the N blocks of count
// elements, not the count its header carries, so it decides on non-temporal stores from
// N*count: deciding per block, a large result written block by block under
// the threshold went through the cache (bench/TUNING.md, "Non-temporal results").
func (c *Ctx) runGather(count int, body func(p *prims) error) error {
	return c.runNontemporal(kernels.Nontemporal(c.N*count*c.Elem), body)
}
