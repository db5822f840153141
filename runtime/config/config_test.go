package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestPrecedence(t *testing.T) {
	t.Cleanup(Reset)
	Reset()
	if v, src := Source("BUFFSIZE"); v != "1048576" || src != "default" {
		t.Errorf("default: %q from %s", v, src)
	}
	t.Setenv("NCCL_BUFFSIZE", "4096")
	Reset()
	if v, src := Source("BUFFSIZE"); v != "4096" || src != "NCCL_BUFFSIZE" {
		t.Errorf("NCCL fallback: %q from %s", v, src)
	}
	t.Setenv("GOCL_BUFFSIZE", "8192")
	Reset()
	if n, _ := Int("BUFFSIZE"); n != 8192 {
		t.Errorf("GOCL wins: %d", n)
	}
}

// A NCCL_ variable gocl set for NCCL (runtime/defaults) is not read back as
// a gocl setting; one the user set still is.
func TestNoFallbackToGoclsOwnNCCLVariables(t *testing.T) {
	t.Cleanup(func() {
		ownMu.Lock()
		delete(own, "NCCL_P2P_DISABLE")
		ownMu.Unlock()
		Reset()
	})
	t.Setenv("NCCL_P2P_DISABLE", "1")
	Reset()
	if v, src := Source("P2P_DISABLE"); v != "1" || src != "NCCL_P2P_DISABLE" {
		t.Fatalf("user's NCCL_P2P_DISABLE: %q from %s", v, src)
	}
	MarkSetByGocl("NCCL_P2P_DISABLE")
	Reset()
	if v, src := Source("P2P_DISABLE"); v != "0" || src != "default" || Bool("P2P_DISABLE") {
		t.Fatalf("gocl's own NCCL_P2P_DISABLE leaked into its setting: %q from %s", v, src)
	}
	t.Setenv("GOCL_P2P_DISABLE", "1")
	Reset()
	if !Bool("P2P_DISABLE") {
		t.Fatal("GOCL_P2P_DISABLE=1 ignored")
	}
}

func TestCheckNamesTheVariable(t *testing.T) {
	t.Cleanup(Reset)
	for k, v := range map[string]string{"GOCL_BUFFSIZE": "big", "GOCL_TIMEOUT": "soon"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			Reset()
			err := Check()
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: %v", k, v, err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	t.Cleanup(Reset)
	t.Setenv("GOCL_TIMEOUT", "1.5")
	Reset()
	if got := Timeout(); got != 1500*time.Millisecond {
		t.Errorf("Timeout() = %v", got)
	}
	t.Setenv("GOCL_TIMEOUT", "0")
	Reset()
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

// The README's table must list every setting.
func TestREADMEListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Table() {
		if !strings.Contains(string(readme), "`GOCL_"+v.Name+"`") {
			t.Errorf("README.md does not document GOCL_%s", v.Name)
		}
	}
}
