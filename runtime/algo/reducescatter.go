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
		return AllReduceRing(c, block(send, 0), recv, count)
	}
	part := c.Scratch(n * size)
	nsub := c.chunks(count)
	return c.run((n-1)*nsub, func(s *sender) error {
		first := (r - 1 + n) % n
		for j := 0; j < nsub; j++ {
			lo, hi := span(count, nsub, j)
			out := c.bytes(block(send, first), lo, hi)
			if c.Red.NeedsPrepare() {
				dst := c.bytes(block(part, first), lo, hi)
				c.Red.Prepare(dst, out)
				out = dst
			}
			s.send(c.next(), j, out)
		}
		for st := 0; st < n-1; st++ {
			b := (r - st - 2 + 2*n) % n
			for j := 0; j < nsub; j++ {
				lo, hi := span(count, nsub, j)
				local := c.bytes(block(send, b), lo, hi)
				if st == n-2 { // b == r: the finished block lands in recv
					dst := c.bytes(recv, lo, hi)
					if err := c.recvReduce(c.prev(), st*nsub+j, dst, local); err != nil {
						return err
					}
					c.Red.Finalize(dst)
					continue
				}
				dst := c.bytes(block(part, b), lo, hi)
				if err := c.recvReduce(c.prev(), st*nsub+j, dst, local); err != nil {
					return err
				}
				s.send(c.next(), (st+1)*nsub+j, dst)
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
		return AllReduceRing(c, block(0), recv, count)
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
	return c.run(n-1, func(s *sender) error {
		for k := 1; k < n; k++ {
			s.send(c.peer(k), 0, block(c.peer(k)))
		}
		for k := 1; k < n; k++ {
			p := c.peer(-k)
			if err := c.recvInto(p, 0, slot(p)); err != nil {
				return err
			}
		}
		reduceInOrder(c, recv, slot)
		c.Red.Finalize(recv)
		return nil
	})
}
