package algo

import (
	"fmt"
	"testing"
)

// Both trees of every double tree are spanning trees with consistent
// parent and child links, rooted where they should be; for allreduce each
// rank is an inner node of at most one tree unless n forces it.
func TestDoubleTree(t *testing.T) {
	for n := 1; n <= 33; n++ {
		for root := -1; root < n; root++ {
			for tr := 0; tr < 2; tr++ {
				if err := checkTree(n, root, tr); err != nil {
					t.Errorf("n=%d root=%d tree %d: %v", n, root, tr, err)
				}
			}
		}
	}
	for _, n := range []int{4, 8, 16, 32, 6, 12} { // inner in both trees: at most one rank
		both := 0
		for r := 0; r < n; r++ {
			tt := DoubleTree(n, r, -1)
			if len(tt[0].Kids) > 0 && len(tt[1].Kids) > 0 {
				both++
			}
		}
		if both > 1 {
			t.Errorf("n=%d: %d ranks are inner nodes of both trees", n, both)
		}
	}
}

func checkTree(n, root, tr int) error {
	parent := make([]int, n)
	tops := 0
	for r := 0; r < n; r++ {
		node := DoubleTree(n, r, root)[tr]
		parent[r] = node.Parent
		if node.Parent < 0 {
			tops++
			if root >= 0 && r != root {
				return fmt.Errorf("rank %d is a root, want %d", r, root)
			}
			if root >= 0 && n > 1 && len(node.Kids) != 1 {
				return fmt.Errorf("root %d has %d children, want 1", r, len(node.Kids))
			}
		}
		if len(node.Kids) > 2 {
			return fmt.Errorf("rank %d has %d children", r, len(node.Kids))
		}
		for _, k := range node.Kids {
			if k < 0 || k >= n || DoubleTree(n, k, root)[tr].Parent != r {
				return fmt.Errorf("rank %d lists child %d whose parent is not %d", r, k, r)
			}
		}
		if node.Parent >= 0 {
			found := false
			for _, k := range DoubleTree(n, node.Parent, root)[tr].Kids {
				found = found || k == r
			}
			if !found {
				return fmt.Errorf("rank %d's parent %d does not list it", r, node.Parent)
			}
		}
	}
	if tops != 1 {
		return fmt.Errorf("%d roots", tops)
	}
	for r := 0; r < n; r++ { // every rank reaches the root
		q, hops := r, 0
		for parent[q] >= 0 && hops <= n {
			q, hops = parent[q], hops+1
		}
		if hops > n {
			return fmt.Errorf("rank %d is on a cycle", r)
		}
	}
	return nil
}
