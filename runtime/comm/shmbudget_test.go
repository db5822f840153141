package comm

import (
	"fmt"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/transport/shm"
)

// TestShmBudgetCapsSegments: with GOCL_SHM_BUDGET the process never holds
// more segments than the budget; pairs past it talk over TCP, both ends
// alike, and results are right; the share returns when the ranks go.
func TestShmBudgetCapsSegments(t *testing.T) {
	for _, lazy := range []string{"0", "1"} {
		t.Run("runtime_connect="+lazy, func(t *testing.T) {
			before := shm.Held()
			const budgetMiB = 9 // two segments of ~4.3 MiB: one pair of this process's ranks
			configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "0", "GOCL_SOCKET_IFNAME", "lo", "GOCL_SHM_BUDGET", fmt.Sprint(budgetMiB),
				"GOCL_RUNTIME_CONNECT", lazy, "GOCL_ALGO", "ring", "GOCL_MAX_NCHANNELS", "1")
			const n = 4
			names := make([][]string, n)
			clique(t, n, func(c *Comm) error {
				if err := matrix(c, []abi.DataType{abi.Float32}, []int{1, 7, 5000}); err != nil {
					return err
				}
				if h := shm.Held() - before; h > budgetMiB<<20 {
					return fmt.Errorf("the process holds %d MiB of segments, over the %d MiB budget", h>>20, budgetMiB)
				}
				names[c.Rank()] = c.linkNames()
				return nil
			})
			sockets := 0
			for a := range n {
				for b := range n {
					if a == b || names[a] == nil || names[b] == nil {
						continue
					}
					if names[a][b] != names[b][a] {
						t.Errorf("ranks %d and %d disagree on their link: %s and %s", a, b, names[a][b], names[b][a])
					}
					if names[a][b] == "socket" {
						sockets++
					}
				}
			}
			t.Logf("transports by rank: %v", names)
			if sockets == 0 {
				t.Errorf("every pair is on shared memory, past a %d MiB budget: %v", budgetMiB, names)
			}
			if h := shm.Held(); h != before {
				t.Errorf("the process holds %d bytes of segments after its ranks are gone, %d before", h, before)
			}
		})
	}
}
