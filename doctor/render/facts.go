package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gocl/doctor"
	"gocl/doctor/internal/textutil"
)

// facts writes one row per group of facts.
func (t *text) facts() {
	t.system()
	t.python()
	t.driver()
	t.gpus()
	t.links()
	t.torch()
	t.jax()
	t.packages()
	t.env()
	t.kernel()
	t.libraries()
	t.goRuntimes()
	t.missingFacts()
}

// system writes the host: OS, kernel release, CPUs, container.
func (t *text) system() {
	f := t.f
	if s := f.OS; s != nil {
		parts := nonEmpty(s.Name, "linux "+s.Kernel, s.Arch, fmt.Sprintf("%d CPUs", s.CPUs))
		if s.Container != "" {
			parts = append(parts, "container: "+s.Container)
		}
		t.row("System", "%s", strings.Join(parts, " · "))
	}
}

// python writes the interpreter gocl-doctor probed.
func (t *text) python() {
	f := t.f
	if py := f.Python; py != nil {
		parts := nonEmpty(py.Version, py.Executable)
		if py.Venv {
			parts = append(parts, "venv")
		}
		if py.StartMethodDefault != "" {
			parts = append(parts, "multiprocessing: "+py.StartMethodDefault)
		}
		if py.GoclPath != "" {
			lib := py.GoclNativeLib
			if lib == "" {
				lib = "no libgocl.so"
			}
			parts = append(parts, "gocl: "+lib)
		}
		t.row("Python", "%s", strings.Join(parts, " · "))
	} else {
		t.row("Python", "%s", t.missing("python"))
	}
}

// driver writes the NVIDIA driver as NVML reports it.
func (t *text) driver() {
	f := t.f
	if nv := f.NVML; nv != nil && nv.Status == "ok" {
		t.row("Driver", "%s · CUDA %s%s", f.DriverVersion, textutil.OrUnknown(doctor.CUDAVersionFromInt(f.CUDADriverVersion)), prefixed(" · NVML ", nv.Version))
	} else if nv != nil {
		detail := nv.Error
		if why, ok := f.Missing["nvml"]; ok {
			detail = why
		}
		if detail == nv.Status {
			detail = ""
		}
		t.row("Driver", "NVML %s%s", nv.Status, prefixed(": ", detail))
	} else if f.DriverVersion != "" {
		t.row("Driver", "%s · CUDA %s", f.DriverVersion, textutil.OrUnknown(doctor.CUDAVersionFromInt(f.CUDADriverVersion)))
	} else {
		t.row("Driver", "%s", t.missing("nvml"))
	}
}

// gpus writes one line per GPU.
func (t *text) gpus() {
	gpus := doctor.EffectiveGPUs(t.f)
	if len(gpus) == 0 {
		t.row("GPUs", "none")
	} else {
		var lines []string
		for _, g := range gpus {
			parts := []string{fmt.Sprintf("[%d] %s", g.Index, g.Name)}
			if c, err := doctor.ParseCapability(g.ComputeCapability); err == nil {
				parts = append(parts, fmt.Sprintf("%s (%s)", c.SM(), c))
			}
			if g.MemoryBytes > 0 {
				parts = append(parts, fmt.Sprintf("%.1f GiB", float64(g.MemoryBytes)/(1<<30)))
			}
			parts = append(parts, nonEmpty(g.PCIBusID)...)
			if g.NVLinkActive > 0 {
				parts = append(parts, fmt.Sprintf("%d NVLinks", g.NVLinkActive))
			}
			if g.IOMMUGroupType != "" {
				parts = append(parts, "iommu "+g.IOMMUGroupType)
			}
			if g.Source != "" && g.Source != "nvml" {
				parts = append(parts, "from "+g.Source)
			}
			lines = append(lines, strings.Join(parts, " · "))
		}
		t.row("GPUs", "%s", strings.Join(lines, "\n"))
	}
}

// links writes NVML's topology and P2P matrices.
func (t *text) links() {
	f := t.f
	if topo := f.Topology; topo != nil && len(topo.Matrix) > 1 {
		t.row("Topology", "%s", matrix(topo.Matrix))
	}
	if pp := f.P2P; pp != nil && len(pp.Read) > 1 {
		t.row("P2P read", "%s", matrix(shortP2P(pp.Read)))
		if len(pp.Write) > 1 {
			t.row("P2P write", "%s", matrix(shortP2P(pp.Write)))
		}
		t.row("", "(NS not supported, CNS chipset, GNS GPU, TNS topology, RKD disabled by regkey, U unknown)")
	}
}

// torch writes torch's build and devices.
func (t *text) torch() {
	tc := t.f.Torch
	if tc == nil {
		t.probed("torch", "torch", nil)
		return
	}
	if tc.Version == "" {
		t.probed("torch", "torch", []string{"import failed: " + textutil.FirstLineOrEmpty(tc.Error)})
		return
	}
	parts := []string{tc.Version}
	if tc.CUDA != "" {
		parts = append(parts, "CUDA "+tc.CUDA)
	} else {
		parts = append(parts, "CPU build")
	}
	parts = append(parts, nonEmpty(prefixed("NCCL ", tc.NCCLVersion))...)
	if tc.CUDNNVersion > 0 {
		parts = append(parts, fmt.Sprintf("cuDNN %d", tc.CUDNNVersion))
	}
	if tc.CUDAAvailable != nil {
		parts = append(parts, fmt.Sprintf("cuda available: %v", *tc.CUDAAvailable))
	}
	lines := []string{strings.Join(parts, " · ")}
	if len(tc.ArchList) > 0 {
		lines = append(lines, "arch: "+strings.Join(tc.ArchList, " "))
	}
	for _, d := range tc.Devices {
		lines = append(lines, fmt.Sprintf("device [%d] %s (%s)", d.Index, d.Name, d.ComputeCapability))
	}
	t.probed("torch", "torch", withError(lines, tc.Error))
}

