package doctor

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// bridgeConfig is a 4 KiB PCIe configuration space whose extended
// capability list holds AER at 0x100 and ACS at 0x140 with control bits ctl.
func bridgeConfig(ctl uint16) []byte {
	cfg := make([]byte, 4096)
	binary.LittleEndian.PutUint32(cfg[0x100:], 0x0001|1<<16|0x140<<20)
	binary.LittleEndian.PutUint32(cfg[0x140:], 0x000d|1<<16)
	binary.LittleEndian.PutUint16(cfg[0x146:], ctl)
	return cfg
}

// fakeSys builds a sysfs/procfs tree: GPU 0 (0000:41:00.0) behind bridge
// 0000:40:01.1 whose ACS redirects; GPU 1 (0000:c1:00.0) behind a bridge
// whose config space reads short (not root).
func fakeSys(t *testing.T, groupType string) string {
	root := t.TempDir()
	write(t, root+"/proc/cmdline", []byte("BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro amd_iommu=on pci=noacs pci=realloc quiet\n"))
	for _, g := range []string{"0", "7", "9"} {
		write(t, root+"/sys/kernel/iommu_groups/"+g+"/type", []byte(groupType+"\n"))
	}
	gpu0 := "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
	gpu1 := "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0"
	write(t, root+"/sys/devices/pci0000:40/0000:40:01.1/config", bridgeConfig(0b1101)) // SrcValid ReqRedir CmpltRedir
	write(t, root+gpu0+"/config", make([]byte, 4096))
	write(t, root+"/sys/devices/pci0000:c0/0000:c0:01.1/config", make([]byte, 64))
	write(t, root+gpu1+"/config", make([]byte, 64))
	symlink(t, "../../../../kernel/iommu_groups/7", root+gpu0+"/iommu_group")
	symlink(t, "../../../../kernel/iommu_groups/9", root+gpu1+"/iommu_group")
	symlink(t, "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0", root+"/sys/bus/pci/devices/0000:41:00.0")
	symlink(t, "../../../devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0", root+"/sys/bus/pci/devices/0000:c1:00.0")
	write(t, root+"/dev/nvidiactl", nil)
	write(t, root+"/dev/nvidia0", nil)
	write(t, root+"/dev/nvidia1", nil)
	write(t, root+"/etc/os-release", []byte("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.2 LTS\"\n"))
	return root
}

func TestKernelFacts(t *testing.T) {
	root := fakeSys(t, "DMA-FQ")
	gpus := []GPU{{Index: 0, PCIBusID: "0000:41:00.0"}, {Index: 1, PCIBusID: "0000:c1:00.0"}}
	k := System{Root: root}.Kernel(gpus)
	if !slices.Equal(k.CmdlineIOMMU, []string{"amd_iommu=on", "pci=noacs"}) {
		t.Errorf("cmdline %v", k.CmdlineIOMMU)
	}
	if *k.IOMMUGroups != 3 || k.IOMMU != "translated" {
		t.Errorf("groups %d iommu %s", *k.IOMMUGroups, k.IOMMU)
	}
	if gpus[0].IOMMUGroupType != "DMA-FQ" || gpus[1].IOMMUGroupType != "DMA-FQ" {
		t.Errorf("group types %q %q", gpus[0].IOMMUGroupType, gpus[1].IOMMUGroupType)
	}
	if len(k.ACS) != 1 || k.ACS[0].Device != "0000:40:01.1" || k.ACS[0].GPU != 0 ||
		!slices.Equal(k.ACS[0].Flags, []string{"SrcValid", "ReqRedir", "CmpltRedir"}) {
		t.Errorf("acs %+v", k.ACS)
	}
	if k.ACSReadable == nil || *k.ACSReadable {
		t.Error("GPU 1's bridge reads short: ACS must be marked unreadable")
	}
	if !slices.Equal(k.DevNodes, []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"}) {
		t.Errorf("dev nodes %v", k.DevNodes)
	}
	if o := (System{Root: root}).OS(); o.Name != "Ubuntu 24.04.2 LTS" {
		t.Errorf("os %+v", o)
	}
}

func TestIOMMUState(t *testing.T) {
	for _, c := range []struct {
		groups  int
		types   map[string]int
		cmdline []string
		want    string
	}{
		{0, nil, nil, "off"},
		{3, map[string]int{"identity": 3}, nil, "passthrough"},
		{3, map[string]int{"identity": 2, "DMA": 1}, nil, "translated"},
		{3, nil, []string{"iommu=pt"}, "passthrough"},
		{3, nil, []string{"intel_iommu=on"}, "unknown"},
	} {
		if got := iommuState(c.groups, c.types, c.cmdline); got != c.want {
			t.Errorf("%+v: %s, want %s", c, got, c.want)
		}
	}
}

