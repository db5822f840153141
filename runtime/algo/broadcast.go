package algo

// BroadcastRing pipelines root's buffer down the chain root, root+1, ...,
// root-1 in chunks: every link carries the buffer once. The root copies its
// input into place as it sends it, in one pass over it.
func BroadcastRing(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		if c.Rank == root && !same(send, recv) {
			copy(recv, send)
		}
		return nil
	}
	pos := (c.Rank - root + c.N) % c.N
	nsub := c.chunks(count)
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			buf := c.piece(recv, 0, count, nsub, j)
			var err error
			switch {
			case pos == 0:
				err = p.sendCopy(c.next(), j, c.piece(send, 0, count, nsub, j), buf)
			case pos < c.N-1:
				err = p.recvCopySend(c.prev(), c.next(), j, j, buf)
			default:
				err = p.recv(c.prev(), j, buf)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// BroadcastDirect has root send to every rank at once: one step of latency.
// When every link buffers the whole buffer, the frames go inline on the
// caller's goroutine with no allocation (the latency path).
func BroadcastDirect(c *Ctx, send, recv []byte, count, root int) error {
	if c.Rank == root && !same(send, recv) {
		copy(recv, send)
	}
	if c.N == 1 {
		return nil
	}
	if c.buffered(len(recv)) {
		if c.Rank != root {
			return c.failed(c.recvInline(root, recv))
		}
		for k := 1; k < c.N; k++ {
			if err := c.sendInline(c.peer(k), recv); err != nil {
				return c.failed(err)
			}
		}
		return nil
	}
	return c.run(func(p *prims) error {
		if c.Rank != root {
			return p.recv(root, 0, recv)
		}
		for k := 1; k < c.N; k++ {
			if err := p.send(c.peer(k), 0, recv); err != nil {
				return err
			}
		}
		return nil
	})
}

// BroadcastTree sends each half of root's buffer down one tree of a double
// binary tree hanging below root, in pipelined chunks: latency grows with
// log2(n), and no rank forwards more than the buffer once.
func BroadcastTree(c *Ctx, send, recv []byte, count, root int) error {
	if c.Rank == root && !same(send, recv) {
		copy(recv, send)
	}
	if c.N == 1 {
		return nil
	}
	trees := DoubleTree(c.N, c.Rank, root)
	half := [2][2]int{{0, count / 2}, {count / 2, count}}
	nsub := c.chunks(count - count/2)
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			for t, tr := range trees {
				if err := treeDown(p, tr, 2*j+t, c.piece(recv, half[t][0], half[t][1], nsub, j)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
