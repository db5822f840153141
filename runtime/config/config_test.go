package config

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPrecedence(t *testing.T) {
	if v, src := Source("BUFFSIZE"); v != "1048576" || src != "default" {
		t.Errorf("default: %q from %s", v, src)
	}
	t.Setenv("NCCL_BUFFSIZE", "4096")
	if v, src := Source("BUFFSIZE"); v != "4096" || src != "NCCL_BUFFSIZE" {
		t.Errorf("NCCL fallback: %q from %s", v, src)
	}
	t.Setenv("GOCL_BUFFSIZE", "8192")
	if n, _ := Int("BUFFSIZE"); n != 8192 {
		t.Errorf("GOCL wins: %d", n)
	}
}

// A NCCL_ variable gocl set for NCCL (doctor/defaults) is not read back as
// a gocl setting; one the user set still is.
func TestNoFallbackToGoclsOwnNCCLVariables(t *testing.T) {
	t.Cleanup(func() {
		ownMu.Lock()
		delete(own, "NCCL_P2P_DISABLE")
		ownMu.Unlock()
	})
	t.Setenv("NCCL_P2P_DISABLE", "1")
	if v, src := Source("P2P_DISABLE"); v != "1" || src != "NCCL_P2P_DISABLE" {
		t.Fatalf("user's NCCL_P2P_DISABLE: %q from %s", v, src)
	}
	MarkSetByGocl("NCCL_P2P_DISABLE")
	if v, src := Source("P2P_DISABLE"); v != "0" || src != "default" || Bool("P2P_DISABLE") {
		t.Fatalf("gocl's own NCCL_P2P_DISABLE leaked into its setting: %q from %s", v, src)
	}
	t.Setenv("GOCL_P2P_DISABLE", "1")
	if !Bool("P2P_DISABLE") {
		t.Fatal("GOCL_P2P_DISABLE=1 ignored")
	}
}

func TestCheckNamesTheVariable(t *testing.T) {
	for k, v := range map[string]string{"GOCL_BUFFSIZE": "big", "GOCL_TIMEOUT": "soon", "GOCL_NET_GBPS": "-1", "GOCL_SHM_CMA": "sometimes"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			err := Check()
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: %v", k, v, err)
			}
		})
	}
}

// GOCL_SHM_CMA's spellings, as SHMCMA reads them (Check refuses others).
func TestSHMCMA(t *testing.T) {
	for v, want := range map[string]string{"": "auto", " Auto ": "auto", "1": "all", "ON": "all", "0": "off", "no": "off"} {
		t.Setenv("GOCL_SHM_CMA", v)
		if got := SHMCMA(); got != want {
			t.Errorf("GOCL_SHM_CMA=%q: %q, want %q", v, got, want)
		}
		if err := Check(); err != nil {
			t.Errorf("GOCL_SHM_CMA=%q: Check: %v", v, err)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Setenv("GOCL_TIMEOUT", "1.5")
	if got := Timeout(); got != 1500*time.Millisecond {
		t.Errorf("Timeout() = %v", got)
	}
	t.Setenv("GOCL_TIMEOUT", "0")
	if got := Timeout(); got != 0 {
		t.Errorf("GOCL_TIMEOUT=0 means no deadline, got %v", got)
	}
}

func TestTableIsDocumented(t *testing.T) {
	for _, v := range Table() {
		if v.Doc == "" {
			t.Errorf("%s has no documentation", v.Name)
		}
	}
}

var updateREADME = flag.Bool("update-readme", false, "rewrite the README's settings table from Table()")

// The README's table is Table(), row for row (go test ./runtime/config
// -run TestREADME -update-readme rewrites it).
func TestREADMEListsEverySetting(t *testing.T) {
	const path = "../../README.md"
	const header = "| variable | default | read | meaning |\n|---|---|---|---|\n"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	var rows strings.Builder
	for _, v := range Table() {
		rows.WriteString(READMERow(v) + "\n")
	}
	start := strings.Index(readme, header)
	if start < 0 {
		t.Fatalf("README.md has no settings table starting with\n%s", header)
	}
	start += len(header)
	end := start
	for end < len(readme) && strings.HasPrefix(readme[end:], "| `GOCL_") {
		end += strings.IndexByte(readme[end:], '\n') + 1
	}
	if readme[start:end] == rows.String() {
		return
	}
	if *updateREADME {
		if err := os.WriteFile(path, []byte(readme[:start]+rows.String()+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's settings table differs from config.Table(); run go test ./runtime/config -run TestREADME -update-readme\nwant:\n%s", rows.String())
}
