package doctor

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gocl/runtime/config"
)

// ---- nvml ----------------------------------------------------------------

var nvmlErrorFixes = map[string]string{
	"ERROR_LIB_RM_VERSION_MISMATCH": "The kernel module and the user-space driver differ (a driver upgrade without a reboot): reboot, or unload and reload the nvidia kernel modules.",
	"ERROR_DRIVER_NOT_LOADED":       "The nvidia kernel module is not loaded: sudo modprobe nvidia, and read dmesg for why it failed (an unsigned module under Secure Boot is a common cause).",
	"ERROR_NO_PERMISSION":           "This user cannot open /dev/nvidia*: add it to the group that owns them (ls -l /dev/nvidia*), or fix the udev rules / container device list.",
	"ERROR_GPU_IS_LOST":             "A GPU fell off the bus: read dmesg (Xid 79), check power and cooling, and reboot.",
	"ERROR_NOT_BUILT":               "This gocl-doctor was built with CGO_ENABLED=0, so it has no NVML: rebuild it with cgo (CGO_ENABLED=1 go build ./cmd/gocl-doctor) or install gocl from a wheel.",
}

func (j *judge) checkNVML() outcome {
	nv := j.f.NVML
	if nv == nil {
		return skip("no NVML facts%s", missingWhy(j.f, "nvml"))
	}
	if nv.Status == "ok" {
		return pass("driver %s, CUDA %s, %d GPU(s)", j.f.DriverVersion, j.driverCUDA(), len(j.f.GPUs))
	}
	var o outcome
	status := strings.TrimPrefix(nv.Status, "ERROR_")
	if nv.Status == "ERROR_LIBRARY_NOT_FOUND" {
		evidence := ""
		switch {
		case j.f.Kernel != nil && len(j.f.Kernel.DevNodes) > 0:
			evidence = strings.Join(j.f.Kernel.DevNodes, ", ") + " exist"
		case len(j.gpus) > 0:
			evidence = fmt.Sprintf("%s sees %d GPU(s)", j.gpus[0].Source, len(j.gpus))
		}
		consequence := "No GPU facts are available"
		if len(j.gpus) > 0 {
			consequence = "GPU facts come from " + j.gpus[0].Source + " only"
		}
		if evidence == "" {
			o.add("nvml-missing", map[string]any{"Status": status})
		} else {
			o.add("nvml-missing-with-gpu", map[string]any{"Status": status, "Evidence": evidence, "Consequence": consequence})
		}
		return o
	}
	fix, ok := nvmlErrorFixes[nv.Status]
	if !ok {
		fix = "Run nvidia-smi to see the driver's own error message."
	}
	o.add("nvml-error", map[string]any{"Status": status, "Error": nv.Error, "Fix": fix})
	return o
}

func missingWhy(f *Facts, fact string) string {
	if why, ok := f.Missing[fact]; ok {
		return ": " + why
	}
	return ""
}

// ---- libraries -----------------------------------------------------------

var soName = regexp.MustCompile(`(lib[\w.+-]*?\.so(?:\.\d+)*)`)

