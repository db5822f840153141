package algo

// BroadcastRing pipelines root's buffer down the chain root, root+1, ...,
// root-1 in chunks: every link carries the buffer once.
func BroadcastRing(c *Ctx, send, recv []byte, count, root int) error {
	if c.Rank == root && !same(send, recv) {
		copy(recv, send)
	}
	if c.N == 1 || count == 0 {
		return nil
	}
	pos := (c.Rank - root + c.N) % c.N
	nsub := c.chunks(count)
	return c.run(nsub, func(s *sender) error {
		for j := 0; j < nsub; j++ {
			lo, hi := span(count, nsub, j)
			buf := c.bytes(recv, lo, hi)
			if pos > 0 {
				if err := c.recvInto(c.prev(), j, buf); err != nil {
					return err
				}
			}
			if pos < c.N-1 {
				s.send(c.next(), j, buf)
			}
		}
		return nil
	})
}

// BroadcastDirect has root send to every rank at once: one step of latency.
func BroadcastDirect(c *Ctx, send, recv []byte, count, root int) error {
	if c.Rank == root && !same(send, recv) {
		copy(recv, send)
	}
	if c.N == 1 || count == 0 {
		return nil
	}
	if c.Rank != root {
		return c.run(0, func(*sender) error { return c.recvInto(root, 0, recv) })
	}
	return c.run(c.N-1, func(s *sender) error {
		for k := 1; k < c.N; k++ {
			s.send(c.peer(k), 0, recv)
		}
		return nil
	})
}
