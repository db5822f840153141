package algo

// ReduceRing reduces along the chain root+1, root+2, ..., root in pipelined
// chunks; the last link ends at root, which finishes the result.
func ReduceRing(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		return AllReduceRing(c, send, recv, count)
	}
	pos := (c.Rank - root - 1 + 2*c.N) % c.N // 0 starts the chain, N-1 is root
	nsub := c.chunks(count)
	var acc []byte // where a middle rank builds what it forwards
	if pos > 0 && pos < c.N-1 || c.Red.NeedsPrepare() {
		acc = c.Scratch(count * c.Elem)
	}
	return c.run(nsub, func(s *sender) error {
		for j := 0; j < nsub; j++ {
			lo, hi := span(count, nsub, j)
			local := c.bytes(send, lo, hi)
			switch pos {
			case 0:
				out := local
				if c.Red.NeedsPrepare() {
					out = c.bytes(acc, lo, hi)
					c.Red.Prepare(out, local)
				}
				s.send(c.next(), j, out)
			case c.N - 1:
				dst := c.bytes(recv, lo, hi)
				if err := c.recvReduce(c.prev(), j, dst, local); err != nil {
					return err
				}
				c.Red.Finalize(dst)
			default:
				out := c.bytes(acc, lo, hi)
				if err := c.recvReduce(c.prev(), j, out, local); err != nil {
					return err
				}
				s.send(c.next(), j, out)
			}
		}
		return nil
	})
}

// ReduceDirect has every rank send its buffer to root, which reduces them in
// rank order.
func ReduceDirect(c *Ctx, send, recv []byte, count, root int) error {
	if c.N == 1 {
		return AllReduceRing(c, send, recv, count)
	}
	if c.Rank != root {
		return c.run(1, func(s *sender) error { s.send(root, 0, send); return nil })
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
	return c.run(0, func(*sender) error {
		for k := 1; k < c.N; k++ {
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