func (j *judge) checkLibraries() outcome {
	var o outcome
	var ok []string
	if lib, known := j.f.Libraries["libcuda.so.1"]; known {
		if lib == "" && j.nvmlOK() {
			branch := ""
			if j.driver != nil {
				branch = strconv.Itoa(j.driver.Major())
			}
			o.add("libcuda-missing", map[string]any{"Branch": branch})
		} else if lib != "" {
			ok = append(ok, "libcuda.so.1")
		}
	}
	if t := j.f.Torch; t != nil && t.Version == "" && t.Error != "" {
		lib := ""
		if strings.Contains(t.Error, ".so") {
			if m := soName.FindStringSubmatch(t.Error); m != nil {
				lib = m[1]
			}
		}
		index := ""
		if v, err := ParseVersion(j.pkg("torch")); err == nil && strings.HasPrefix(v.Local, "cu") {
			index = j.kb.TorchIndexURL + v.Local
		}
		o.add("torch-import-failed", map[string]any{"Python": j.python(), "Error": firstLine(t.Error), "Library": lib, "IndexURL": index})
	} else if t != nil && t.Version != "" {
		ok = append(ok, "torch")
	}
	if x := j.f.JAX; x != nil && x.JAX == "" && x.Error != "" {
		o.add("jax-import-failed", map[string]any{"Python": j.python(), "Error": firstLine(x.Error), "Variant": j.jaxVariant()})
	} else if x != nil && x.JAX != "" {
		ok = append(ok, "jax")
	}
	if p := j.f.Python; p != nil && p.GoclPath != "" {
		if p.GoclNativeLib == "" {
			o.add("libgocl-missing", map[string]any{"Path": p.GoclPath, "Expected": p.GoclPath + "/_native/libgocl.so", "Python": j.python()})
		} else {
			ok = append(ok, "libgocl.so")
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(ok) == 0 {
		return skip("nothing to load here (no driver, torch, jax or gocl found)")
	}
	return pass("%s load", strings.Join(ok, ", "))
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	lines := strings.Split(s, "\n")
	// Python tracebacks end with the exception; prefer the last line.
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 400 {
		last = last[:400] + "..."
	}
	return last
}

// ---- torch-arch ----------------------------------------------------------

func (j *judge) checkTorchArch() outcome {
	t := j.f.Torch
	if t == nil || t.Version == "" {
		return skip("%s", orDefault(j.f.Missing["torch"], "torch not installed"))
	}
	if len(j.gpus) == 0 {
		return skip("no GPU")
	}
	var o outcome
	if t.CUDA == "" {
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: j.ncclNeed()})
		o.add("torch-cpu-build", map[string]any{"Torch": t.Version, "Count": len(j.gpus), "Names": names(j.gpus), "Command": best.command})
		return o
	}
	if len(t.ArchList) == 0 {
		return skip("torch.cuda.get_arch_list() is empty or missing")
	}
	var fine []string
	for _, group := range groupByModel(j.gpus) {
		g := group[0]
		if !g.ccOK {
			continue
		}
		v := ArchRunnable(t.ArchList, g.cc)
		if v.Parsed == 0 {
			return skip("arch list %v is not CUDA's (ROCm build?)", t.ArchList)
		}
		vars := map[string]any{
			"GPU": indices(group), "Name": g.Name, "SM": g.cc.SM(), "CC": g.cc.String(),
			"SMMajor": g.cc.Major, "Minor": g.cc.Minor, "Torch": t.Version,
			"ArchList": strings.Join(t.ArchList, " "), "By": v.By,
		}
		switch {
		case !v.Runnable:
			best, alt := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: j.ncclNeed()})
			vars["Command"], vars["PipCommand"], vars["Constraint"] = best.command, best.pip, best.constraint
			vars["Alternative"] = ""
			if alt != nil {
				vars["Alternative"] = alt.command
			}
			o.add("torch-arch-unsupported", vars)
		case v.ViaPTX:
			best, _ := j.recommendTorch(torchNeeds{caps: []Capability{g.cc}, useDriver: true, minNCCL: j.ncclNeed()})
			vars["Command"] = ""
			if best.wheel.Torch != "" {
				if v2 := ArchRunnable(best.wheel.ArchList, g.cc); !v2.ViaPTX {
					vars["Command"] = best.command
				}
			}
			o.add("torch-arch-ptx-only", vars)
		default:
			fine = append(fine, fmt.Sprintf("%s by %s", g.cc.SM(), v.By))
		}
	}
	if t.CUDAAvailable != nil && !*t.CUDAAvailable && j.nvmlOK() && len(j.f.GPUs) > 0 {
		why := "torch.cuda.is_available() is False"
		if t.Error != "" {
			why += ": " + firstLine(t.Error)
		}
		cvd, set := j.f.Env["CUDA_VISIBLE_DEVICES"]
		if !set {
			cvd = "unset"
		} else {
			cvd = strconv.Quote(cvd)
		}
		o.add("torch-cuda-unavailable", map[string]any{"Torch": t.Version, "CUDA": t.CUDA, "Count": len(j.f.GPUs), "Why": why, "CVD": cvd, "Python": j.python()})
	}
	if len(o.hits) > 0 {
		return o
	}
	return pass("%s runs %s", j.torchLabel(), strings.Join(fine, "; "))
}

