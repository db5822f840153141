package render

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"gocl/doctor"
)

func TestTextReport(t *testing.T) {
	f, err := doctor.LoadFacts(filepath.Join("..", "testdata", "rtxpro6000-pair-p2p-iommu.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := doctor.Judge(f, nil)
	var plain, color bytes.Buffer
	if err := Text(&plain, r, TextOptions{Source: "x.json"}); err != nil {
		t.Fatal(err)
	}
	Text(&color, r, TextOptions{Color: true})
	out := plain.String()
	for _, s := range []string{"judged from x.json", "RTX PRO 6000", "sm_120 (12.0)", "Topology", "NODE", "P2P read",
		"FAIL  p2p", "WARN  p2p-unsafe-iommu", "export NCCL_P2P_DISABLE=1", "Verdict: 0 error(s), 1 warning(s)"} {
		if !strings.Contains(out, s) {
			t.Errorf("text lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("escape codes without colour")
	}
	if !strings.Contains(color.String(), "\x1b[1;33m") {
		t.Error("no colour with Color")
	}
	// One verdict line per check.
	for _, c := range doctor.DefaultKB().Checks {
		if !strings.Contains(out, "  "+c.ID+" ") {
			t.Errorf("no verdict line for %s", c.ID)
		}
	}
}
