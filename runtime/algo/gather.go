package algo

// Gather has every rank send its block straight to root.
func Gather(c *Ctx, send, recv []byte, count, root int) error {
	size := count * c.Elem
	if c.Rank != root {
		if count == 0 {
			return nil
		}
		return c.run(1, func(s *sender) error { s.send(root, 0, send); return nil })
	}
	at := func(i int) []byte { return recv[i*size : (i+1)*size] }
	if !same(send, at(root)) {
		copy(at(root), send)
	}
	if count == 0 {
		return nil
	}
	return c.run(0, func(*sender) error {
		for k := 1; k < c.N; k++ {
			p := c.peer(-k)
			if err := c.recvInto(p, 0, at(p)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Scatter has root send block p straight to rank p.
func Scatter(c *Ctx, send, recv []byte, count, root int) error {
	size := count * c.Elem
	if c.Rank != root {
		if count == 0 {
			return nil
		}
		return c.run(0, func(*sender) error { return c.recvInto(root, 0, recv) })
	}
	at := func(i int) []byte { return send[i*size : (i+1)*size] }
	if !same(recv, at(root)) {
		copy(recv, at(root))
	}
	if count == 0 {
		return nil
	}
	return c.run(c.N-1, func(s *sender) error {
		for k := 1; k < c.N; k++ {
			s.send(c.peer(k), 0, at(c.peer(k)))
		}
		return nil
	})
}