func (j *judge) caps(gs []gpuView) []Capability {
	var out []Capability
	for _, g := range gs {
		if g.ccOK {
			out = append(out, g.cc)
		}
	}
	return out
}

// ncclNeed is the NCCL floor a recommended torch must meet: 2.27 on
// multi-GPU sm_120 machines, none otherwise.
func (j *judge) ncclNeed() string {
	if len(j.sm12()) >= 2 {
		return j.kb.NCCL.SM120Recommended
	}
	return ""
}

// ---- driver --------------------------------------------------------------

type driverNeed struct {
	what string
	min  Version
	hard bool   // the software cannot work at all with an older driver
	why  string // for hard needs
	cuda string // the wheel's CUDA, for soft needs
}

func (j *judge) checkDriver() outcome {
	if j.driver == nil {
		if len(j.gpus) == 0 {
			return skip("no driver, no GPU")
		}
		return skip("driver version unknown (NVML missing)")
	}
	var needs []driverNeed
	for _, group := range groupByModel(j.gpus) {
		g := group[0]
		if !g.ccOK {
			continue
		}
		if min, ok := j.kb.ArchMinimumDriver.minimum(g.cc.String()); ok && j.driver.Less(min) {
			needs = append(needs, driverNeed{
				what: fmt.Sprintf("GPU %s (%s, %s)", indices(group), g.Name, g.cc.SM()), min: min, hard: true,
				why: fmt.Sprintf("%s GPUs are supported from driver %s on.", g.cc.SM(), min.Raw),
			})
		}
	}
	var torchSoft *driverNeed
	if t := j.f.Torch; t != nil && t.CUDA != "" {
		if min, _, ok := j.kb.driverMinimumFor(t.CUDA); ok && j.driver.Less(min) {
			wheel := MustVersion(t.CUDA)
			n := driverNeed{what: j.torchLabel(), min: min, cuda: t.CUDA}
			floor, known := j.kb.DriverMinorCompat.minimum(strconv.Itoa(wheel.Major()))
			switch {
			case !known || j.driver.Less(floor):
				n.hard = true
				n.why = fmt.Sprintf("A driver older than %s cannot run any CUDA %d.x program: torch reports 'The NVIDIA driver on your system is too old' and torch.cuda.is_available() is False.", floorRaw(floor, known), wheel.Major())
			case len(needs) > 0: // the GPU itself already needs a newer driver
				n.hard = true
			}
			if n.hard {
				needs = append(needs, n)
			} else {
				torchSoft = &n
			}
		}
	}
	var o outcome
	if len(needs) > 0 {
		var whats, whys []string
		min := needs[0].min
		torchHard := false
		for _, n := range needs {
			whats = append(whats, n.what)
			if n.why != "" {
				whys = appendOnce(whys, n.why)
			}
			if min.Less(n.min) {
				min = n.min
			}
			torchHard = torchHard || n.cuda != ""
		}
		downgrade := ""
		if torchHard && len(j.gpus) > 0 && j.driverCUDA() != "" {
			if best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, maxCUDA: j.driverCUDA(), minNCCL: j.ncclNeed()}); best.command != "" {
				downgrade = best.command
			}
		}
		o.add("driver-too-old", map[string]any{
			"What": strings.Join(whats, " and "), "Min": min.Raw, "Driver": j.driver.Raw,
			"DriverCUDA": orUnknown(j.driverCUDA()), "Why": strings.Join(whys, " "),
			"Branch": strconv.Itoa(min.Major()), "Downgrade": downgrade,
		})
	}
	if torchSoft != nil {
		wheel := MustVersion(torchSoft.cuda)
		floor, _ := j.kb.DriverMinorCompat.minimum(strconv.Itoa(wheel.Major()))
		o.add("driver-minor-compat", map[string]any{
			"What": torchSoft.what, "CUDA": torchSoft.cuda, "Min": torchSoft.min.Raw, "Driver": j.driver.Raw,
			"DriverCUDA": orUnknown(j.driverCUDA()), "Branch": strconv.Itoa(torchSoft.min.Major()),
			"Major": wheel.Major(), "Floor": floor.Raw,
		})
	}
	if len(o.hits) > 0 {
		return o
	}
	detail := fmt.Sprintf("driver %s (CUDA %s)", j.driver.Raw, orUnknown(j.driverCUDA()))
	if t := j.f.Torch; t != nil && t.CUDA != "" {
		if min, _, ok := j.kb.driverMinimumFor(t.CUDA); ok {
			detail += fmt.Sprintf(" >= %s needed by torch's CUDA %s", min.Raw, t.CUDA)
		}
	}
	return pass("%s", detail)
}

