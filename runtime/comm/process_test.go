package comm

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/status"
)

// Real processes on loopback: the test binary re-runs itself as N ranks
// (TestChildRank), the parent serves the rendezvous and collects exit codes.

const childEnv = "GOCL_TEST_CHILD"

// spawn starts n ranks running mode and returns each one's output and error.
func spawn(t *testing.T, n int, mode string, extraEnv ...string) ([]string, []error) {
	t.Helper()
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildRank$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, "GOCL_TEST_ID="+hex.EncodeToString(id[:]),
			fmt.Sprintf("GOCL_TEST_RANK=%d", r), fmt.Sprintf("GOCL_TEST_NRANKS=%d", n))
		cmd.Env = append(cmd.Env, extraEnv...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	return outs, errs
}

func TestProcessesMatrix(t *testing.T) {
	sizes := []int{0, 1, 7, 4097}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			outs, errs := spawn(t, n, "matrix", "GOCL_BUFFSIZE=4096", "GOCL_TEST_SIZES="+strings.Trim(fmt.Sprint(sizes), "[]"))
			for r := range outs {
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
		})
	}
}

// A rank that exits right after init: every survivor's next call fails
// quickly with an error naming it, well before GOCL_TIMEOUT.
func TestProcessDeathIsReported(t *testing.T) {
	start := time.Now()
	outs, errs := spawn(t, 3, "die", "GOCL_TIMEOUT=60")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v: survivors waited instead of noticing the dead rank", d)
	}
	for r := range outs {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}

// TestChildRank is one rank of the tests above; it does nothing unless run
// by spawn.
func TestChildRank(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only runs as a child of the multi-process tests")
	}
	raw, _ := hex.DecodeString(os.Getenv("GOCL_TEST_ID"))
	var id bootstrap.ID
	copy(id[:], raw)
	rank, _ := strconv.Atoi(os.Getenv("GOCL_TEST_RANK"))
	n, _ := strconv.Atoi(os.Getenv("GOCL_TEST_NRANKS"))
	c, err := InitRank(id, n, rank, -1, Options{})
	if err != nil {
		t.Fatalf("rank %d init: %v", rank, err)
	}
	switch mode {
	case "matrix":
		var sizes []int
		for _, f := range strings.Fields(os.Getenv("GOCL_TEST_SIZES")) {
			v, _ := strconv.Atoi(f)
			sizes = append(sizes, v)
		}
		if err := matrix(c, allTypes, sizes); err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		c.Destroy()
	case "die":
		if rank == 1 {
			os.Exit(0) // no destroy, no goodbye: like a crash
		}
		err := allReduce(c, 1<<16)
		if err == nil {
			err = allReduce(c, 1<<16)
		}
		if err == nil || status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("rank %d: want a remote error naming rank 1, got %v", rank, err)
		}
		c.Abort()
	}
}
