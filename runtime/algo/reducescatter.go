package algo

import "math/bits"

// ReduceScatterRing reduces block b along the chain b+1, b+2, ..., b so that
// rank b ends with the finished block b; partial blocks travel in pipelined
// chunks. Partials live in scratch, one region per block (never reused within
// a call, so a chunk still queued for sending is never overwritten).
func ReduceScatterRing(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	size := count * c.Elem
	block := func(buf []byte, i int) []byte { return buf[i*size : (i+1)*size] }
	if n == 1 {
		c.local(block(send, 0), recv)
		return nil
	}
	part := c.Scratch(n * size)
	nsub := c.chunks(count)
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			step := j * n
			first := (r - 1 + n) % n
			pc := func(buf []byte, b int) []byte { return c.piece(block(buf, b), 0, count, nsub, j) }
			if err := p.copySend(c.next(), step, pc(send, first), pc(part, first)); err != nil {
				return err
			}
			for s := 0; s < n-1; s++ {
				b := (r - s - 2 + 2*n) % n
				if s == n-2 { // b == r: the finished block lands in recv
					dst := c.piece(recv, 0, count, nsub, j)
					if err := p.recvReduceCopy(c.Red, c.prev(), step+s, dst, pc(send, b)); err != nil {
						return err
					}
					c.Red.Finalize(dst)
					continue
				}
				if err := p.recvReduceSend(c.Red, c.prev(), c.next(), step+s, step+s+1, pc(send, b), pc(part, b)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// ReduceScatterDirect sends block p to rank p and reduces the n copies of
// block r in rank order.
func ReduceScatterDirect(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	size := count * c.Elem
	block := func(i int) []byte { return send[i*size : (i+1)*size] }
	if n == 1 {
		c.local(block(0), recv)
		return nil
	}
	slots := c.Scratch(n * size)
	own := block(r)
	if same(recv, own) { // in place: keep our input away from the output
		own = slots[r*size : (r+1)*size]
		copy(own, block(r))
	}
	slot := func(p int) []byte {
		if p == r {
			return own
		}
		return slots[p*size : (p+1)*size]
	}
	return c.run(func(p *prims) error {
		for k := 1; k < n; k++ {
			if err := p.send(c.peer(k), 0, block(c.peer(k))); err != nil {
				return err
			}
		}
		return p.recvAllReduceCopy(recv, slot)
	})
}

// ReduceScatterHalvingDoubling is recursive halving: log2(n) pairwise
// exchanges, each reducing half of the blocks still held, until block r is
// left. At n not a power of two the first 2·rem ranks (rem = n - pof2, pof2
// the largest power of two under n) fold in pairs first: the even rank of
// each pair sends its whole input to the odd one, which halves on the pof2
// ranks left for the pair's two blocks and sends the even one its block at
// the end (Thakur et al. 2005; MPICH's reduce_scatter for commutative ops):
// 2 + log2(pof2) steps, the folded ranks moving the whole buffer once more.
func ReduceScatterHalvingDoubling(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	if n == 1 {
		c.local(send[:count*c.Elem], recv)
		return nil
	}
	acc := c.Scratch(n * count * c.Elem)
	pof2 := 1 << (bits.Len(uint(n)) - 1)
	rem := n - pof2
	if rem == 0 {
		seg := blocks(func(i int) (int, int) { return i * count, (i + 1) * count })
		return c.run(func(p *prims) error {
			if err := hdReduceScatter(c, p, c.combiner(), seg, send, acc, recv, r*count); err != nil {
				return err
			}
			c.Red.Finalize(recv)
			return nil
		})
	}
	// Member v of the halving group is rank 2v+1 (v < rem: it holds the
	// pair's blocks 2v and 2v+1) or rank v+rem (its own block).
	g := hdGroup{n: pof2, rank: func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
	}}
	seg := blocks(func(v int) (int, int) {
		if v < rem {
			return 2 * v * count, (2*v + 2) * count
		}
		return (v + rem) * count, (v + rem + 1) * count
	})
	all, own := n*count, c.bytes(acc, r*count, (r+1)*count)
	return c.run(func(p *prims) error {
		nsub := c.chunks(all)
		switch {
		case r < 2*rem && r%2 == 0: // folds into r+1, gets its block back from it
			for j := 0; j < nsub; j++ {
				if err := p.copySend(r+1, j, c.piece(send, 0, all, nsub, j), c.piece(acc, 0, all, nsub, j)); err != nil {
					return err
				}
			}
			bsub := c.chunks(count)
			for j := 0; j < bsub; j++ {
				if err := p.recv(r+1, j, c.piece(recv, 0, count, bsub, j)); err != nil {
					return err
				}
			}
		case r < 2*rem: // takes r-1's input, halves for both blocks, sends r-1 its own
			for j := 0; j < nsub; j++ {
				if err := p.recvReduceCopy(c.Red, r-1, j, c.piece(acc, 0, all, nsub, j), c.piece(send, 0, all, nsub, j)); err != nil {
					return err
				}
			}
			g.r = r / 2
			if err := hdReduceScatterOn(c, p, c.combiner(), seg, g, true, acc, acc, acc, 0); err != nil {
				return err
			}
			bsub := c.chunks(count)
			for j := 0; j < bsub; j++ {
				if err := p.send(r-1, j, c.piece(acc, (r-1)*count, r*count, bsub, j)); err != nil {
					return err
				}
			}
			copy(recv, own)
		default:
			g.r = r - rem
			if err := hdReduceScatterOn(c, p, c.combiner(), seg, g, false, send, acc, recv, r*count); err != nil {
				return err
			}
		}
		c.Red.Finalize(recv)
		return nil
	})
}
