package algo

// AllReduceRing is a reduce-scatter followed by an allgather around the ring
// (bandwidth-optimal: each rank sends 2(n-1)/n of the buffer). The buffer is
// cut into n segments; each segment into chunks that are pipelined, so chunk
// j of step s+1 leaves as soon as chunk j of step s has been reduced. Every
// segment is reduced along the same chain, so all ranks get identical bits.
func AllReduceRing(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.prepare(recv, send)
		c.Red.Finalize(recv)
		return nil
	}
	n, r := c.N, c.Rank
	seg := func(i, j, nsub int) (int, int) { // chunk j of segment i, in elements
		slo, shi := span(count, n, i)
		lo, hi := span(shi-slo, nsub, j)
		return slo + lo, slo + hi
	}
	lo0, hi0 := span(count, n, 0) // the first segment is the largest
	nsub := c.chunks(hi0 - lo0)
	steps := 2 * (n - 1)
	return c.run(steps*nsub, func(s *sender) error {
		// Step 0 sends this rank's own segment r, pre-scaled if the op wants it.
		for j := 0; j < nsub; j++ {
			lo, hi := seg(r, j, nsub)
			src := c.bytes(send, lo, hi)
			if c.Red.NeedsPrepare() {
				dst := c.bytes(recv, lo, hi)
				c.Red.Prepare(dst, src)
				src = dst
			}
			s.send(c.next(), j, src)
		}
		// Reduce-scatter: receive segment r-s-1, add our contribution, pass it on.
		for st := 0; st < n-1; st++ {
			i := (r - st - 1 + 2*n) % n
			for j := 0; j < nsub; j++ {
				lo, hi := seg(i, j, nsub)
				dst := c.bytes(recv, lo, hi)
				if err := c.recvReduce(c.prev(), st*nsub+j, dst, c.bytes(send, lo, hi)); err != nil {
					return err
				}
				if st == n-2 { // segment r+1 is complete here: finish it, start the allgather
					c.Red.Finalize(dst)
				}
				s.send(c.next(), (st+1)*nsub+j, dst)
			}
		}
		// Allgather: receive finished segment r-t, pass it on unless it has gone round.
		for t := 0; t < n-1; t++ {
			i := (r - t + n) % n
			for j := 0; j < nsub; j++ {
				lo, hi := seg(i, j, nsub)
				dst := c.bytes(recv, lo, hi)
				step := (n-1+t)*nsub + j
				if err := c.recvInto(c.prev(), step, dst); err != nil {
					return err
				}
				if t < n-2 {
					s.send(c.next(), step+nsub, dst)
				}
			}
		}
		return nil
	})
}

// AllReduceDirect sends the whole buffer to every peer and reduces locally:
// one step of latency instead of 2(n-1), for small buffers. Inputs are
// reduced in rank order on every rank, so all ranks get identical bits.
func AllReduceDirect(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		return AllReduceRing(c, send, recv, count)
	}
	size := count * c.Elem
	n, r := c.N, c.Rank
	slots := c.Scratch(n * size)
	slot := func(p int) []byte {
		if p == r && !same(send, recv) {
			return send
		}
		return slots[p*size : (p+1)*size]
	}
	src := send
	if same(send, recv) { // recv is overwritten while sends may be in flight
		src = slot(r)
		copy(src, send)
	}
	return c.run(n-1, func(s *sender) error {
		// Pairwise shift: the k-th send goes to r+k, the k-th receive comes
		// from r-k, so every rendezvous-style link finds its partner waiting.
		for k := 1; k < n; k++ {
			s.send(c.peer(k), 0, src)
		}
		for k := 1; k < n; k++ {
			if err := c.recvInto(c.peer(-k), 0, slot(c.peer(-k))); err != nil {
				return err
			}
		}
		reduceInOrder(c, recv, slot)
		c.Red.Finalize(recv)
		return nil
	})
}

// reduceInOrder writes pre(slot(0)) ⊕ pre(slot(1)) ⊕ ... into dst.
func reduceInOrder(c *Ctx, dst []byte, slot func(p int) []byte) {
	c.Red.Prepare(dst, slot(0))
	for p := 1; p < c.N; p++ {
		c.Red.Accumulate(dst, dst, slot(p))
	}
}
