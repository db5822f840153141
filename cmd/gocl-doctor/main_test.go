package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gocl/doctor"
	"gocl/doctor/nvmlprobe"
)

func fixture(name string) string { return filepath.Join("..", "..", "doctor", "testdata", name) }

func runArgs(t *testing.T, nvml doctor.NVMLCollector, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut, nvml)
	return code, out.String(), errOut.String()
}

func findingIDs(t *testing.T, out string) []string {
	t.Helper()
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var ids []string
	for _, f := range r.Findings {
		ids = append(ids, f.ID)
	}
	return ids
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--facts", fixture("rtx5090-torch271-cu126.json")}, 1, "torch-arch-unsupported"},
		{[]string{"--facts", fixture("rtx5090-cu128-old-driver.json"), "--json"}, 1, "driver-too-old"},
		{[]string{"--facts", fixture("h100-torch-cu126.json")}, 0, "Verdict: 0 error(s), 0 warning(s)"},
		{[]string{"--facts", fixture("rtxpro6000-pair-p2p-iommu.json"), "--no-color"}, 0, "p2p-unsafe-iommu"},
		{[]string{"--facts", fixture("no-gpu.json"), "--json"}, 0, "nvml-missing"},
		{[]string{"--version"}, 0, "gocl-doctor " + doctor.DoctorVersion},
		{[]string{"--help"}, 0, ""},
		{[]string{"--facts", "does-not-exist.json"}, 2, ""},
		{[]string{"--no-such-flag"}, 2, ""},
		{[]string{"stray-argument"}, 2, ""},
	} {
		code, out, errOut := runArgs(t, nil, c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.code, out, errOut)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v: output lacks %q\n%s", c.args, c.want, out)
		}
	}
}

func TestBadFactsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(p, []byte("{not json"), 0o644)
	code, _, errOut := runArgs(t, nil, "--facts", p)
	if code != 2 || !strings.Contains(errOut, "bad.json") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// --json then --facts: a report saved on one machine judges the same on
// another.
func TestSavedReportRoundTrip(t *testing.T) {
	code, out, _ := runArgs(t, nil, "--facts", fixture("rtx5090-pair-geforce-jax.json"), "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	saved := filepath.Join(t.TempDir(), "report.json")
	os.WriteFile(saved, []byte(out), 0o644)
	code2, out2, _ := runArgs(t, nil, "--facts", saved, "--json")
	if code2 != code || !slices.Equal(findingIDs(t, out), findingIDs(t, out2)) {
		t.Errorf("exit %d/%d findings %v / %v", code, code2, findingIDs(t, out), findingIDs(t, out2))
	}
}

// The real collection on this machine, NVML included: without a driver the
// doctor must finish, exit 0, and say that NVML is missing.
func TestRealCollection(t *testing.T) {
	code, out, errOut := runArgs(t, nvmlprobe.System, "--json", "--python", "none", "--pid", strconv.Itoa(os.Getpid()))
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("exit %d, not JSON: %v\n%s", code, err, errOut)
	}
	if r.Facts.NVML == nil {
		t.Fatal("no NVML facts")
	}
	t.Logf("exit %d, NVML %s, findings %v", code, r.Facts.NVML.Status, findingIDs(t, out))
	if r.Facts.NVML.Status == "ERROR_LIBRARY_NOT_FOUND" {
		if code != 0 || !slices.Contains(findingIDs(t, out), "nvml-missing") {
			t.Errorf("no-driver machine: exit %d findings %v", code, findingIDs(t, out))
		}
	} else if code != 0 && code != 1 {
		t.Errorf("exit %d", code)
	}
	if r.Facts.GoRuntimes == nil || len(r.Facts.GoRuntimes.Objects) != 1 {
		t.Errorf("go runtimes in this test process: %+v", r.Facts.GoRuntimes)
	}
}

// The built executable, as users and gocl.doctor run it.
func TestExecutable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "gocl-doctor")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	exitCode := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, _ := exitCode("--facts", fixture("rtx5090-torch271-cu126.json")); code != 1 {
		t.Errorf("error fixture: exit %d", code)
	}
	if code, _ := exitCode("--facts", fixture("h100-torch-cu126.json")); code != 0 {
		t.Errorf("clean fixture: exit %d", code)
	}
	if code, _ := exitCode("--bogus"); code != 2 {
		t.Errorf("usage: exit %d", code)
	}
	code, out := exitCode("--python", "none")
	if code != 0 && code != 1 {
		t.Errorf("local run: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "Checks") || !strings.Contains(out, "Verdict:") || strings.Contains(out, "\x1b[") {
		t.Errorf("local run output:\n%s", out)
	}
	t.Logf("local run, exit %d:\n%s", code, out)
}
