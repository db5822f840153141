package algo

// AlltoAll exchanges blocks pairwise: the k-th send goes to r+k and the k-th
// receive comes from r-k, so every pair meets without a cycle of waits.
func AlltoAll(c *Ctx, send, recv []byte, count int) error {
	size := count * c.Elem
	at := func(buf []byte, i int) []byte { return buf[i*size : (i+1)*size] }
	copy(at(recv, c.Rank), at(send, c.Rank))
	if c.N == 1 {
		return nil
	}
	return c.run(func(p *prims) error {
		for k := 1; k < c.N; k++ {
			if err := p.send(c.peer(k), 0, at(send, c.peer(k))); err != nil {
				return err
			}
		}
		for k := 1; k < c.N; k++ {
			q := c.peer(-k)
			if err := p.recv(q, 0, at(recv, q)); err != nil {
				return err
			}
		}
		return nil
	})
}
