package comm

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"gocl/runtime/config/configtest"
	"gocl/runtime/status"
	"gocl/runtime/tune"
)

// TestTuneSettingsMustMatch: ranks whose tuning settings differ fail init
// on every rank, each naming a rank of the other side (init's exchange is a
// reduction now: the names come from a second one), over the full mesh and
// connecting on first use.
func TestTuneSettingsMustMatch(t *testing.T) {
	for _, lazy := range []string{"0", "1"} {
		t.Run("runtime_connect="+lazy, func(t *testing.T) {
			configtest.Setenv(t, "GOCL_RUNTIME_CONNECT", lazy, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "30")
			odd := map[int]bool{2: true, 4: true}
			testSettings = func(rank int, s tune.Settings) tune.Settings {
				if odd[rank] {
					s.DirectMax++
				}
				return s
			}
			t.Cleanup(func() { testSettings = nil })
			id, err := NewUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := InitRank(id, n, r, -1, Options{})
					if err == nil {
						c.Destroy()
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			for r, err := range errs {
				other := 2
				if odd[r] {
					other = 0
				}
				want := fmt.Sprintf("rank %d: rank %d runs with other GOCL_ALGO", r, other)
				if status.CodeOf(err) != status.InvalidUsage || !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: %v, want an invalid-usage error saying %q", r, err, want)
				}
			}
		})
	}
}
