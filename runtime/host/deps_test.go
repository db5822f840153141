package host

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// gocldeps lists the gocl packages pkg links (go list -deps).
func gocldeps(t *testing.T, pkg string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "gocl/") && p != pkg {
			deps = append(deps, p)
		}
	}
	return deps
}

// The host's state is a leaf that communicators, transports, algorithms and
// streams share: it links no gocl package but the settings, and a stream
// waits under the policy without linking the transports.
func TestHostIsALeaf(t *testing.T) {
	if deps := gocldeps(t, "gocl/runtime/host"); !slices.Equal(deps, []string{"gocl/runtime/config"}) {
		t.Errorf("gocl/runtime/host links %v, want only gocl/runtime/config", deps)
	}
	if deps := gocldeps(t, "gocl/runtime/stream"); slices.Contains(deps, "gocl/runtime/transport") {
		t.Errorf("gocl/runtime/stream links gocl/runtime/transport (%v): it needs only the waiting policy (gocl/runtime/host)", deps)
	}
}