func floorRaw(v Version, ok bool) string {
	if !ok {
		return "the CUDA major's first release"
	}
	return v.Raw
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// ---- nccl ----------------------------------------------------------------

func (j *judge) checkNCCL() outcome {
	sm12 := j.sm12()
	if len(sm12) == 0 {
		return skip("no sm_120 GPU")
	}
	version, source := "", ""
	if t := j.f.Torch; t != nil && t.NCCLVersion != "" {
		version, source = t.NCCLVersion, "torch "+t.Version
	} else {
		for _, p := range []string{"nvidia-nccl-cu13", "nvidia-nccl-cu12"} {
			if v := j.pkg(p); v != "" {
				version, source = v, p
				break
			}
		}
	}
	if version == "" {
		return skip("NCCL version unknown (no torch, no nvidia-nccl-* package)")
	}
	v, err := ParseVersion(version)
	if err != nil {
		return skip("NCCL version %q unreadable", version)
	}
	min, rec := MustVersion(j.kb.NCCL.SM120Minimum), MustVersion(j.kb.NCCL.SM120Recommended)
	vars := map[string]any{"Source": source, "NCCL": version, "GPUs": indices(sm12), "Count": len(sm12), "Recommended": rec.Raw}
	var o outcome
	switch {
	case v.Less(min):
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: rec.Raw})
		vars["Command"] = best.command
		o.add("nccl-broken-sm120", vars)
	case v.Less(rec) && len(sm12) >= 2:
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: rec.Raw})
		vars["Command"] = best.command
		o.add("nccl-old-sm120", vars)
	default:
		return pass("NCCL %s (%s) on sm_120", version, source)
	}
	return o
}

// ---- p2p -----------------------------------------------------------------

// consumerOrWorkstation tells GeForce / RTX workstation cards (PCIe, the
// P2P-over-IOMMU trouble) from datacenter parts.
func consumerOrWorkstation(g gpuView) bool {
	if g.ccOK && g.cc.Major == 12 {
		return true
	}
	switch strings.ToLower(g.Brand) {
	case "geforce", "geforce_rtx", "nvidia_rtx", "quadro", "quadro_rtx", "titan", "titan_rtx":
		return true
	}
	n := strings.ToLower(g.Name)
	return strings.Contains(n, "geforce") || strings.Contains(n, " rtx")
}

