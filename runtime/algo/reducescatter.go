package algo

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
// left. Only for a power-of-two number of ranks.
func ReduceScatterHalvingDoubling(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	if n == 1 {
		c.local(send[:count*c.Elem], recv)
		return nil
	}
	acc := c.Scratch(n * count * c.Elem)
	seg := blocks(func(i int) (int, int) { return i * count, (i + 1) * count })
	return c.run(func(p *prims) error {
		if err := hdReduceScatter(c, p, c.combiner(), seg, send, acc, recv, r*count); err != nil {
			return err
		}
		c.Red.Finalize(recv)
		return nil
	})
}
