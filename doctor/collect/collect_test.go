package collect

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gocl/doctor"
	"gocl/doctor/internal/fakefs"
	"gocl/doctor/sysfs"
)

// A Python process with two Go-built libraries mapped: both are found, a
// text file and a non-Go library are not.
func TestGoRuntimesIn(t *testing.T) {
	exe, err := os.Executable() // this test binary is built by Go
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fakefs.Symlink(t, exe, root+"/site/gocl/_native/libgocl.so")
	fakefs.Symlink(t, exe, root+"/site/other/_other.so")
	fakefs.Write(t, root+"/site/notes.txt", []byte("not an ELF file"))
	maps := ""
	for i, p := range []string{"/site/gocl/_native/libgocl.so", "/site/other/_other.so", "/site/notes.txt", "/site/gocl/_native/libgocl.so", "[heap]"} {
		maps += fmt.Sprintf("7f%04x000-7f%04x000 r-xp 00000000 08:01 %d %s\n", i, i+1, 1000+i, p)
	}
	maps += "7fff0000-7fff1000 rw-p 00000000 00:00 0\n"
	fakefs.Write(t, root+"/proc/77/maps", []byte(maps))
	g := GoRuntimesIn(sysfs.System{Root: root}, 77)
	if g.Error != "" || len(g.Objects) != 2 {
		t.Fatalf("%+v", g)
	}
	if g.Objects[0].Path != "/site/gocl/_native/libgocl.so" || !strings.HasPrefix(g.Objects[0].GoVersion, "go1.") {
		t.Errorf("%+v", g.Objects[0])
	}
	f := &doctor.Facts{GoRuntimes: g, Env: map[string]string{}}
	if !slices.ContainsFunc(doctor.Judge(f, nil).Findings, func(fd doctor.Finding) bool { return fd.ID == "go-runtimes-multiple" }) {
		t.Error("two runtimes not reported")
	}
	if g := GoRuntimesIn(sysfs.System{Root: root}, 78); g.Error == "" {
		t.Error("missing process not reported")
	}
}

// This very process is a Go program: one runtime.
func TestGoRuntimesInSelf(t *testing.T) {
	g := GoRuntimesIn(sysfs.System{Root: "/"}, os.Getpid())
	if g.Error != "" {
		t.Skip("no /proc here: ", g.Error)
	}
	if len(g.Objects) != 1 {
		t.Errorf("%+v", g.Objects)
	}
}

func TestLibrariesFromLDLibraryPath(t *testing.T) {
	root := t.TempDir()
	fakefs.Write(t, root+"/opt/drv/libcuda.so.1", nil)
	libs := Libraries(sysfs.System{Root: root}, []string{"libcuda.so.1", "libnvidia-ml.so.1"}, "/opt/none:/opt/drv")
	if libs["libcuda.so.1"] != "/opt/drv/libcuda.so.1" || libs["libnvidia-ml.so.1"] != "" {
		t.Errorf("%v", libs)
	}
}

// fakePython writes a shell script standing in for an interpreter.
func fakePython(t *testing.T, body string) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	p := filepath.Join(t.TempDir(), "python")
	fakefs.Write(t, p, []byte("#!/bin/sh\n"+body+"\n"))
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPythonProbeParsesSections(t *testing.T) {
	py := fakePython(t, `cat >/dev/null
echo "some import noise"
case "$2" in
base) echo 'GOCL_DOCTOR_FACTS {"python": {"executable": "/x/python", "version": "3.12.3", "start_method_default": "fork"}, "packages": {"torch": "2.7.1+cu126"}}' ;;
torch) echo 'GOCL_DOCTOR_FACTS {"torch": {"version": "2.7.1+cu126", "cuda": "12.6", "arch_list": ["sm_90"], "nccl_version": "2.26.2"}}' ;;
jax) echo 'GOCL_DOCTOR_FACTS {"missing": "jax is not installed in /x/python"}' ;;
esac`)
	var f doctor.Facts
	PythonProbe{Python: py, Timeout: 10 * time.Second}.Collect(context.Background(), &f)
	if f.Python == nil || f.Python.Version != "3.12.3" || f.Packages["torch"] != "2.7.1+cu126" {
		t.Errorf("python %+v packages %v", f.Python, f.Packages)
	}
	if f.Torch == nil || f.Torch.NCCLVersion != "2.26.2" || f.Torch.ArchList[0] != "sm_90" {
		t.Errorf("torch %+v", f.Torch)
	}
	if f.JAX != nil || !strings.Contains(f.Missing["jax"], "not installed") {
		t.Errorf("jax %+v missing %v", f.JAX, f.Missing)
	}
}

// An import that hangs (CUDA initialisation does, on broken drivers) costs
// the timeout, is reported, and takes its children down with it.
func TestPythonProbeTimeout(t *testing.T) {
	py := fakePython(t, `cat >/dev/null; sleep 30 & wait`)
	var f doctor.Facts
	start := time.Now()
	PythonProbe{Python: py, Timeout: 500 * time.Millisecond}.Collect(context.Background(), &f)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	if !strings.Contains(f.Missing["torch"], "timed out") || !strings.Contains(f.Missing["python"], "timed out") {
		t.Errorf("missing %v", f.Missing)
	}
}

