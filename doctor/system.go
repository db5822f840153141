package doctor

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"gocl/runtime/config"
)

// System reads facts from the running machine. Root prefixes every path
// ("/" normally; a fake tree in tests).
type System struct {
	Root string
}

func (s System) path(p string) string { return filepath.Join(s.Root, p) }

// envPrefixes select the environment variables worth reporting.
var envPrefixes = []string{"NCCL_", "GOCL_", "XLA_PYTHON_CLIENT_", "XLA_CLIENT_", "TORCH_NCCL_"}
var envNames = []string{"XLA_FLAGS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "JAX_PLATFORMS",
	"PYTORCH_CUDA_ALLOC_CONF", "LD_LIBRARY_PATH", "CUDA_HOME", "GODEBUG", "GOTRACEBACK"}

// FilterEnv keeps the variables the doctor reports from KEY=VALUE pairs.
func FilterEnv(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		keep := false
		for _, p := range envPrefixes {
			keep = keep || strings.HasPrefix(k, p)
		}
		for _, n := range envNames {
			keep = keep || k == n
		}
		if keep {
			out[k] = v
		}
	}
	return out
}

// OS describes the host.
func (s System) OS() *OSInfo {
	o := &OSInfo{Arch: runtime.GOARCH, GOOS: runtime.GOOS, CPUs: runtime.NumCPU()}
	if data, err := os.ReadFile(s.path("/etc/os-release")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				o.Name = strings.Trim(v, `"'`)
			}
		}
	}
	if data, err := os.ReadFile(s.path("/proc/sys/kernel/osrelease")); err == nil {
		o.Kernel = strings.TrimSpace(string(data))
	}
	switch {
	case exists(s.path("/.dockerenv")):
		o.Container = "docker"
	case exists(s.path("/run/.containerenv")):
		o.Container = "podman"
	case getenv("KUBERNETES_SERVICE_HOST") != "":
		o.Container = "kubernetes"
	case getenv("container") != "":
		o.Container = getenv("container")
	}
	return o
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

var iommuToken = regexp.MustCompile(`^(intel_iommu|amd_iommu|iommu|iommu\.passthrough|iommu\.strict|pci)=`)

// Kernel gathers IOMMU and ACS facts for the GPUs (their PCI addresses
// come from NVML; it fills each GPU's IOMMUGroupType).
func (s System) Kernel(gpus []GPU) *Kernel {
	k := &Kernel{}
	if data, err := os.ReadFile(s.path("/proc/cmdline")); err == nil {
		for _, tok := range strings.Fields(string(data)) {
			if iommuToken.MatchString(tok) && (!strings.HasPrefix(tok, "pci=") || strings.Contains(tok, "acs")) {
				k.CmdlineIOMMU = append(k.CmdlineIOMMU, tok)
			}
		}
	}
	groups, err := os.ReadDir(s.path("/sys/kernel/iommu_groups"))
	n := 0
	if err == nil {
		n = len(groups)
	}
	k.IOMMUGroups = &n
	types := map[string]int{}
	for _, g := range groups {
		if t, err := os.ReadFile(filepath.Join(s.path("/sys/kernel/iommu_groups"), g.Name(), "type")); err == nil {
			types[strings.TrimSpace(string(t))]++
		}
	}
	for i := range gpus {
		if gpus[i].PCIBusID == "" {
			continue
		}
		link := s.path("/sys/bus/pci/devices/" + gpus[i].PCIBusID + "/iommu_group")
		if target, err := os.Readlink(link); err == nil {
			tfile := filepath.Join(s.path("/sys/kernel/iommu_groups"), filepath.Base(target), "type")
			if t, err := os.ReadFile(tfile); err == nil {
				gpus[i].IOMMUGroupType = strings.TrimSpace(string(t))
			}
		}
	}
	k.IOMMU = iommuState(n, types, k.CmdlineIOMMU)
	s.acs(k, gpus)
	for _, pattern := range []string{"/dev/nvidiactl", "/dev/nvidia[0-9]*"} {
		matches, _ := filepath.Glob(s.path(pattern))
		for _, m := range matches {
			k.DevNodes = append(k.DevNodes, strings.TrimPrefix(m, strings.TrimSuffix(s.Root, "/")))
		}
	}
	return k
}

