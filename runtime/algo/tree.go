package algo

import "gocl/kernels"

// Tree is one rank's place in one binary tree: its parent (-1 at the root)
// and its children.
type Tree struct {
	Parent int
	Kids   []int
}

// DoubleTree returns rank's place in the two trees of NCCL's double binary
// tree over n ranks. Each tree is the in-order binary tree over positions
// 0..m-1 in which odd positions are inner nodes and even ones leaves; the
// second tree mirrors the positions when m is even and shifts them by one
// when m is odd, so the inner nodes of one tree are (almost all) leaves of
// the other and the two halves of a buffer load different ranks and links.
// With root < 0 the trees span all ranks (allreduce) and have different
// roots; with root >= 0 both hang below root, which has one child in each.
func DoubleTree(n, rank, root int) [2]Tree {
	m, off := n, 0 // the trees are over m positions; rank = (pos + off) % n
	if root >= 0 {
		m, off = n-1, root+1
	}
	var out [2]Tree
	for t := range out {
		toRank := func(pos int) int {
			if t == 1 {
				pos = mirror(m, pos)
			}
			return (pos + off) % n
		}
		if rank == root {
			out[t] = Tree{Parent: -1}
			if m > 0 {
				out[t].Kids = []int{toRank(treeRoot(m))}
			}
			continue
		}
		pos := (rank - off + n) % n
		if t == 1 {
			pos = unmirror(m, pos)
		}
		parent, kids := inorder(m, pos)
		switch {
		case parent >= 0:
			out[t].Parent = toRank(parent)
		case root >= 0:
			out[t].Parent = root
		default:
			out[t].Parent = -1
		}
		for _, k := range kids {
			if k >= 0 {
				out[t].Kids = append(out[t].Kids, toRank(k))
			}
		}
	}
	return out
}

// mirror maps a position of the first tree to the second tree's labels.
func mirror(m, pos int) int {
	if m%2 == 0 {
		return m - 1 - pos
	}
	return (pos + 1) % m
}

func unmirror(m, pos int) int {
	if m%2 == 0 {
		return m - 1 - pos
	}
	return (pos - 1 + m) % m
}

// The in-order tree numbers its nodes 1..m: node p = k·2^j (k odd) sits j
// levels above the leaves, its children are p ± 2^(j-1) and its parent is
// p + 2^j or p - 2^j, whichever is a multiple of 2^(j+1). Nodes past m are
// skipped: a missing parent is replaced by its own parent, a missing child
// by its left descendant.

func lowbit(p int) int { return p & -p }

// treeRoot is the position of the root: the largest power of two <= m, less one.
func treeRoot(m int) int {
	p := 1
	for p*2 <= m {
		p *= 2
	}
	return p - 1
}

// inorder returns the parent (-1 at the root) and children (-1: none) of
// position pos of the in-order tree over m positions.
func inorder(m, pos int) (parent int, kids [2]int) {
	p := pos + 1
	up := func(p int) int {
		b := lowbit(p)
		if (p/b)%4 == 1 {
			return p + b
		}
		return p - b
	}
	q := p
	for {
		if q == treeRoot(m)+1 {
			parent = -1
			break
		}
		q = up(q)
		if q <= m {
			parent = q - 1
			break
		}
	}
	kids = [2]int{-1, -1}
	if b := lowbit(p); b > 1 {
		kids[0] = p - b/2 - 1 // the left subtree is always complete
		for c := p + b/2; ; c -= lowbit(c) / 2 {
			if c <= m {
				kids[1] = c - 1
				break
			}
			if lowbit(c) == 1 {
				break
			}
		}
	}
	return parent, kids
}

// treeUp reduces one chunk up tree tr: acc gets local ⊕ the children's
// partials and goes to the parent; at the tree's root it is the finished
// result. acc may be local itself (in place). comb reduces partials.
func treeUp(c *Ctx, p *prims, comb *kernels.Reducer, tr Tree, step int, local, acc []byte) error {
	kids := tr.Kids
	if len(kids) == 0 {
		return p.copySend(tr.Parent, step, local, acc)
	}
	if len(kids) == 1 && tr.Parent >= 0 {
		return p.recvReduceSend(c.Red, kids[0], tr.Parent, step, step, local, acc)
	}
	if err := p.recvReduceCopy(c.Red, kids[0], step, acc, local); err != nil {
		return err
	}
	if len(kids) == 2 {
		if tr.Parent >= 0 {
			return p.recvReduceSend(comb, kids[1], tr.Parent, step, step, acc, acc)
		}
		if err := p.recvReduceCopy(comb, kids[1], step, acc, acc); err != nil {
			return err
		}
	}
	c.Red.Finalize(acc)
	return nil
}

// treeDown passes one finished chunk down tree tr.
func treeDown(p *prims, tr Tree, step int, buf []byte) error {
	if tr.Parent >= 0 {
		if err := p.recv(tr.Parent, step, buf); err != nil {
			return err
		}
	}
	for _, k := range tr.Kids {
		if err := p.send(k, step, buf); err != nil {
			return err
		}
	}
	return nil
}
