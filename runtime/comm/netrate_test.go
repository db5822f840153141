package comm

import (
	"fmt"
	"strings"
	"testing"

	"gocl/runtime/config/configtest"
	"gocl/runtime/transport/socket"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// GOCL_NET_GBPS reaches every rank's tuner: on 4 hosts of one rank, a
// 1 Gbit/s link makes 16 KiB all-reduces halving-doubling (half the bytes
// of the one-shot) and the chunk 256 KiB, and the rate is in the table
// TUNING prints. Unset (loopback reports no speed), the chunk stays.
func TestNetRateDrivesTheTuner(t *testing.T) {
	for _, tc := range []struct {
		gbps  string
		check bool // unset: whatever costs.txt and this process's crowding give
		want  tune.Algo
	}{{"", false, 0}, {"1", true, tune.HalvingDoubling}} {
		t.Run("GOCL_NET_GBPS="+tc.gbps, func(t *testing.T) {
			onFakeHosts(t, func(r int) int { return r })
			configtest.Setenv(t, "GOCL_NET_GBPS", tc.gbps, "GOCL_SOCKET_IFNAME", "lo")
			clique(t, 4, func(c *Comm) error {
				if want := map[string]int{"": socket.Chunk, "1": 256 << 10}[tc.gbps]; c.chunk != want {
					return fmt.Errorf("rank %d: chunk %d B, want %d", c.rank, c.chunk, want)
				}
				if got := c.plan.Pick(wire.AllReduce, 16<<10).Algo; tc.check && got != tc.want {
					return fmt.Errorf("rank %d: 16 KiB all-reduce on 4 hosts picked %s, want %s", c.rank, got, tc.want)
				}
				head := c.plan.Table()[0]
				if has := strings.Contains(head, "link between hosts 1 Gbit/s (GOCL_NET_GBPS)"); has != (tc.gbps != "") {
					return fmt.Errorf("rank %d: the tuner's table says %q", c.rank, head)
				}
				return nil
			})
		})
	}
}