func TestACSControlSurvivesGarbage(t *testing.T) {
	loop := make([]byte, 4096)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|1<<16|0x100<<20) // points at itself
	if _, ok := acsControl(loop); ok {
		t.Error("self-loop found ACS")
	}
	if _, ok := acsControl(make([]byte, 0x104)); ok {
		t.Error("truncated config found ACS")
	}
	if flags, ok := acsControl(bridgeConfig(0)); !ok || len(flags) != 0 {
		t.Errorf("ACS present with no bits: %v %v", flags, ok)
	}
}

// A Python process with two Go-built libraries mapped: both are found, a
// text file and a non-Go library are not.
func TestGoRuntimesIn(t *testing.T) {
	exe, err := os.Executable() // this test binary is built by Go
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	symlink(t, exe, root+"/site/gocl/_native/libgocl.so")
	symlink(t, exe, root+"/site/other/_other.so")
	write(t, root+"/site/notes.txt", []byte("not an ELF file"))
	maps := ""
	for i, p := range []string{"/site/gocl/_native/libgocl.so", "/site/other/_other.so", "/site/notes.txt", "/site/gocl/_native/libgocl.so", "[heap]"} {
		maps += fmt.Sprintf("7f%04x000-7f%04x000 r-xp 00000000 08:01 %d %s\n", i, i+1, 1000+i, p)
	}
	maps += "7fff0000-7fff1000 rw-p 00000000 00:00 0\n"
	write(t, root+"/proc/77/maps", []byte(maps))
	g := System{Root: root}.GoRuntimesIn(77)
	if g.Error != "" || len(g.Objects) != 2 {
		t.Fatalf("%+v", g)
	}
	if g.Objects[0].Path != "/site/gocl/_native/libgocl.so" || !strings.HasPrefix(g.Objects[0].GoVersion, "go1.") {
		t.Errorf("%+v", g.Objects[0])
	}
	f := &Facts{GoRuntimes: g, Env: map[string]string{}}
	if !slices.Contains(ids(Judge(f, nil)), "go-runtimes-multiple") {
		t.Error("two runtimes not reported")
	}
	if g := (System{Root: root}).GoRuntimesIn(78); g.Error == "" {
		t.Error("missing process not reported")
	}
}

// This very process is a Go program: one runtime.
func TestGoRuntimesInSelf(t *testing.T) {
	g := System{Root: "/"}.GoRuntimesIn(os.Getpid())
	if g.Error != "" {
		t.Skip("no /proc here: ", g.Error)
	}
	if len(g.Objects) != 1 {
		t.Errorf("%+v", g.Objects)
	}
}

func TestFilterEnv(t *testing.T) {
	env := FilterEnv([]string{"NCCL_DEBUG=INFO", "GOCL_TIMEOUT=30", "XLA_FLAGS=--a=1", "XLA_PYTHON_CLIENT_PREALLOCATE=false",
		"CUDA_VISIBLE_DEVICES=", "HOME=/root", "AWS_SECRET_ACCESS_KEY=x", "PATH=/bin", "NCCLX=1"})
	want := map[string]string{"NCCL_DEBUG": "INFO", "GOCL_TIMEOUT": "30", "XLA_FLAGS": "--a=1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_VISIBLE_DEVICES": ""}
	if len(env) != len(want) {
		t.Errorf("%v", env)
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("%s = %q (%v)", k, got, ok)
		}
	}
}

func TestLibrariesFromLDLibraryPath(t *testing.T) {
	root := t.TempDir()
	write(t, root+"/opt/drv/libcuda.so.1", nil)
	libs := System{Root: root}.Libraries([]string{"libcuda.so.1", "libnvidia-ml.so.1"}, "/opt/none:/opt/drv")
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
	write(t, p, []byte("#!/bin/sh\n"+body+"\n"))
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
	var f Facts
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
	var f Facts
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
	var f Facts
	PythonProbe{Python: fakePython(t, `cat >/dev/null; echo "Traceback: boom" >&2; exit 3`)}.Collect(context.Background(), &f)
	if !strings.Contains(f.Missing["torch"], "exit status 3") || !strings.Contains(f.Missing["torch"], "boom") {
		t.Errorf("missing %v", f.Missing)
	}
	var g Facts
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
	var f Facts
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
	r := Judge(f, nil)
	if r.HasErrors() {
		t.Errorf("errors on a bare collection: %v", ids(r))
	}
}
