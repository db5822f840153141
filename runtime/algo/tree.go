package algo

import "gocl/kernels"

// Tree is one rank's place in one binary tree: its parent (-1 at the root)
// and its children.
type Tree struct {
	Parent int
	Kids   []int
}

// DoubleTree returns rank's place in the two trees of NCCL's double binary
// tree over n ranks. Each tree is a balanced in-order binary tree over
// positions 0..m-1; the second tree mirrors the positions when m is even and
// shifts them by one when m is odd, so most inner nodes of one tree are
// leaves of the other and the two halves of a buffer load different links.
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
			if pos < 0 {
				return -1
			}
			if t == 1 {
				pos = mirror(m, pos)
			}
			return (pos + off) % n
		}
		if rank == root {
			out[t] = Tree{Parent: -1}
			if m > 0 {
				out[t].Kids = []int{toRank(top(m))}
			}
			continue
		}
		pos := (rank - off + n) % n
		if t == 1 {
			pos = unmirror(m, pos)
		}
		parent, l, r := inorder(m, pos)
		out[t].Parent = toRank(parent)
		if parent < 0 && root >= 0 {
			out[t].Parent = root
		}
		for _, k := range []int{l, r} {
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

func top(m int) int { return m / 2 }

// inorder returns the parent and children of pos in the balanced binary tree
// over [0, m) whose root is the middle and whose subtrees are the halves.
func inorder(m, pos int) (parent, left, right int) {
	lo, hi, parent := 0, m, -1
	for {
		mid := (lo + hi) / 2
		if pos == mid {
			left, right = -1, -1
			if lo < mid {
				left = (lo + mid) / 2
			}
			if mid+1 < hi {
				right = (mid + 1 + hi) / 2
			}
			return parent, left, right
		}
		parent = mid
		if pos < mid {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
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
		return p.recvReduceSend(c.Red, kids[0], tr.Parent, step, local, acc)
	}
	if err := p.recvReduceCopy(c.Red, kids[0], step, acc, local); err != nil {
		return err
	}
	if len(kids) == 2 {
		if tr.Parent >= 0 {
			return p.recvReduceSend(comb, kids[1], tr.Parent, step, acc, acc)
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
		if err := p.send(k, step+1, buf); err != nil {
			return err
		}
	}
	return nil
}