func TestPythonProbeFailures(t *testing.T) {
	var f doctor.Facts
	PythonProbe{Python: fakePython(t, `cat >/dev/null; echo "Traceback: boom" >&2; exit 3`)}.Collect(context.Background(), &f)
	if !strings.Contains(f.Missing["torch"], "exit status 3") || !strings.Contains(f.Missing["torch"], "boom") {
		t.Errorf("missing %v", f.Missing)
	}
	var g doctor.Facts
	PythonProbe{Python: "/nonexistent/python3"}.Collect(context.Background(), &g)
	if !strings.Contains(g.Missing["python"], "not found") || g.Missing["torch"] == "" {
		t.Errorf("missing %v", g.Missing)
	}
}

// The real probe script on this machine's python3, when there is one.
func TestPythonProbeReal(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	var f doctor.Facts
	PythonProbe{Python: py, Timeout: 2 * time.Minute}.Collect(context.Background(), &f)
	if f.Python == nil || f.Python.Version == "" || f.Python.StartMethodDefault == "" || f.Python.Executable == "" {
		t.Fatalf("python %+v missing %v", f.Python, f.Missing)
	}
	if f.Torch == nil && f.Missing["torch"] == "" {
		t.Error("torch neither found nor marked missing")
	}
	if f.JAX == nil && f.Missing["jax"] == "" {
		t.Error("jax neither found nor marked missing")
	}
	t.Logf("python %s, torch %+v, jax %+v, missing %v", f.Python.Version, f.Torch, f.JAX, f.Missing)
}

func TestCollectWithoutNVML(t *testing.T) {
	f := Collect(context.Background(), Options{Environ: []string{"NCCL_DEBUG=INFO", "HOME=/root"}, NoDmesg: true, PID: os.Getpid()})
	if f.Env["NCCL_DEBUG"] != "INFO" || len(f.Env) != 1 {
		t.Errorf("env %v", f.Env)
	}
	for _, k := range []string{"nvml", "python", "torch", "jax"} {
		if f.Missing[k] == "" {
			t.Errorf("%s not marked missing", k)
		}
	}
	if f.Kernel == nil || f.OS == nil || f.Doctor == nil || f.GoRuntimes == nil {
		t.Errorf("facts %+v", f)
	}
	r := doctor.Judge(f, nil)
	if r.HasErrors() {
		t.Errorf("errors on a bare collection: %+v", r.Findings)
	}
}

// MPITRAMPOLINE_LIB's library: gocl's MPI ABI (the one this tree built),
// another library with MPItrampoline's ABI (a stand-in compiled here), a
// library without it (this Go test binary), a missing file.
func TestMPILibrary(t *testing.T) {
	sys := sysfs.System{Root: "/"}
	if m := MPILibrary(sys, "/nonexistent/libmpiwrapper.so"); m.Exists || m.MPIABI || m.Gocl || m.Path != "/nonexistent/libmpiwrapper.so" {
		t.Errorf("missing file: %+v", m)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if m := MPILibrary(sys, exe); !m.Exists || m.MPIABI || m.Gocl {
		t.Errorf("a Go executable: %+v", m)
	}
	text := filepath.Join(t.TempDir(), "notes.so")
	fakefs.Write(t, text, []byte("not an ELF file"))
	if m := MPILibrary(sys, text); !m.Exists || m.MPIABI || m.Error == "" {
		t.Errorf("not an ELF file: %+v", m)
	}
	if cc, err := exec.LookPath("cc"); err == nil {
		dir := t.TempDir()
		src := filepath.Join(dir, "wrapper.c")
		fakefs.Write(t, src, []byte("const int mpiwrapper_version_major = 2;\nint MPIABI_Init(int* c, char*** v) { (void)c; (void)v; return 0; }\n"))
		lib := filepath.Join(dir, "libmpiwrapper.so")
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if m := MPILibrary(sys, lib); !m.Exists || !m.MPIABI || m.Gocl || m.Error != "" {
			t.Errorf("another MPI wrapper: %+v", m)
		}
	}
	gocl, _ := filepath.Abs(filepath.Join("..", "..", "python", "gocl", "_native", "libgocl_mpiabi.so"))
	if _, err := os.Stat(gocl); err != nil {
		t.Skipf("%s not built (make venv)", gocl)
	}
	if m := MPILibrary(sys, gocl); !m.Exists || !m.MPIABI || !m.Gocl || m.Error != "" {
		t.Errorf("gocl's MPI ABI: %+v", m)
	}
	// judged: the check passes naming it
	f := &doctor.Facts{JAX: &doctor.JAX{JAX: "0.10.2"}, MPILibrary: MPILibrary(sys, gocl),
		Env: map[string]string{"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi", "MPITRAMPOLINE_LIB": gocl}}
	for _, v := range doctor.Judge(f, nil).Checks {
		if v.Check == "jax-collectives" && (v.Status != "pass" || !strings.Contains(v.Detail, gocl)) {
			t.Errorf("verdict %+v", v)
		}
	}
}
