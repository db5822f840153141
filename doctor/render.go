package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteJSON writes the report as indented JSON (the documented schema).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// TextOptions shape the human-readable report.
type TextOptions struct {
	Color  bool
	Source string // "judged from FILE" line, when facts were loaded
}

type painter struct{ on bool }

func (p painter) c(code, s string) string {
	if !p.on {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

const (
	red    = "1;31"
	yellow = "1;33"
	cyan   = "36"
	green  = "32"
	dim    = "2"
	bold   = "1"
)

// WriteText writes one pasteable block: the facts, one verdict line per
// check, the findings with their fixes, and the recommended environment.
func (r *Report) WriteText(w io.Writer, o TextOptions) {
	p := painter{o.Color}
	f := &r.Facts
	b := &strings.Builder{}
	kb := DefaultKB()
	fmt.Fprintf(b, "%s %s · schema %s · knowledge base %s\n", p.c(bold, "gocl doctor"), DoctorVersion, Schema, kb.Version)
	if o.Source != "" {
		fmt.Fprintf(b, "judged from %s", o.Source)
		if f.Doctor != nil {
			fmt.Fprintf(b, " (collected %s by gocl-doctor %s)", f.Doctor.CollectedAt, f.Doctor.Version)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	row := func(label, format string, a ...any) {
		text := fmt.Sprintf(format, a...)
		lines := strings.Split(text, "\n")
		fmt.Fprintf(b, "%-10s%s\n", label, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(b, "%-10s%s\n", "", l)
		}
	}
	missing := func(fact string) string {
		if why, ok := f.Missing[fact]; ok {
			return "missing: " + why
		}
		return "missing"
	}

	if s := f.OS; s != nil {
		parts := nonEmpty(s.Name, "linux "+s.Kernel, s.Arch, fmt.Sprintf("%d CPUs", s.CPUs))
		if s.Container != "" {
			parts = append(parts, "container: "+s.Container)
		}
		row("System", "%s", strings.Join(parts, " · "))
	}
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
		row("Python", "%s", strings.Join(parts, " · "))
	} else {
		row("Python", "%s", missing("python"))
	}
	if nv := f.NVML; nv != nil && nv.Status == "ok" {
		row("Driver", "%s · CUDA %s%s", f.DriverVersion, orUnknown(CUDAVersionFromInt(f.CUDADriverVersion)), prefixed(" · NVML ", nv.Version))
	} else if nv != nil {
		detail := nv.Error
		if why, ok := f.Missing["nvml"]; ok {
			detail = why
		}
		if detail == nv.Status {
			detail = ""
		}
		row("Driver", "NVML %s%s", nv.Status, prefixed(": ", detail))
	} else if f.DriverVersion != "" {
		row("Driver", "%s · CUDA %s", f.DriverVersion, orUnknown(CUDAVersionFromInt(f.CUDADriverVersion)))
	} else {
		row("Driver", "%s", missing("nvml"))
	}
	gpus := effectiveGPUs(f)
	if len(gpus) == 0 {
		row("GPUs", "none")
	} else {
		var lines []string
		for _, g := range gpus {
			parts := []string{fmt.Sprintf("[%d] %s", g.Index, g.Name)}
			if c, err := ParseCapability(g.ComputeCapability); err == nil {
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
		row("GPUs", "%s", strings.Join(lines, "\n"))
	}
	if t := f.Topology; t != nil && len(t.Matrix) > 1 {
		row("Topology", "%s", matrix(t.Matrix))
	}
	if pp := f.P2P; pp != nil && len(pp.Read) > 1 {
		row("P2P read", "%s", matrix(shortP2P(pp.Read)))
		if len(pp.Write) > 1 {
			row("P2P write", "%s", matrix(shortP2P(pp.Write)))
		}
		row("", "(NS not supported, CNS chipset, GNS GPU, TNS topology, RKD disabled by regkey, U unknown)")
	}
	if t := f.Torch; t != nil {
		if t.Version == "" {
			row("torch", "import failed: %s", firstLineOrEmpty(t.Error))
		} else {
			parts := []string{t.Version}
			if t.CUDA != "" {
				parts = append(parts, "CUDA "+t.CUDA)
			} else {
				parts = append(parts, "CPU build")
			}
			parts = append(parts, nonEmpty(prefixed("NCCL ", t.NCCLVersion))...)
			if t.CUDNNVersion > 0 {
				parts = append(parts, fmt.Sprintf("cuDNN %d", t.CUDNNVersion))
			}
			if t.CUDAAvailable != nil {
				parts = append(parts, fmt.Sprintf("cuda available: %v", *t.CUDAAvailable))
			}
			lines := []string{strings.Join(parts, " · ")}
			if len(t.ArchList) > 0 {
				lines = append(lines, "arch: "+strings.Join(t.ArchList, " "))
			}
			for _, d := range t.Devices {
				lines = append(lines, fmt.Sprintf("device [%d] %s (%s)", d.Index, d.Name, d.ComputeCapability))
			}
			if t.Error != "" {
				lines = append(lines, "error: "+firstLine(t.Error))
			}
			row("torch", "%s", strings.Join(lines, "\n"))
		}
	} else {
		row("torch", "%s", missing("torch"))
	}
	if x := f.JAX; x != nil {
		parts := nonEmpty(x.JAX, prefixed("jaxlib ", x.JAXLib), prefixed("backend ", x.Backend))
		if x.JAX == "" {
			parts = []string{"import failed: " + firstLineOrEmpty(x.Error)}
		}
		var plugins []string
		for _, k := range sortedKeys(x.Plugins) {
			plugins = append(plugins, k+" "+x.Plugins[k])
		}
		if len(plugins) > 0 {
			parts = append(parts, "plugins: "+strings.Join(plugins, ", "))
		}
		lines := []string{strings.Join(parts, " · ")}
		for _, d := range x.Devices {
			lines = append(lines, fmt.Sprintf("device [%d] %s", d.ID, strings.Join(nonEmpty(d.Platform, d.Kind, prefixed("compute capability ", d.ComputeCapability)), " · ")))
		}
		if x.JAX != "" && x.Error != "" {
			lines = append(lines, "error: "+firstLine(x.Error))
		}
		row("JAX", "%s", strings.Join(lines, "\n"))
	} else {
		row("JAX", "%s", missing("jax"))
	}
	if len(f.Packages) > 0 {
		var ps []string
		for _, k := range sortedKeys(f.Packages) {
			ps = append(ps, k+" "+f.Packages[k])
		}
		row("Packages", "%s", wrapList(ps, 88))
	} else if f.Python != nil {
		row("Packages", "none of torch, jax, nvidia-*, numpy, triton installed")
	}
	if len(f.Env) > 0 {
		var es []string
		for _, k := range sortedKeys(f.Env) {
			es = append(es, k+"="+f.Env[k])
		}
		row("Env", "%s", strings.Join(es, "\n"))
	} else if f.Env != nil {
		row("Env", "no NCCL_/GOCL_/XLA_/CUDA_ variables set")
	}
	if k := f.Kernel; k != nil {
		parts := []string{"iommu " + orUnknown(k.IOMMU)}
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
		row("Kernel", "%s", strings.Join(parts, " · "))
	}
	if len(f.Libraries) > 0 {
		var ls []string
		for _, k := range sortedKeys(f.Libraries) {
			v := f.Libraries[k]
			if v == "" {
				v = "not found"
			}
			ls = append(ls, k+" → "+v)
		}
		row("Libraries", "%s", strings.Join(ls, " · "))
	}
	if g := f.GoRuntimes; g != nil {
		if g.Error != "" {
			row("Go", "process %d: %s", g.PID, g.Error)
		} else {
			var objs []string
			for _, obj := range g.Objects {
				objs = append(objs, fmt.Sprintf("%s (%s)", obj.Path, strings.Join(nonEmpty(obj.GoVersion, obj.BuildMode), ", ")))
			}
			row("Go", "%d Go runtime(s) in process %d%s", len(g.Objects), g.PID, prefixed(": ", strings.Join(objs, "; ")))
		}
	}
	var ms []string
	for _, k := range sortedKeys(f.Missing) {
		switch k {
		case "python", "torch", "jax", "nvml": // shown in their own rows
		default:
			ms = append(ms, k+": "+f.Missing[k])
		}
	}
	if len(ms) > 0 {
		row("Missing", "%s", strings.Join(ms, "\n"))
	}

	b.WriteString("\nChecks\n")
	for _, v := range r.Checks {
		var tag string
		switch v.Status {
		case "fail":
			tag = p.c(red, "FAIL")
		case "note":
			tag = p.c(cyan, "note")
		case "pass":
			tag = p.c(green, "ok  ")
		default:
			tag = p.c(dim, "skip")
		}
		fmt.Fprintf(b, "  %s  %-11s %s%s\n", tag, v.Check, v.Title, prefixed(": ", v.Detail))
	}

	if len(r.Findings) > 0 {
		b.WriteString("\nFindings\n")
		for _, fd := range r.Findings {
			var tag string
			switch fd.Severity {
			case "error":
				tag = p.c(red, "ERROR")
			case "warning":
				tag = p.c(yellow, "WARN ")
			default:
				tag = p.c(cyan, "INFO ")
			}
			fmt.Fprintf(b, "  %s %s: %s\n", tag, p.c(bold, fd.ID), fd.Message)
			for i, l := range strings.Split(fd.Fix, "\n") {
				lead := "        fix: "
				if i > 0 {
					lead = "             "
				}
				fmt.Fprintf(b, "%s%s\n", lead, l)
			}
		}
	}
	if len(r.RecommendedEnv) > 0 {
		b.WriteString("\nRecommended environment (gocl.env.recommended() returns it)\n")
		for _, k := range sortedKeys(r.RecommendedEnv) {
			a := r.RecommendedEnv[k]
			note := strings.Join(a.Rules, ", ")
			if a.UserValue != nil && *a.UserValue != a.Value {
				note += fmt.Sprintf("; now %s=%s", k, shellQuote(*a.UserValue))
			} else if kb.startup(k, a.Rules) {
				note += "; gocl sets it in its own processes when unset"
			}
			fmt.Fprintf(b, "  export %s=%s   # %s\n", k, shellQuote(a.Value), note)
		}
	}
	errs, warns, infos := 0, 0, 0
	for _, fd := range r.Findings {
		switch fd.Severity {
		case "error":
			errs++
		case "warning":
			warns++
		default:
			infos++
		}
	}
	verdict := fmt.Sprintf("%d error(s), %d warning(s), %d note(s)", errs, warns, infos)
	switch {
	case errs > 0:
		verdict = p.c(red, "Verdict: "+verdict+" — fix the errors above")
	case warns > 0:
		verdict = p.c(yellow, "Verdict: "+verdict)
	default:
		verdict = p.c(green, "Verdict: "+verdict+" — no problem found")
	}
	fmt.Fprintf(b, "\n%s\n", verdict)
	io.WriteString(w, b.String())
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" && s != "linux " {
			out = append(out, s)
		}
	}
	return out
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// matrix prints an nvidia-smi-style GPU matrix.
func matrix(m [][]string) string {
	width := 5
	for _, r := range m {
		for _, c := range r {
			width = max(width, len(c)+1)
		}
	}
	var lines []string
	head := fmt.Sprintf("%-6s", "")
	for i := range m {
		head += fmt.Sprintf("%-*s", width, fmt.Sprintf("GPU%d", i))
	}
	lines = append(lines, strings.TrimRight(head, " "))
	for i, r := range m {
		line := fmt.Sprintf("%-6s", fmt.Sprintf("GPU%d", i))
		for _, c := range r {
			line += fmt.Sprintf("%-*s", width, c)
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return strings.Join(lines, "\n")
}

var p2pShort = map[string]string{
	"CHIPSET_NOT_SUPPORTED": "CNS", "GPU_NOT_SUPPORTED": "GNS", "IOH_TOPOLOGY_NOT_SUPPORTED": "TNS",
	"DISABLED_BY_REGKEY": "RKD", "NOT_SUPPORTED": "NS", "UNKNOWN": "U",
}

// shortP2P abbreviates as nvidia-smi topo -p2p does (legend printed by the
// JSON field names).
func shortP2P(m [][]string) [][]string {
	out := make([][]string, len(m))
	for i, r := range m {
		out[i] = make([]string, len(r))
		for j, c := range r {
			if s, ok := p2pShort[c]; ok {
				c = s
			}
			out[i][j] = c
		}
	}
	return out
}

func wrapList(items []string, width int) string {
	var lines []string
	cur := ""
	for _, it := range items {
		if cur != "" && len(cur)+3+len(it) > width {
			lines = append(lines, cur)
			cur = ""
		}
		if cur != "" {
			cur += " · "
		}
		cur += it
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return strings.Join(lines, "\n")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./,:", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
