// Package sysfs reads the kernel's view of this machine from procfs and
// sysfs: the OS release, the IOMMU state and groups, the ACS bits of the
// PCIe ports above each GPU, the NVIDIA device nodes. It only reads files
// (no subprocess), so libgocl.so may use it at startup (doctor/defaults);
// Root lets tests point it at a fake tree.
package sysfs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"gocl/doctor"
	"gocl/runtime/config"
)

// System reads facts from the running machine. Root prefixes every path
// ("/" normally; a fake tree in tests).
type System struct {
	Root string
}

// Path is p inside Root.
func (s System) Path(p string) string { return filepath.Join(s.Root, p) }

// OS describes the host.
func (s System) OS() *doctor.OSInfo {
	o := &doctor.OSInfo{Arch: runtime.GOARCH, GOOS: runtime.GOOS, CPUs: runtime.NumCPU()}
	if data, err := os.ReadFile(s.Path("/etc/os-release")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				o.Name = strings.Trim(v, `"'`)
			}
		}
	}
	if data, err := os.ReadFile(s.Path("/proc/sys/kernel/osrelease")); err == nil {
		o.Kernel = strings.TrimSpace(string(data))
	}
	switch {
	case exists(s.Path("/.dockerenv")):
		o.Container = "docker"
	case exists(s.Path("/run/.containerenv")):
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
func (s System) Kernel(gpus []doctor.GPU) *doctor.Kernel {
	k := &doctor.Kernel{}
	if data, err := os.ReadFile(s.Path("/proc/cmdline")); err == nil {
		for _, tok := range strings.Fields(string(data)) {
			if iommuToken.MatchString(tok) && (!strings.HasPrefix(tok, "pci=") || strings.Contains(tok, "acs")) {
				k.CmdlineIOMMU = append(k.CmdlineIOMMU, tok)
			}
		}
	}
	groups, err := os.ReadDir(s.Path("/sys/kernel/iommu_groups"))
	n := 0
	if err == nil {
		n = len(groups)
	}
	k.IOMMUGroups = &n
	types := map[string]int{}
	for _, g := range groups {
		if t, err := os.ReadFile(filepath.Join(s.Path("/sys/kernel/iommu_groups"), g.Name(), "type")); err == nil {
			types[strings.TrimSpace(string(t))]++
		}
	}
	for i := range gpus {
		if gpus[i].PCIBusID == "" {
			continue
		}
		link := s.Path("/sys/bus/pci/devices/" + gpus[i].PCIBusID + "/iommu_group")
		if target, err := os.Readlink(link); err == nil {
			tfile := filepath.Join(s.Path("/sys/kernel/iommu_groups"), filepath.Base(target), "type")
			if t, err := os.ReadFile(tfile); err == nil {
				gpus[i].IOMMUGroupType = strings.TrimSpace(string(t))
			}
		}
	}
	k.IOMMU = iommuState(n, types, k.CmdlineIOMMU)
	s.acs(k, gpus)
	for _, pattern := range []string{"/dev/nvidiactl", "/dev/nvidia[0-9]*"} {
		matches, _ := filepath.Glob(s.Path(pattern))
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
func (s System) acs(k *doctor.Kernel, gpus []doctor.GPU) {
	anyPort, readable := false, true
	for _, g := range gpus {
		if g.PCIBusID == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(s.Path("/sys/bus/pci/devices/" + g.PCIBusID))
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
				k.ACS = append(k.ACS, doctor.ACSPort{Device: parts[i], GPU: g.Index, Flags: flags})
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

// getenv reads the process environment as it is now (inside libgocl.so, Go's
// own copy is the one taken when the library was loaded).
func getenv(name string) string {
	v, _ := config.LookupEnv(name)
	return v
}

// LocalFacts gathers the facts that cost no subprocess: the doctor's own
// identity, the environment (environ; nil: the process's now), the OS, NVML
// through nvml (nil: marked missing) and the kernel's IOMMU/ACS state for
// the GPUs NVML found. libgocl.so judges these at startup
// (doctor/defaults); gocl-doctor's collect.Collect adds the rest.
func (s System) LocalFacts(nvml doctor.NVMLCollector, environ []string) *doctor.Facts {
	if environ == nil {
		environ = config.Environ()
	}
	f := &doctor.Facts{Doctor: &doctor.DoctorInfo{Version: doctor.DoctorVersion,
		CollectedAt: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version()}}
	f.Env = doctor.FilterEnv(environ)
	f.OS = s.OS()
	if nvml != nil {
		nvml(f)
	} else {
		f.MarkMissing("nvml", "gocl-doctor was built without NVML (cgo disabled)")
	}
	f.Kernel = s.Kernel(f.GPUs)
	return f
}
