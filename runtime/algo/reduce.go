package algo

// ReduceRing reduces along the chain root+1, root+2, ..., root in pipelined
// chunks; the last link ends at root, which finishes the result.
func ReduceRing(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	pos := (c.Rank - root - 1 + 2*c.N) % c.N // 0 starts the chain, N-1 is root
	nsub := c.chunks(count)
	var acc []byte // where a rank other than root builds what it forwards
	if pos < c.N-1 && (pos > 0 || c.Red.NeedsPrepare()) {
		acc = c.Scratch(count * c.Elem)
	}
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			local := c.piece(send, 0, count, nsub, j)
			var err error
			switch pos {
			case 0:
				var tmp []byte
				if acc != nil {
					tmp = c.piece(acc, 0, count, nsub, j)
				}
				err = p.copySend(c.next(), j, local, tmp)
			case c.N - 1:
				dst := c.piece(recv, 0, count, nsub, j)
				if err = p.recvReduceCopy(c.Red, c.prev(), j, dst, local); err == nil {
					c.Red.Finalize(dst)
				}
			default:
				err = p.recvReduceSend(c.Red, c.prev(), c.next(), j, j, local, c.piece(acc, 0, count, nsub, j))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// ReduceDirect has every rank send its buffer to root, which reduces them in
// rank order.
func ReduceDirect(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	if c.Rank != root {
		return c.run(func(p *prims) error { return p.send(root, 0, send) })
	}
	size := count * c.Elem
	slots := c.Scratch(c.N * size)
	slot := func(p int) []byte {
		if p == root && !same(send, recv) {
			return send
		}
		return slots[p*size : (p+1)*size]
	}
	if same(send, recv) {
		copy(slot(root), send)
	}
	return c.run(func(p *prims) error { return p.recvAllReduceCopy(recv, slot) })
}

// ReduceTree reduces each half of the buffer up one tree of a double binary
// tree hanging below root, in pipelined chunks; root finishes the result.
func ReduceTree(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	acc := recv // partials of ranks other than root live in scratch
	if c.Rank != root {
		acc = c.Scratch(count * c.Elem)
	}
	trees := DoubleTree(c.N, c.Rank, root)
	half := [2][2]int{{0, count / 2}, {count / 2, count}}
	nsub := c.chunks(count - count/2)
	comb := c.combiner()
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			for t, tr := range trees {
				lo, hi := half[t][0], half[t][1]
				if err := treeUp(c, p, comb, tr, 2*j+t, c.piece(send, lo, hi, nsub, j), c.piece(acc, lo, hi, nsub, j)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