// iommuState summarises: "off" (no groups), "passthrough" (every group
// identity-mapped, or iommu=pt), "translated" (DMA remapping on), else
// "unknown".
func iommuState(groups int, types map[string]int, cmdline []string) string {
	if groups == 0 {
		return "off"
	}
	dma, identity := 0, 0
	for t, c := range types {
		switch {
		case strings.HasPrefix(t, "DMA"):
			dma += c
		case t == "identity":
			identity += c
		}
	}
	switch {
	case dma > 0:
		return "translated"
	case identity > 0:
		return "passthrough"
	}
	for _, tok := range cmdline {
		if tok == "iommu=pt" || tok == "iommu.passthrough=1" {
			return "passthrough"
		}
		if tok == "intel_iommu=off" || tok == "amd_iommu=off" {
			return "off"
		}
	}
	return "unknown"
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

var acsBits = []string{"SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"}

// acs reads the ACS control register of every PCIe port between each GPU
// and its root complex. Extended configuration space (offset >= 0x100) is
// readable only by root; otherwise ACSReadable is false.
func (s System) acs(k *Kernel, gpus []GPU) {
	anyPort, readable := false, true
	for _, g := range gpus {
		if g.PCIBusID == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(s.path("/sys/bus/pci/devices/" + g.PCIBusID))
		if err != nil {
			continue
		}
		parts := strings.Split(real, string(filepath.Separator))
		for i := len(parts) - 2; i >= 0; i-- { // parents only, nearest first
			if !pciAddr.MatchString(parts[i]) {
				continue
			}
			anyPort = true
			cfg, err := os.ReadFile(filepath.Join(strings.Join(parts[:i+1], string(filepath.Separator)), "config"))
			if err != nil || len(cfg) <= 0x100 {
				readable = false
				continue
			}
			if flags, ok := acsControl(cfg); ok {
				k.ACS = append(k.ACS, ACSPort{Device: parts[i], GPU: g.Index, Flags: flags})
			}
		}
	}
	if anyPort {
		k.ACSReadable = &readable
	}
}

// acsControl walks the PCIe extended capability list for ACS (id 0x000D)
// and decodes its control register (capability + 6).
func acsControl(cfg []byte) ([]string, bool) {
	off := 0x100
	for range 64 { // bounded: a corrupt list must not loop
		if off+8 > len(cfg) || off < 0x100 {
			return nil, false
		}
		hdr := binary.LittleEndian.Uint32(cfg[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return nil, false
		}
		if hdr&0xffff == 0x000d {
			ctl := binary.LittleEndian.Uint16(cfg[off+6:])
			flags := []string{}
			for bit, name := range acsBits {
				if ctl&(1<<bit) != 0 {
					flags = append(flags, name)
				}
			}
			return flags, true
		}
		off = int(hdr>>20) & 0xffc
		if off == 0 {
			return nil, false
		}
	}
	return nil, false
}

// UVMHMMError looks for the nvidia-uvm HMM/KASLR failure in the kernel
// log; nil when the log cannot be read (dmesg_restrict).
func UVMHMMError(ctx context.Context) *bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dmesg").Output()
	if err != nil {
		return nil
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "request_free_mem_region") && strings.Contains(l, "-34") {
			found = true
		}
	}
	return &found
}

// Libraries finds the driver's libraries the way the dynamic loader would:
// LD_LIBRARY_PATH, then ldconfig's cache, then the usual directories.
func (s System) Libraries(names []string, ldLibraryPath string) map[string]string {
	cache := map[string]string{}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && s.Root == "/" {
		for _, line := range strings.Split(string(out), "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
			if !ok {
				continue
			}
			if _, path, ok := strings.Cut(rest, "=> "); ok {
				if _, dup := cache[name]; !dup {
					cache[name] = strings.TrimSpace(path)
				}
			}
		}
	}
	dirs := filepath.SplitList(ldLibraryPath)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/lib/wsl/lib")
	out := map[string]string{}
	for _, n := range names {
		out[n] = ""
		for _, d := range dirs {
			if d != "" && exists(filepath.Join(s.path(d), n)) {
				out[n] = filepath.Join(d, n)
				break
			}
		}
		if out[n] == "" {
			out[n] = cache[n]
		}
	}
	return out
}

// GoRuntimesIn lists the Go-built files mapped into process pid: each is a
// Go runtime (a c-shared library, or the executable itself).
func (s System) GoRuntimesIn(pid int) *GoRuntimes {
	g := &GoRuntimes{PID: pid, Objects: []GoObject{}}
	data, err := os.ReadFile(s.path(fmt.Sprintf("/proc/%d/maps", pid)))
	if err != nil {
		g.Error = err.Error()
		return g
	}
	seen := map[string]bool{}
	var paths []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || seen[f[5]] {
			continue
		}
		seen[f[5]] = true
		paths = append(paths, f[5])
	}
	sort.Strings(paths)
	for _, p := range paths {
		if obj, ok := goObject(s.path(p)); ok {
			obj.Path = p
			g.Objects = append(g.Objects, obj)
		}
	}
	return g
}

// goObject reports whether an ELF file was built by Go (it has a
// .go.buildinfo section) and reads its build information.
func goObject(path string) (GoObject, bool) {
	ef, err := elf.Open(path)
	if err != nil {
		return GoObject{}, false
	}
	isGo := ef.Section(".go.buildinfo") != nil
	ef.Close()
	if !isGo {
		return GoObject{}, false
	}
	var o GoObject
	if bi, err := buildinfo.ReadFile(path); err == nil {
		o.GoVersion = bi.GoVersion
		o.Module = bi.Path
		for _, st := range bi.Settings {
			if st.Key == "-buildmode" {
				o.BuildMode = st.Value
			}
		}
	}
	return o, true
}

// getenv reads the process environment as it is now (inside libgocl.so, Go's
// own copy is the one taken when the library was loaded).
func getenv(name string) string {
	v, _ := config.LookupEnv(name)
	return v
}
