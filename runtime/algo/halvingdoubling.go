package algo

import "gocl/kernels"

// Recursive halving-doubling (Thakur et al. 2005), for a power-of-two number
// of ranks: log2(n) pairwise exchanges halve the blocks a rank is
// responsible for while reducing them (a reduce-scatter), then log2(n)
// exchanges double them back (an allgather). Each rank sends (n-1)/n of the
// buffer per phase, like the ring, but in log2(n) steps instead of n-1.

// blocks is a partition of a buffer into n contiguous element ranges.
type blocks func(i int) (lo, hi int)

// elems is the element range covered by blocks [b0, b1).
func (s blocks) elems(b0, b1 int) (int, int) {
	lo, _ := s(b0)
	_, hi := s(b1 - 1)
	return lo, hi
}

// hdReduceScatter leaves block r of the reduction in out (whose first element
// is element base of the buffers). in is this rank's input; acc holds
// partials of the blocks still being halved (it may be in, or out with base
// 0). comb reduces partials.
func hdReduceScatter(c *Ctx, p *prims, comb *kernels.Reducer, seg blocks, in, acc, out []byte, base int) error {
	return hdReduceScatterOn(c, p, comb, seg, hdGroup{n: c.N, r: c.Rank, rank: func(v int) int { return v }}, false, in, acc, out, base)
}

// hdGroup is the power-of-two group recursive halving runs on: n members,
// this rank is member r, member v is rank rank(v) (the identity, or the
// ranks left after folding: ReduceScatterHalvingDoubling).
type hdGroup struct {
	n, r int
	rank func(v int) int
}

// hdReduceScatterOn is hdReduceScatter on g; partial says in is a partial
// result already (a folded pair's), to be combined, not an input to prepare.
func hdReduceScatterOn(c *Ctx, p *prims, comb *kernels.Reducer, seg blocks, g hdGroup, partial bool, in, acc, out []byte, base int) error {
	n, r := g.n, g.r
	blo, bhi := 0, n
	step := 0
	for mask := n / 2; mask >= 1; mask /= 2 {
		half := (bhi - blo) / 2
		keep0, send0 := blo, blo+half
		if r&mask != 0 {
			keep0, send0 = blo+half, blo
		}
		sl, sh := seg.elems(send0, send0+half)
		kl, kh := seg.elems(keep0, keep0+half)
		partner, first, last := g.rank(r^mask), mask == n/2 && !partial, mask == 1
		nsub := c.chunks(max(sh-sl, kh-kl))
		for j := 0; j < nsub; j++ {
			var err error
			if first {
				err = p.copySend(partner, step, c.piece(in, sl, sh, nsub, j), c.piece(acc, sl, sh, nsub, j))
			} else {
				err = p.send(partner, step, c.piece(acc, sl, sh, nsub, j))
			}
			if err != nil {
				return err
			}
			dst := c.piece(acc, kl, kh, nsub, j)
			if last {
				dst = c.piece(out, kl-base, kh-base, nsub, j)
			}
			if first {
				err = p.recvReduceCopy(c.Red, partner, step, dst, c.piece(in, kl, kh, nsub, j))
			} else {
				err = p.recvReduceCopy(comb, partner, step, dst, c.piece(acc, kl, kh, nsub, j))
			}
			if err != nil {
				return err
			}
			step++
		}
		blo, bhi = keep0, keep0+half
	}
	return nil
}

// hdAllGather starts with block r of buf filled and exchanges ever larger
// ranges of blocks with partners r^1, r^2, r^4, ... until buf is complete.
func hdAllGather(c *Ctx, p *prims, seg blocks, buf []byte) error {
	n, r := c.N, c.Rank
	blo, bhi := r, r+1
	step := 0
	for mask := 1; mask < n; mask *= 2 {
		size := bhi - blo
		plo := bhi // the partner's blocks
		if r&mask != 0 {
			plo = blo - size
		}
		ml, mh := seg.elems(blo, bhi)
		pl, ph := seg.elems(plo, plo+size)
		nsub := c.chunks(max(mh-ml, ph-pl))
		for j := 0; j < nsub; j++ {
			if err := p.send(r^mask, step, c.piece(buf, ml, mh, nsub, j)); err != nil {
				return err
			}
			if err := p.recv(r^mask, step, c.piece(buf, pl, ph, nsub, j)); err != nil {
				return err
			}
			step++
		}
		blo, bhi = min(blo, plo), max(bhi, plo+size)
	}
	return nil
}
