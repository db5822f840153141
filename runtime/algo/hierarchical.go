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
// The three phases are pipelined by chunk: while chunk j's first frames
// cross between hosts the host reduce-scatters chunk j+1, and while chunk
// j+1's cross it all-gathers chunk j, so host work overlaps the inter-host
// transfers (measured neutral on the 2-core benchmark VM, where the ranks
// and the kernel's copies share the cores). Segment (l+1)%L of the
// buffer (L ranks per host) is reduced along the host ring ending at local
// rank l, then across hosts along one ring, so all ranks get identical bits.
func AllReduceHier(c *Ctx, send, recv []byte, count int) error {
	if c.N == 1 {
		c.local(send, recv)
		return nil
	}
	local, cross := c.hostGroups()
	// The shares are partial results (pre() applied already): the hosts
	// combine partials, and the cross ring's last reduction finishes them
	// (Avg's reducer divides by the whole communicator's size).
	cross.Red = c.combiner()
	L, H := local.N, cross.N
	lo0, hi0 := span(count, L, 0)
	nsub := c.chunks((hi0 - lo0 + H - 1) / H) // frames between hosts of about one chunk
	piece := func(buf []byte, seg, j int) []byte {
		lo, hi := span(count, L, seg)
		return c.piece(buf, lo, hi, nsub, j)
	}
	mine := (local.Rank + 1) % L // the segment this rank finishes
	return local.run(func(pl *prims) error {
		return cross.run(func(px *prims) error {
			h := hier{local: local, cross: cross, pl: pl, px: px, send: send, recv: recv, piece: piece, mine: mine}
			if err := h.reduceScatter(0); err != nil {
				return err
			}
			if err := h.crossFirst(0); err != nil {
				return err
			}
			for j := 0; j < nsub; j++ {
				if j+1 < nsub {
					if err := h.reduceScatter(j + 1); err != nil {
						return err
					}
				}
				if err := h.crossRest(j); err != nil {
					return err
				}
				if j+1 < nsub {
					if err := h.crossFirst(j + 1); err != nil {
						return err
					}
				}
				if err := h.allGather(j); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// hier is one call of AllReduceHier: the host's ring (local, pl) and the
// cross-host ring (cross, px), each with its own primitives, over disjoint
// links.
type hier struct {
	local, cross *Ctx
	pl, px       *prims
	send, recv   []byte
	piece        func(buf []byte, seg, j int) []byte // chunk j of host segment seg
	mine         int                                 // the host segment this rank finishes
}

// hierStep0 numbers the all-gather's frames after the reduce-scatter's on
// the host's links (steps are for diagnostics; each link keeps its order).
const hierStep0 = 1 << 24

// reduceScatter is chunk j of the ring reduce-scatter over the host's
// ranks: local rank r ends with chunk j of segment (r+1)%L of recv holding
// the host's partial (pre() applied, not finished). Partials are written
// to recv, which in place overwrites only pieces this rank no longer reads.
func (h *hier) reduceScatter(j int) error {
	c, p := h.local, h.pl
	n, r := c.N, c.Rank
	if n == 1 {
		c.prepare(h.piece(h.recv, 0, j), h.piece(h.send, 0, j))
		return nil
	}
	step := j * n
	if err := p.copySend(c.next(), step, h.piece(h.send, r, j), h.piece(h.recv, r, j)); err != nil {
		return err
	}
	for s := 0; s < n-1; s++ {
		i := (r - s - 1 + 2*n) % n
		var err error
		if s < n-2 {
			err = p.recvReduceSend(c.Red, c.prev(), c.next(), step+s, step+s+1, h.piece(h.send, i, j), h.piece(h.recv, i, j))
		} else { // segment r+1: the host's partial stays here
			err = p.recvReduceCopy(c.Red, c.prev(), step+s, h.piece(h.recv, i, j), h.piece(h.send, i, j))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// share is part i (of one per host) of chunk j of this rank's segment: what
// the cross ring moves.
func (h *hier) share(j, i int) []byte {
	buf := h.piece(h.recv, h.mine, j)
	e := h.cross.Elem
	lo, hi := span(len(buf)/e, h.cross.N, i)
	return buf[lo*e : hi*e]
}

// crossFirst starts the ring all-reduce of chunk j of this rank's segment
// between hosts: this rank's part goes to the next host.
func (h *hier) crossFirst(j int) error {
	c := h.cross
	if c.N == 1 {
		return nil
	}
	return h.px.send(c.next(), j*2*(c.N-1), h.share(j, c.Rank))
}

// crossRest is the rest of that ring: reduce-scatter of the parts across
// hosts, the last reduction finishing each, then their all-gather.
func (h *hier) crossRest(j int) error {
	c, p := h.cross, h.px
	n, r := c.N, c.Rank
	if n == 1 {
		h.local.Red.Finalize(h.piece(h.recv, h.mine, j))
		return nil
	}
	step := j * 2 * (n - 1)
	for s := 0; s < n-1; s++ {
		i := (r - s - 1 + 2*n) % n
		var err error
		if s < n-2 {
			err = p.recvReduceSend(c.Red, c.prev(), c.next(), step+s, step+s+1, h.share(j, i), h.share(j, i))
		} else {
			err = p.recvReduceCopySend(c.prev(), c.next(), step+s, step+s+1, h.share(j, i), h.share(j, i))
		}
		if err != nil {
			return err
		}
	}
	return p.forward(c.prev(), c.next(), n, step+n-1, func(t int) []byte { return h.share(j, (r-t+n)%n) })
}

// allGather is chunk j of the ring all-gather over the host's ranks: local
// rank r holds finished chunk j of segment (r+1)%L and passes the chunks
// round until every rank has chunk j of every segment.
func (h *hier) allGather(j int) error {
	c, p := h.local, h.pl
	n, r := c.N, c.Rank
	if n == 1 {
		return nil
	}
	step := hierStep0 + j*n
	if err := p.send(c.next(), step, h.piece(h.recv, (r+1)%n, j)); err != nil {
		return err
	}
	return p.forward(c.prev(), c.next(), n, step, func(t int) []byte { return h.piece(h.recv, (r-t+n)%n, j) })
}

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
