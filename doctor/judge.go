package doctor

import (
	"fmt"
	"sort"
	"strings"
)

// hit is one rule firing, with the variables its templates need.
type hit struct {
	rule string
	vars map[string]any
}

// outcome is what one check returns: findings (hits), or a passing or
// skipped verdict with a short detail.
type outcome struct {
	status string // "pass" or "skip" when there are no hits
	detail string
	hits   []hit
}

func pass(format string, a ...any) outcome {
	return outcome{status: "pass", detail: fmt.Sprintf(format, a...)}
}
func skip(format string, a ...any) outcome {
	return outcome{status: "skip", detail: fmt.Sprintf(format, a...)}
}

func (o *outcome) add(rule string, vars map[string]any) { o.hits = append(o.hits, hit{rule, vars}) }

// checks maps each check id of the knowledge base to the Go code that
// evaluates it (check_<id>.go). TestEveryCheckHasCode keeps the two in step.
var checks = map[string]func(*judge) outcome{
	"nvml":            (*judge).checkNVML,
	"libraries":       (*judge).checkLibraries,
	"torch-arch":      (*judge).checkTorchArch,
	"driver":          (*judge).checkDriver,
	"nccl":            (*judge).checkNCCL,
	"p2p":             (*judge).checkP2P,
	"jax":             (*judge).checkJAX,
	"jax-collectives": (*judge).checkJAXCollectives,
	"hf-trainer":      (*judge).checkHF,
	"process":         (*judge).checkProcess,
	"env":             (*judge).checkEnv,
}

// Judge evaluates every check of the knowledge base against the facts.
// It never fails: a rule whose template cannot be filled becomes an
// internal-error finding, so a knowledge-base defect is visible, not fatal.
func Judge(f *Facts, kb *KB) *Report {
	if kb == nil {
		kb = DefaultKB()
	}
	j := newJudge(f, kb)
	r := &Report{Schema: Schema, Facts: *f, Findings: []Finding{}, Checks: []Verdict{}}
	for _, c := range kb.Checks {
		run, ok := checks[c.ID]
		if !ok {
			r.Findings = append(r.Findings, internalFinding(c.ID, fmt.Errorf("no code for check %q", c.ID)))
			continue
		}
		o := run(j)
		v := Verdict{Check: c.ID, Title: c.Title, Status: o.status, Detail: o.detail}
		worst := 0
		var ids []string
		for _, h := range o.hits {
			rule := kb.Rule(h.rule)
			if rule == nil || rule.Check != c.ID {
				r.Findings = append(r.Findings, internalFinding(c.ID, fmt.Errorf("check %s fired unknown rule %q", c.ID, h.rule)))
				worst = max(worst, severities["error"])
				continue
			}
			fd, err := rule.render(h.vars)
			if err != nil {
				fd = internalFinding(c.ID, err)
			}
			r.Findings = append(r.Findings, fd)
			worst = max(worst, severities[fd.Severity])
			ids = append(ids, fd.ID)
		}
		switch {
		case worst >= severities["warning"]:
			v.Status, v.Detail = "fail", strings.Join(ids, ", ")
		case worst == severities["info"]:
			v.Status, v.Detail = "note", strings.Join(ids, ", ")
		}
		r.Checks = append(r.Checks, v)
	}
	sort.SliceStable(r.Findings, func(a, b int) bool {
		return severities[r.Findings[a].Severity] > severities[r.Findings[b].Severity]
	})
	r.RecommendedEnv = recommendEnv(kb, r.Findings, f.Env)
	return r
}

func internalFinding(check string, err error) Finding {
	return Finding{
		ID: "doctor-internal", Severity: "error", Check: check,
		Message: "gocl-doctor could not evaluate a rule: " + err.Error(),
		Fix:     "Report this as a gocl bug with the output of gocl-doctor --json.",
	}
}

// HasErrors reports whether any finding is error-level (the CLI then exits 1).
func (r *Report) HasErrors() bool {
	for _, f := range r.Findings {
		if f.Severity == "error" {
			return true
		}
	}
	return false
}

// recommendEnv merges the env advice of all findings. "append" values are
// added to the user's current value once.
func recommendEnv(kb *KB, findings []Finding, userEnv map[string]string) map[string]EnvAdvice {
	out := map[string]EnvAdvice{}
	for _, fd := range findings {
		rule := kb.Rule(fd.ID)
		if rule == nil {
			continue
		}
		for _, e := range rule.Env {
			adv := out[e.Name]
			if uv, ok := userEnv[e.Name]; ok && adv.UserValue == nil {
				uv := uv
				adv.UserValue = &uv
			}
			adv.Mode = "set"
			switch e.Mode {
			case "append":
				adv.Mode = "append"
				base := adv.Value
				if base == "" && adv.UserValue != nil {
					base = *adv.UserValue
				}
				adv.Value = appendFlag(base, e.Value)
			default:
				adv.Value = e.Value
			}
			adv.Rules = append(adv.Rules, fd.ID)
			out[e.Name] = adv
		}
	}
	return out
}

