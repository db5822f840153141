package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMisuseC builds libgocl.so from this tree and runs tests/c/misuse_test.c
// over it: every collective's in-place and alias forms against a reference
// (goclScatter with the root's recvbuff == sendbuff gave a rank the wrong
// block, issue 39), and goclGetLastError read by threads while others fail
// calls on the same comm (a reader could get a freed string).
func TestMisuseC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds libgocl.so (make test-go runs it)")
	}
	cc, err := exec.LookPath(envOr("CC", "gcc"))
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	build := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libgocl.so"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building libgocl.so: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "misuse_test")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Wextra", "-Werror", "-I.", "../tests/c/misuse_test.c",
		"-L"+dir, "-lgocl", "-lpthread", "-Wl,-rpath,"+dir, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("compiling tests/c/misuse_test.c: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("misuse_test: %v", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
