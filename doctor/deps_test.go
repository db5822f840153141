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
	if !slices.Contains(lib, "gocl/doctor") || !slices.Contains(lib, "gocl/doctor/defaults") {
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

// The runtime knows no doctor: the machine defaults that libgocl.so applies
// at startup live at the edge (doctor/defaults, called from capi), so no
// package under runtime/ (nor its tests) links gocl/doctor or any package
// below it, directly or through another package.
func TestRuntimeImportsNoDoctor(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command(gobin, "list", "-test", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "gocl/runtime/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list gocl/runtime/...: %v\n%s", err, out)
	}
	runtimePkgs := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		runtimePkgs++
		for _, dep := range f[1:] {
			if dep == "gocl/doctor" || strings.HasPrefix(dep, "gocl/doctor/") {
				t.Errorf("%s links %s: the runtime knows no doctor (startup defaults live in doctor/defaults, called from capi)", f[0], dep)
			}
		}
	}
	if runtimePkgs < 10 {
		t.Fatalf("go list found %d runtime packages: the pattern no longer matches the tree\n%s", runtimePkgs, out)
	}
}
