package comm

import (
	"math/bits"

	"gocl/runtime/algo"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// allPeers is every rank but this one.
func (c *Comm) allPeers() []int {
	out := make([]int, 0, c.nranks-1)
	for p := 0; p < c.nranks; p++ {
		if p != c.rank {
			out = append(out, p)
		}
	}
	return out
}

// peersOf is the ranks a call of coll by algorithm a talks to from this
// rank: what each algorithm in runtime/algo sends to or receives from
// (TestRuntimeConnectDeclaresPeers runs every algorithm on links made only
// for these, so a change there that talks to another rank fails it).
func (c *Comm) peersOf(coll wire.Coll, a tune.Algo, root int) []int {
	n, r := c.nranks, c.rank
	ring := func() []int { return []int{(r + 1) % n, (r + n - 1) % n} }
	switch coll {
	case wire.AlltoAll:
		return c.allPeers()
	case wire.Gather, wire.Scatter:
		if r == root {
			return c.allPeers()
		}
		return []int{root}
	}
	switch a {
	case tune.Ring:
		return ring()
	case tune.Tree:
		var out []int
		for _, t := range algo.DoubleTree(n, r, root) {
			if t.Parent >= 0 {
				out = append(out, t.Parent)
			}
			out = append(out, t.Kids...)
		}
		return out
	case tune.HalvingDoubling:
		return hdPeers(coll, n, r)
	case tune.Hier:
		var out []int
		for _, host := range c.hosts {
			for l, q := range host {
				if q == r {
					out = append(out, host...)
					for _, other := range c.hosts {
						out = append(out, other[l])
					}
				}
			}
		}
		return out
	}
	// Direct: a rooted call's root talks to everyone, the others to it.
	if (coll == wire.Broadcast || coll == wire.Reduce) && r != root {
		return []int{root}
	}
	return c.allPeers()
}

// hdPeers is the halving-doubling family's partners: r^1, r^2, r^4, ... at
// a power of two; Bruck's r±2^k for an allgather at other n; for a
// reduce-scatter at other n the folded pair and the halving group's
// partners (algo.ReduceScatterHalvingDoubling's numbering).
func hdPeers(coll wire.Coll, n, r int) []int {
	var out []int
	if n&(n-1) == 0 {
		for mask := 1; mask < n; mask <<= 1 {
			out = append(out, r^mask)
		}
		return out
	}
	switch coll {
	case wire.AllGather:
		for d := 1; d < n; d <<= 1 {
			out = append(out, (r+d)%n, (r-d+n)%n)
		}
		return out
	case wire.ReduceScatter:
		pof2 := 1 << (bits.Len(uint(n)) - 1)
		rem := n - pof2
		if r < 2*rem {
			out = append(out, r^1)
			if r%2 == 0 {
				return out // folds into r+1, which sends its block back
			}
		}
		v := r - rem // member v of the halving group
		if r < 2*rem {
			v = r / 2
		}
		rank := func(v int) int {
			if v < rem {
				return 2*v + 1
			}
			return v + rem
		}
		for mask := 1; mask < pof2; mask <<= 1 {
			out = append(out, rank(v^mask))
		}
		return out
	}
	all := make([]int, 0, n-1) // not run at other n: every rank, to be safe
	for p := 0; p < n; p++ {
		if p != r {
			all = append(all, p)
		}
	}
	return all
}