// appendFlag adds "--name=value" to a flags string, replacing an earlier
// setting of the same flag.
func appendFlag(flags, flag string) string {
	name, _, _ := strings.Cut(flag, "=")
	var kept []string
	for _, f := range strings.Fields(flags) {
		n, _, _ := strings.Cut(f, "=")
		if n != name {
			kept = append(kept, f)
		}
	}
	return strings.Join(append(kept, flag), " ")
}

// judge holds the facts and what is derived from them once.
type judge struct {
	f      *Facts
	kb     *KB
	gpus   []gpuView
	driver *Version
}

type gpuView struct {
	GPU
	cc   Capability
	ccOK bool
}

func newJudge(f *Facts, kb *KB) *judge {
	j := &judge{f: f, kb: kb}
	for _, g := range EffectiveGPUs(f) {
		v := gpuView{GPU: g}
		if c, err := ParseCapability(g.ComputeCapability); err == nil {
			v.cc, v.ccOK = c, true
		}
		j.gpus = append(j.gpus, v)
	}
	if d, err := ParseVersion(f.DriverVersion); err == nil {
		j.driver = &d
	}
	return j
}

// EffectiveGPUs is NVML's list; without NVML, torch's or JAX's devices.
func EffectiveGPUs(f *Facts) []GPU {
	if len(f.GPUs) > 0 {
		return f.GPUs
	}
	var out []GPU
	if f.Torch != nil {
		for _, d := range f.Torch.Devices {
			out = append(out, GPU{Index: d.Index, Name: d.Name, ComputeCapability: d.ComputeCapability, Source: "torch"})
		}
	}
	if len(out) == 0 && f.JAX != nil {
		for _, d := range f.JAX.Devices {
			if d.Platform == "gpu" || d.Platform == "cuda" {
				out = append(out, GPU{Index: d.ID, Name: d.Kind, ComputeCapability: d.ComputeCapability, Source: "jax"})
			}
		}
	}
	return out
}

func (j *judge) nvmlOK() bool { return j.f.NVML != nil && j.f.NVML.Status == "ok" }

func (j *judge) python() string {
	if j.f.Python != nil && j.f.Python.Executable != "" {
		return j.f.Python.Executable
	}
	return "python"
}

func (j *judge) pkg(name string) string {
	if j.f.Packages == nil {
		return ""
	}
	return j.f.Packages[name]
}

// sm12 returns the GPUs of compute capability 12.x (consumer and
// workstation Blackwell: RTX 50xx, RTX PRO 6000, GB10 is 12.1).
func (j *judge) sm12() []gpuView {
	var out []gpuView
	for _, g := range j.gpus {
		if g.ccOK && g.cc.Major == 12 {
			out = append(out, g)
		}
	}
	return out
}

func (j *judge) driverCUDA() string { return CUDAVersionFromInt(j.f.CUDADriverVersion) }

func (j *judge) torchLabel() string {
	t := j.f.Torch
	if t.CUDA != "" {
		return fmt.Sprintf("torch %s (CUDA %s)", t.Version, t.CUDA)
	}
	return "torch " + t.Version
}

func indices(gs []gpuView) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = fmt.Sprint(g.Index)
	}
	return strings.Join(s, ",")
}

func names(gs []gpuView) string {
	seen := map[string]bool{}
	var s []string
	for _, g := range gs {
		if !seen[g.Name] {
			seen[g.Name] = true
			s = append(s, g.Name)
		}
	}
	return strings.Join(s, ", ")
}

// models is groupByModel over the GPUs whose compute capability is known.
func (j *judge) models() [][]gpuView {
	var out [][]gpuView
	for _, group := range groupByModel(j.gpus) {
		if group[0].ccOK {
			out = append(out, group)
		}
	}
	return out
}

// groupByModel groups GPUs by name and capability so a pair of identical
// cards gives one finding.
func groupByModel(gs []gpuView) [][]gpuView {
	var keys []string
	groups := map[string][]gpuView{}
	for _, g := range gs {
		k := g.Name + "|" + g.ComputeCapability
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], g)
	}
	out := make([][]gpuView, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