func (j *judge) checkP2P() outcome {
	var o outcome
	if k := j.f.Kernel; k != nil && k.UVMHMMError != nil && *k.UVMHMMError {
		o.add("uvm-hmm", map[string]any{})
	}
	if len(j.f.GPUs) < 2 {
		if len(o.hits) > 0 {
			return o
		}
		return skip("fewer than two GPUs")
	}
	p := j.f.P2P
	if p == nil || len(p.Read) == 0 {
		if len(o.hits) > 0 {
			return o
		}
		return skip("no P2P matrix%s", missingWhy(j.f, "p2p"))
	}
	byIndex := map[int]gpuView{}
	for _, g := range j.gpus {
		byIndex[g.Index] = g
	}
	var p2pPairs, noP2PPairs []string
	var p2pGPUs, noP2PGPUs []gpuView
	statuses := map[string]bool{}
	seen := map[int]bool{}
	noSeen := map[int]bool{}
	for a := range p.Read {
		for b := a + 1; b < len(p.Read[a]); b++ {
			ga, gb := byIndex[a], byIndex[b]
			if !consumerOrWorkstation(ga) || !consumerOrWorkstation(gb) {
				continue
			}
			if j.f.Topology != nil && a < len(j.f.Topology.Matrix) && b < len(j.f.Topology.Matrix[a]) &&
				strings.HasPrefix(j.f.Topology.Matrix[a][b], "NV") {
				continue // NVLink bridge: not the PCIe case
			}
			read := p.Read[a][b]
			write := read
			if len(p.Write) > a && len(p.Write[a]) > b {
				write = p.Write[a][b]
			}
			pair := fmt.Sprintf("%d-%d", a, b)
			if read == "OK" && write == "OK" {
				p2pPairs = append(p2pPairs, pair)
				for _, g := range []gpuView{ga, gb} {
					if !seen[g.Index] {
						seen[g.Index] = true
						p2pGPUs = append(p2pGPUs, g)
					}
				}
			} else {
				noP2PPairs = append(noP2PPairs, pair)
				statuses[read] = true
				for _, g := range []gpuView{ga, gb} {
					if !noSeen[g.Index] {
						noSeen[g.Index] = true
						noP2PGPUs = append(noP2PGPUs, g)
					}
				}
			}
		}
	}
	if len(p2pPairs) > 0 {
		unsafe, unknown, rootFix := j.p2pHazards(p2pGPUs)
		vars := map[string]any{"Pairs": strings.Join(p2pPairs, ", "), "Names": names(p2pGPUs)}
		switch {
		case len(unsafe) > 0:
			vars["Why"], vars["RootFix"] = strings.Join(unsafe, "; "), strings.Join(rootFix, "; ")
			o.add("p2p-unsafe-iommu", vars)
		case len(unknown) > 0:
			vars["Why"] = strings.Join(unknown, "; ")
			o.add("p2p-unverified", vars)
		}
	}
	if len(noP2PPairs) > 0 {
		var st []string
		for s := range statuses {
			st = append(st, s)
		}
		sort.Strings(st)
		o.add("p2p-unsupported", map[string]any{"Pairs": strings.Join(noP2PPairs, ", "), "Names": names(noP2PGPUs), "Status": strings.Join(st, ", ")})
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(p2pPairs) > 0 {
		iommu := "unknown"
		if j.f.Kernel != nil {
			iommu = j.f.Kernel.IOMMU
		}
		return pass("P2P on %s with IOMMU %s and no ACS redirection", strings.Join(p2pPairs, ", "), iommu)
	}
	return pass("no consumer/workstation PCIe GPU pair (NVLink or datacenter GPUs)")
}

// p2pHazards says what makes P2P unsafe for these GPUs (IOMMU translation,
// ACS redirection), what could not be read, and the root-cause fixes.
func (j *judge) p2pHazards(gs []gpuView) (unsafe, unknown, rootFix []string) {
	k := j.f.Kernel
	if k == nil {
		return nil, []string{"no kernel facts"}, nil
	}
	translated := false
	groupKnown := true
	var dmaGPUs []string
	dmaTypes := map[string]bool{}
	for _, g := range gs {
		switch g.IOMMUGroupType {
		case "DMA", "DMA-FQ":
			dmaGPUs = append(dmaGPUs, fmt.Sprint(g.Index))
			dmaTypes[g.IOMMUGroupType] = true
			translated = true
		case "":
			groupKnown = false
		}
	}
	if translated {
		unsafe = append(unsafe, fmt.Sprintf("the IOMMU translates the DMA of GPU %s (iommu group type %s)",
			strings.Join(dmaGPUs, ", "), strings.Join(sortedKeys(dmaTypes), "/")))
	}
	if !groupKnown && !translated {
		switch k.IOMMU {
		case "translated":
			why := "the IOMMU is on"
			if len(k.CmdlineIOMMU) > 0 {
				why += " (kernel command line: " + strings.Join(k.CmdlineIOMMU, " ") + ")"
			}
			unsafe = append(unsafe, why)
			translated = true
		case "off", "passthrough":
		default:
			unknown = append(unknown, "IOMMU state unknown")
		}
	}
	if translated {
		rootFix = append(rootFix, "boot with iommu=pt (Intel: intel_iommu=on iommu=pt) or amd_iommu=off, or turn the IOMMU off in the BIOS if nothing needs it (VFIO passthrough does)")
	}
	gpuSet := map[int]bool{}
	for _, g := range gs {
		gpuSet[g.Index] = true
	}
	redirect := false
	for _, port := range k.ACS {
		if !gpuSet[port.GPU] {
			continue
		}
		var bad []string
		for _, fl := range port.Flags {
			if fl == "ReqRedir" || fl == "CmpltRedir" {
				bad = append(bad, fl+"+")
			}
		}
		if len(bad) > 0 {
			unsafe = append(unsafe, fmt.Sprintf("ACS redirects peer traffic on bridge %s above GPU %d (%s)", port.Device, port.GPU, strings.Join(bad, " ")))
			redirect = true
		}
	}
	if !redirect && (k.ACSReadable == nil || !*k.ACSReadable) {
		unknown = append(unknown, "PCIe ACS control registers unreadable (needs root)")
	}
	if redirect {
		rootFix = append(rootFix, "disable ACS in the BIOS (often 'PCIe ACS' / 'ACS Enable'), or clear it on the bridges with setpci -s <bridge> ECAP_ACS+6.w=0000 (until reboot)")
	}
	if len(unsafe) > 0 {
		unknown = nil
	}
	return unsafe, unknown, rootFix
}

// ---- jax -----------------------------------------------------------------

func (j *judge) jaxVariant() string {
	if x := j.f.JAX; x != nil {
		for name := range x.Plugins {
			if strings.Contains(name, "cuda13") {
				return "cuda13"
			}
		}
		for name := range x.Plugins {
			if strings.Contains(name, "cuda12") {
				return "cuda12"
			}
		}
	}
	if j.driver != nil && !j.driver.Less(MustVersion(j.kb.JAX.PluginMinimumDriver["cuda13"])) {
		return "cuda13"
	}
	return "cuda12"
}

// jaxPlugin returns the installed CUDA plugin's distribution and version.
func (j *judge) jaxPlugin() (string, string) {
	x := j.f.JAX
	if x == nil {
		return "", ""
	}
	keys := make([]string, 0, len(x.Plugins))
	for k := range x.Plugins {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.Contains(k, "cuda") {
			return k, x.Plugins[k]
		}
	}
	return "", ""
}

func (j *judge) checkJAX() outcome {
	x := j.f.JAX
	if x == nil || x.JAX == "" {
		return skip("%s", orDefault(j.f.Missing["jax"], "jax not installed"))
	}
	var o outcome
	plugin, pluginVersion := j.jaxPlugin()
	variant := j.jaxVariant()
	if plugin != "" && j.driver != nil {
		if min, ok := j.kb.JAX.PluginMinimumDriver[variant]; ok && j.driver.Less(MustVersion(min)) {
			other := ""
			if variant == "cuda13" && !j.driver.Less(MustVersion(j.kb.JAX.PluginMinimumDriver["cuda12"])) {
				other = "cuda12"
			}
			o.add("jax-driver-too-old", map[string]any{"Plugin": plugin, "Version": pluginVersion, "Variant": variant,
				"Min": min, "Driver": j.driver.Raw, "Other": other, "Python": j.python()})
		}
	}
	gpuBackend := x.Backend == "gpu" || x.Backend == "cuda"
	platforms, pinned := j.f.Env["JAX_PLATFORMS"]
	cpuByChoice := pinned && !strings.Contains(platforms, "cuda") && !strings.Contains(platforms, "gpu")
	if len(j.f.GPUs) > 0 && !gpuBackend && !cpuByChoice && (plugin == "" || x.Backend != "") {
		o.add("jax-no-gpu", map[string]any{"JAX": x.JAX, "Backend": orUnknown(x.Backend), "Count": len(j.f.GPUs),
			"Error": firstLineOrEmpty(x.Error), "Python": j.python(), "Variant": variant})
	}
	sm12 := j.sm12()
	if len(sm12) > 0 && plugin != "" {
		if variant == "cuda12" {
			need := MustVersion(j.kb.JAX.SM120MinimumPtxas)
			for _, p := range []string{"nvidia-cuda-nvcc-cu12", "nvidia-nvjitlink-cu12"} {
				if v, err := ParseVersion(j.pkg(p)); err == nil && v.Less(need) {
					o.add("jax-cuda12-old-ptxas", map[string]any{"SM": sm12[0].cc.SM(), "Package": p, "Version": v.Raw, "Python": j.python()})
					break
				}
			}
		}
		if flags := j.f.Env["XLA_FLAGS"]; !strings.Contains(flags, "xla_gpu_autotune_level") {
			o.add("jax-blackwell-autotune", map[string]any{"SM": sm12[0].cc.SM(), "Names": names(sm12),
				"Flags": appendFlag(flags, "--xla_gpu_autotune_level=0")})
		}
	}
	if plugin != "" && len(j.gpus) > 0 && j.f.Torch != nil && j.f.Torch.CUDA != "" {
		set := false
		for _, k := range []string{"XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR"} {
			if _, ok := j.f.Env[k]; ok {
				set = true
			}
		}
		if !set {
			o.add("jax-memory-sharing", map[string]any{})
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	detail := fmt.Sprintf("jax %s on %s", x.JAX, orUnknown(x.Backend))
	if plugin != "" {
		detail += fmt.Sprintf(" (%s %s)", plugin, pluginVersion)
	}
	return pass("%s", detail)
}

func firstLineOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return firstLine(s)
}

// ---- process -------------------------------------------------------------

func (j *judge) checkProcess() outcome {
	var o outcome
	var notes []string
	if p := j.f.Python; p != nil && p.StartMethodDefault != "" {
		if p.StartMethodDefault == "fork" {
			o.add("fork-start-method", map[string]any{"Python": j.python(), "Version": p.Version, "Method": p.StartMethodDefault})
		} else {
			notes = append(notes, "multiprocessing default: "+p.StartMethodDefault)
		}
	}
	if g := j.f.GoRuntimes; g != nil && g.Error == "" {
		if len(g.Objects) > 1 {
			var paths []string
			for _, obj := range g.Objects {
				paths = append(paths, obj.Path)
			}
			o.add("go-runtimes-multiple", map[string]any{"PID": g.PID, "Count": len(g.Objects), "Objects": strings.Join(paths, ", ")})
		} else {
			notes = append(notes, fmt.Sprintf("%d Go runtime(s) in process %d", len(g.Objects), g.PID))
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(notes) == 0 {
		return skip("no Python or process facts")
	}
	return pass("%s", strings.Join(notes, "; "))
}

// ---- env -----------------------------------------------------------------

// extraGoclVars are GOCL_ variables read outside the runtime's table (by
// the Python package, the tests, the doctor).
var extraGoclVars = []string{"GOCL_LIBRARY", "GOCL_DOCTOR", "GOCL_MASTER_PORT", "GOCL_TORCH_IMPL"}

func (j *judge) checkEnv() outcome {
	if j.f.Env == nil {
		return skip("no environment facts")
	}
	var o outcome
	env := j.f.Env
	if cvd, ok := env["CUDA_VISIBLE_DEVICES"]; ok && j.nvmlOK() && len(j.f.GPUs) > 0 && !firstVisibleValid(cvd, j.f.GPUs) {
		o.add("cuda-visible-devices-hides-all", map[string]any{"Value": strconv.Quote(cvd), "Count": len(j.f.GPUs)})
	}
	known := map[string]bool{}
	var table []string
	for _, v := range config.Table() {
		known["GOCL_"+v.Name] = true
		table = append(table, "GOCL_"+v.Name)
	}
	for _, n := range extraGoclVars {
		known[n] = true
		table = append(table, n)
	}
	var names []string
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !strings.HasPrefix(k, "GOCL_") || known[k] || strings.HasPrefix(k, "GOCL_TEST_") {
			continue
		}
		// Only likely typos are reported: other GOCL_ names may belong to
		// tools this doctor does not know.
		if s := closest(k, table); s != "" {
			o.add("gocl-env-typo", map[string]any{"Name": k, "Suggestion": s, "Value": env[k]})
		}
	}
	p2pOff := truthy(env["NCCL_P2P_DISABLE"])
	noP2P := j.noP2PAnywhere()
	if truthy(env["NCCL_SHM_DISABLE"]) {
		_, ifname := env["NCCL_SOCKET_IFNAME"]
		o.add("nccl-shm-disabled", map[string]any{"P2POff": p2pOff || noP2P, "NoIfname": !ifname})
	}
	if p2pOff && noP2P {
		if _, gocl := env["GOCL_P2P_DISABLE"]; !gocl {
			o.add("nccl-p2p-disable-noop", map[string]any{"Value": env["NCCL_P2P_DISABLE"], "Why": "NVML reports no P2P between any pair"})
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	var set []string
	for _, k := range names {
		set = append(set, k)
	}
	if len(set) == 0 {
		return pass("no NCCL_/GOCL_/XLA_ variables set")
	}
	return pass("%d variable(s) set: %s", len(set), strings.Join(set, " "))
}

func truthy(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "1" || s == "true" || s == "yes" || s == "on"
}

// noP2PAnywhere: at least two GPUs and NVML reports no P2P on any pair.
func (j *judge) noP2PAnywhere() bool {
	p := j.f.P2P
	if p == nil || len(p.Read) < 2 {
		return false
	}
	for a := range p.Read {
		for b := range p.Read[a] {
			if a != b && p.Read[a][b] == "OK" {
				return false
			}
		}
	}
	return true
}

// firstVisibleValid mirrors CUDA's parsing of CUDA_VISIBLE_DEVICES: the list
// is cut at the first invalid entry, so an invalid first entry hides all.
func firstVisibleValid(cvd string, gpus []GPU) bool {
	first := strings.TrimSpace(strings.Split(cvd, ",")[0])
	if first == "" {
		return false
	}
	if strings.HasPrefix(first, "GPU-") || strings.HasPrefix(first, "MIG-") {
		for _, g := range gpus {
			if g.UUID == "" || strings.HasPrefix(g.UUID, first) || strings.HasPrefix(first, "MIG-") {
				return true
			}
		}
		return false
	}
	n, err := strconv.Atoi(first)
	return err == nil && n >= 0 && n < len(gpus)
}

// closest returns the name in table within edit distance 2 of s, if any.
func closest(s string, table []string) string {
	best, bestD := "", 3
	for _, t := range table {
		if d := editDistance(s, t); d < bestD {
			best, bestD = t, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
