package algo

// Gather has every rank send its block straight to root.
func Gather(c *Ctx, send, recv []byte, count, root int) error {
	size := count * c.Elem
	if c.Rank != root {
		return c.run(func(p *prims) error { return p.send(root, 0, send) })
	}
	at := func(i int) []byte { return recv[i*size : (i+1)*size] }
	if !same(send, at(root)) {
		copy(at(root), send)
	}
	return c.run(func(p *prims) error {
		for k := 1; k < c.N; k++ {
			q := c.peer(-k)
			if err := p.recv(q, 0, at(q)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Scatter has root send block p straight to rank p. The root copies its own
// block last, once every send is done (run waits for them): its recvbuff
// may overlap sendbuff anywhere (recvbuff == sendbuff, say, with root 1),
// and copying first would overwrite blocks not yet sent.
func Scatter(c *Ctx, send, recv []byte, count, root int) error {
	size := count * c.Elem
	if c.Rank != root {
		return c.run(func(p *prims) error { return p.recv(root, 0, recv) })
	}
	at := func(i int) []byte { return send[i*size : (i+1)*size] }
	err := c.run(func(p *prims) error {
		for k := 1; k < c.N; k++ {
			if err := p.send(c.peer(k), 0, at(c.peer(k))); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && !same(recv, at(root)) {
		copy(recv, at(root)) // memmove: overlapping blocks are fine
	}
	return err
}