// jax writes JAX's build, plugins and devices.
func (t *text) jax() {
	x := t.f.JAX
	if x == nil {
		t.probed("JAX", "jax", nil)
		return
	}
	parts := nonEmpty(x.JAX, prefixed("jaxlib ", x.JAXLib), prefixed("backend ", x.Backend))
	if x.JAX == "" {
		parts = []string{"import failed: " + textutil.FirstLineOrEmpty(x.Error)}
	}
	if plugins := pairs(x.Plugins, " "); len(plugins) > 0 {
		parts = append(parts, "plugins: "+strings.Join(plugins, ", "))
	}
	lines := []string{strings.Join(parts, " · ")}
	for _, d := range x.Devices {
		lines = append(lines, fmt.Sprintf("device [%d] %s", d.ID, strings.Join(nonEmpty(d.Platform, d.Kind, prefixed("compute capability ", d.ComputeCapability)), " · ")))
	}
	if x.JAX != "" {
		lines = withError(lines, x.Error)
	}
	t.probed("JAX", "jax", lines)
}

// probed writes the row of a fact the Python probe gathers: its lines, or
// why it is missing (nil lines).
func (t *text) probed(label, fact string, lines []string) {
	if lines == nil {
		t.row(label, "%s", t.missing(fact))
		return
	}
	t.row(label, "%s", strings.Join(lines, "\n"))
}

// withError adds the last line of a probe's error, if any.
func withError(lines []string, err string) []string {
	if err == "" {
		return lines
	}
	return append(lines, "error: "+textutil.FirstLine(err))
}

// packages writes the installed packages worth naming.
func (t *text) packages() {
	f := t.f
	if len(f.Packages) > 0 {
		t.row("Packages", "%s", wrapList(pairs(f.Packages, " "), 88))
	} else if f.Python != nil {
		t.row("Packages", "none of torch, jax, nvidia-*, numpy, triton installed")
	}
}

// env writes the variables the doctor reports.
func (t *text) env() {
	f := t.f
	if len(f.Env) > 0 {
		t.row("Env", "%s", strings.Join(pairs(f.Env, "="), "\n"))
	} else if f.Env != nil {
		t.row("Env", "no NCCL_/GOCL_/XLA_/CUDA_ variables set")
	}
}

// kernel writes IOMMU, ACS, device nodes, the kernel log.
func (t *text) kernel() {
	f := t.f
	if k := f.Kernel; k != nil {
		parts := []string{"iommu " + textutil.OrUnknown(k.IOMMU)}
		if len(k.CmdlineIOMMU) > 0 {
			parts[0] += " (" + strings.Join(k.CmdlineIOMMU, " ") + ")"
		}
		if k.IOMMUGroups != nil {
			parts = append(parts, fmt.Sprintf("%d iommu groups", *k.IOMMUGroups))
		}
		switch {
		case len(k.ACS) > 0:
			var a []string
			for _, port := range k.ACS {
				a = append(a, fmt.Sprintf("%s→GPU%d [%s]", port.Device, port.GPU, strings.Join(port.Flags, " ")))
			}
			parts = append(parts, "ACS "+strings.Join(a, ", "))
		case k.ACSReadable != nil && !*k.ACSReadable:
			parts = append(parts, "ACS unreadable (needs root)")
		}
		if len(k.DevNodes) > 0 {
			parts = append(parts, strings.Join(k.DevNodes, " "))
		}
		if k.UVMHMMError != nil && *k.UVMHMMError {
			parts = append(parts, "dmesg: nvidia-uvm request_free_mem_region err -34")
		}
		t.row("Kernel", "%s", strings.Join(parts, " · "))
	}
}

// libraries writes where the driver's libraries load from.
func (t *text) libraries() {
	f := t.f
	if len(f.Libraries) > 0 {
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(f.Libraries)) {
			v := f.Libraries[k]
			if v == "" {
				v = "not found"
			}
			ls = append(ls, k+" → "+v)
		}
		t.row("Libraries", "%s", strings.Join(ls, " · "))
	}
}

// goRuntimes writes Go runtimes inside the probed process.
func (t *text) goRuntimes() {
	f := t.f
	if g := f.GoRuntimes; g != nil {
		if g.Error != "" {
			t.row("Go", "process %d: %s", g.PID, g.Error)
		} else {
			var objs []string
			for _, obj := range g.Objects {
				objs = append(objs, fmt.Sprintf("%s (%s)", obj.Path, strings.Join(nonEmpty(obj.GoVersion, obj.BuildMode), ", ")))
			}
			t.row("Go", "%d Go runtime(s) in process %d%s", len(g.Objects), g.PID, prefixed(": ", strings.Join(objs, "; ")))
		}
	}
}

// missingFacts writes what could not be learned, and why (NVML, Python, torch and JAX say so in their own rows).
func (t *text) missingFacts() {
	f := t.f
	var ms []string
	for _, k := range slices.Sorted(maps.Keys(f.Missing)) {
		switch k {
		case "python", "torch", "jax", "nvml": // shown in their own rows
		default:
			ms = append(ms, k+": "+f.Missing[k])
		}
	}
	if len(ms) > 0 {
		t.row("Missing", "%s", strings.Join(ms, "\n"))
	}
}
