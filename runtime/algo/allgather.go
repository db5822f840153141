package algo

// AllGatherRing passes blocks around the ring: at step t a rank forwards the
// block it received at step t-1, so each link carries (n-1) blocks.
func AllGatherRing(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	block := func(i int) []byte { return recv[i*count*c.Elem : (i+1)*count*c.Elem] }
	if !same(send, block(r)) {
		copy(block(r), send)
	}
	if n == 1 || count == 0 {
		return nil
	}
	nsub := c.chunks(count)
	return c.run((n-1)*nsub, func(s *sender) error {
		for j := 0; j < nsub; j++ {
			lo, hi := span(count, nsub, j)
			s.send(c.next(), j, c.bytes(block(r), lo, hi))
		}
		for t := 0; t < n-1; t++ {
			b := block((r - t - 1 + n) % n)
			for j := 0; j < nsub; j++ {
				lo, hi := span(count, nsub, j)
				dst := c.bytes(b, lo, hi)
				if err := c.recvInto(c.prev(), t*nsub+j, dst); err != nil {
					return err
				}
				if t < n-2 {
					s.send(c.next(), (t+1)*nsub+j, dst)
				}
			}
		}
		return nil
	})
}

// AllGatherDirect sends this rank's block to every peer at once.
func AllGatherDirect(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	block := func(i int) []byte { return recv[i*count*c.Elem : (i+1)*count*c.Elem] }
	if !same(send, block(r)) {
		copy(block(r), send)
	}
	if n == 1 || count == 0 {
		return nil
	}
	return c.run(n-1, func(s *sender) error {
		for k := 1; k < n; k++ {
			s.send(c.peer(k), 0, block(r))
		}
		for k := 1; k < n; k++ {
			p := c.peer(-k)
			if err := c.recvInto(p, 0, block(p)); err != nil {
				return err
			}
		}
		return nil
	})
}
