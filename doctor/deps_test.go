package doctor

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages pkg links (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command(gobin, "list", "-deps", pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // capi is cgo: listed as the library is built
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// libgocl.so judges the machine at startup with this package, but runs no
// program and renders nothing: the parts that do stay in gocl-doctor.
func TestLibraryLeavesOutTheDoctorsIO(t *testing.T) {
	ioOnly := []string{"os/exec", "gocl/doctor/collect", "gocl/doctor/render", "gocl/doctor/nvmlprobe",
		"github.com/NVIDIA/go-nvml/pkg/nvml"}
	lib := deps(t, "gocl/capi")
	if !slices.Contains(lib, "gocl/doctor") || !slices.Contains(lib, "gocl/runtime/defaults") {
		t.Fatalf("gocl/capi no longer links the doctor's judgement: %v", lib)
	}
	for _, p := range ioOnly {
		if slices.Contains(lib, p) {
			t.Errorf("libgocl.so (gocl/capi) links %s: keep running programs, probes and rendering in cmd/gocl-doctor", p)
		}
	}
	// The list names real packages: the command links every one of them.
	cmd := deps(t, "gocl/cmd/gocl-doctor")
	for _, p := range ioOnly {
		if !slices.Contains(cmd, p) {
			t.Errorf("gocl-doctor does not link %s: update this test's list", p)
		}
	}
}
