package algo

import "gocl/runtime/transport"

// AllReduceHier is the hierarchical all-reduce for communicators that span
// hosts (NCCL reaches the same shape across nodes with its CollNet and
// NVLS-tree algorithms): a ring reduce-scatter inside each host over its
// fast links, then an all-reduce between hosts of each local rank's share
// (local rank l of every host with local rank l of the others: every local
// rank's connections carry inter-host traffic at once, S/L bytes each),
// then a ring all-gather inside the host. The inter-host links carry the
// buffer once each way instead of the flat ring's 2(n-1)/n times, and the
// cores of a host no longer forward every chunk between the two kinds of
// link. c.Hosts must list the ranks of each host, the same number on each.
//
// Segment (l+1)%L of the buffer (L ranks per host) is reduced along the
// host ring ending at local rank l, then across hosts along one ring, so
// all ranks get identical bits.
func AllReduceHier(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	local, cross := c.hostGroups()
	L := local.N
	mine := (local.Rank + 1) % L // the segment this rank finishes
	lo, hi := span(count, L, mine)
	if err := hostReduceScatter(local, send, recv, count); err != nil {
		return err
	}
	// The share is a partial result (pre() applied already): the hosts
	// combine partials, and the ring's last reduction finishes it (Avg's
	// reducer divides by the whole communicator's size).
	cross.Red = c.combiner()
	seg := c.bytes(recv, lo, hi)
	if err := AllReduceRing(cross, seg, seg, hi-lo); err != nil {
		return err
	}
	return hostAllGather(local, recv, count)
}

// hierStep0 numbers the all-gather's frames after the reduce-scatter's on
// the host's links (steps are for diagnostics; each link keeps its order).
const hierStep0 = 1 << 24

// hostGroups returns the contexts of this rank's host (its ranks in rank
// order) and of its cross-host ring (the ranks at its local index on every
// host, in host order), each with its own links and rank numbering.
func (c *Ctx) hostGroups() (local, cross *Ctx) {
	for _, host := range c.Hosts {
		for l, r := range host {
			if r != c.Rank {
				continue
			}
			ring := make([]int, len(c.Hosts))
			for h, other := range c.Hosts {
				ring[h] = other[l]
			}
			return c.group(host), c.group(ring)
		}
	}
	panic("algo: hierarchical all-reduce on a rank missing from Ctx.Hosts")
}

// group is the context of the sub-communicator of ranks (global ranks, in
// the group's order): the same call over those ranks' links.
func (c *Ctx) group(ranks []int) *Ctx {
	g := *c
	g.N = len(ranks)
	g.Links = make([]transport.Link, len(ranks))
	for i, r := range ranks {
		if r == c.Rank {
			g.Rank = i
		} else {
			g.Links[i] = c.Links[r]
		}
	}
	return &g
}

// hostReduceScatter is the first half of the ring all-reduce over the
// host's ranks: local rank r ends with segment (r+1)%n of recv holding the
// host's partial (pre() applied, not finished). Each segment goes round in
// chunks; partials are written to recv, which in place overwrites only
// segments this rank no longer reads.
func hostReduceScatter(c *Ctx, send, recv []byte, count int) error {
	n, r := c.N, c.Rank
	if n == 1 {
		c.prepare(recv, send)
		return nil
	}
	lo0, hi0 := span(count, n, 0)
	nsub := c.chunks(hi0 - lo0)
	piece := func(buf []byte, seg, j int) []byte {
		lo, hi := span(count, n, seg)
		return c.piece(buf, lo, hi, nsub, j)
	}
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			step := j * n
			if err := p.copySend(c.next(), step, piece(send, r, j), piece(recv, r, j)); err != nil {
				return err
			}
			for s := 0; s < n-1; s++ {
				i := (r - s - 1 + 2*n) % n
				var err error
				if s < n-2 {
					err = p.recvReduceSend(c.Red, c.prev(), c.next(), step+s, piece(send, i, j), piece(recv, i, j))
				} else { // segment r+1: the host's partial stays here
					err = p.recvReduceCopy(c.Red, c.prev(), step+s, piece(recv, i, j), piece(send, i, j))
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// hostAllGather is the second half of the ring all-reduce over the host's
// ranks: local rank r holds finished segment (r+1)%n of buf and passes the
// segments round until every rank has all of them.
func hostAllGather(c *Ctx, buf []byte, count int) error {
	n, r := c.N, c.Rank
	if n == 1 {
		return nil
	}
	lo0, hi0 := span(count, n, 0)
	nsub := c.chunks(hi0 - lo0)
	piece := func(seg, j int) []byte {
		lo, hi := span(count, n, seg)
		return c.piece(buf, lo, hi, nsub, j)
	}
	return c.run(func(p *prims) error {
		for j := 0; j < nsub; j++ {
			step := hierStep0 + j*n
			if err := p.send(c.next(), step, piece((r+1)%n, j)); err != nil {
				return err
			}
			for t := 0; t < n-1; t++ {
				dst := piece((r-t+n)%n, j)
				var err error
				if t < n-2 {
					err = p.recvCopySend(c.prev(), c.next(), step+t, dst)
				} else {
					err = p.recv(c.prev(), step+t, dst)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}
