package doctor

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/template"
)

//go:embed kb.json
var kbJSON []byte

// KB is the knowledge base: rules and the tables the checks consult.
type KB struct {
	Version           string       `json:"kb_version"`
	DriverMinimum     versionTable `json:"driver_minimum_linux"`
	DriverMinorCompat versionTable `json:"driver_minor_compat_floor_linux"`
	ArchMinimumDriver versionTable `json:"arch_minimum_driver_linux"`
	NCCL              struct {
		SM120Minimum     string `json:"sm120_minimum"`
		SM120Recommended string `json:"sm120_recommended"`
	} `json:"nccl"`
	JAX struct {
		PluginMinimumDriver map[string]string `json:"plugin_minimum_driver_linux"`
		SM120MinimumPtxas   string            `json:"sm120_minimum_ptxas"`
	} `json:"jax"`
	// JAXCollectives: the values of JAX_CPU_COLLECTIVES_IMPLEMENTATION jax
	// accepts, and the one it takes when the variable is unset.
	JAXCollectives jaxCollectives `json:"jax_cpu_collectives"`
	TorchIndexURL  string         `json:"torch_index_url"`
	TorchWheels    struct {
		Wheels []TorchWheel `json:"wheels"`
	} `json:"torch_wheels"`
	Checks []CheckInfo `json:"checks"`
	Rules  []*Rule     `json:"rules"`

	byID map[string]*Rule
}

type jaxCollectives struct {
	Known   []string `json:"known"`
	Default string   `json:"default"`
}

// known reports whether jax accepts v ("" is unset: the default).
func (c jaxCollectives) known(v string) bool { return v == "" || slices.Contains(c.Known, v) }

type versionTable struct {
	Versions map[string]string `json:"versions"`
}

// TorchWheel is one known torch build on download.pytorch.org.
type TorchWheel struct {
	Torch      string            `json:"torch"`
	Tag        string            `json:"tag"`  // "cu128"
	CUDA       string            `json:"cuda"` // "12.8"
	NCCL       string            `json:"nccl"`
	Python     []string          `json:"python"` // [min, max] "3.10", "3.14"
	ArchList   []string          `json:"arch_list"`
	Companions map[string]string `json:"companions"`
}

// CheckInfo names a check and its one-line title.
type CheckInfo struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// Rule is one verdict the knowledge base can give.
type Rule struct {
	ID          string    `json:"id"`
	Check       string    `json:"check"`
	Severity    string    `json:"severity"`
	Message     string    `json:"message"`
	Fix         string    `json:"fix"`
	Explanation string    `json:"explanation"`
	Env         []EnvRule `json:"env"`
	Refs        []string  `json:"refs"`

	message, fix, explanation *template.Template
}

// EnvRule is an environment variable a rule recommends. Mode "append" adds
// the value to the variable's current content (XLA_FLAGS); the default
// replaces it. Startup marks a safe transport setting that libgocl applies
// itself when it starts and the variable is unset (doctor/defaults).
type EnvRule struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Mode    string `json:"mode"`
	Startup bool   `json:"startup"`
}

var severities = map[string]int{"error": 3, "warning": 2, "info": 1}

// LoadKB parses a knowledge base and compiles its templates.
func LoadKB(data []byte) (*KB, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var kb KB
	if err := dec.Decode(&kb); err != nil {
		return nil, fmt.Errorf("knowledge base: %w", err)
	}
	kb.byID = map[string]*Rule{}
	checks := map[string]bool{}
	for _, c := range kb.Checks {
		checks[c.ID] = true
	}
	for _, r := range kb.Rules {
		if r.ID == "" || kb.byID[r.ID] != nil {
			return nil, fmt.Errorf("knowledge base: rule id %q is empty or repeated", r.ID)
		}
		if severities[r.Severity] == 0 {
			return nil, fmt.Errorf("knowledge base: rule %s: severity %q is not error, warning or info", r.ID, r.Severity)
		}
		if !checks[r.Check] {
			return nil, fmt.Errorf("knowledge base: rule %s: unknown check %q", r.ID, r.Check)
		}
		for _, e := range r.Env {
			if e.Mode != "" && e.Mode != "append" && e.Mode != "set" {
				return nil, fmt.Errorf("knowledge base: rule %s: env %s: mode %q", r.ID, e.Name, e.Mode)
			}
			// libgocl sets startup variables in its process for the other
			// libraries there; its own GOCL_ settings are never changed.
			if e.Startup && (e.Mode == "append" || strings.HasPrefix(e.Name, "GOCL_")) {
				return nil, fmt.Errorf("knowledge base: rule %s: env %s: a startup setting must be a plain set of a non-GOCL_ variable", r.ID, e.Name)
			}
		}
		var err error
		if r.message, err = parseTemplate(r.ID+".message", r.Message); err != nil {
			return nil, err
		}
		if r.fix, err = parseTemplate(r.ID+".fix", r.Fix); err != nil {
			return nil, err
		}
		if r.explanation, err = parseTemplate(r.ID+".explanation", r.Explanation); err != nil {
			return nil, err
		}
		kb.byID[r.ID] = r
	}
	for _, t := range []versionTable{kb.DriverMinimum, kb.DriverMinorCompat, kb.ArchMinimumDriver} {
		for k, v := range t.Versions {
			if _, err := ParseVersion(v); err != nil {
				return nil, fmt.Errorf("knowledge base: %s: %w", k, err)
			}
		}
	}
	if !slices.Contains(kb.JAXCollectives.Known, kb.JAXCollectives.Default) {
		return nil, fmt.Errorf("knowledge base: jax_cpu_collectives: default %q is not among %v", kb.JAXCollectives.Default, kb.JAXCollectives.Known)
	}
	for _, w := range kb.TorchWheels.Wheels {
		for _, a := range w.ArchList {
			if _, err := ParseArch(a); err != nil {
				return nil, fmt.Errorf("knowledge base: torch %s+%s: %w", w.Torch, w.Tag, err)
			}
		}
		if len(w.Python) != 2 {
			return nil, fmt.Errorf("knowledge base: torch %s+%s: python range must be [min, max]", w.Torch, w.Tag)
		}
	}
	return &kb, nil
}

func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("knowledge base: %w", err)
	}
	return t, nil
}

var defaultKB *KB

// DefaultKB is the embedded knowledge base.
func DefaultKB() *KB {
	if defaultKB == nil {
		kb, err := LoadKB(kbJSON)
		if err != nil {
			panic(err) // the embedded file is tested; this is a build defect
		}
		defaultKB = kb
	}
	return defaultKB
}

// Rule returns the rule with this id, or nil.
func (kb *KB) Rule(id string) *Rule { return kb.byID[id] }

// CheckTitle returns a check's title.
func (kb *KB) CheckTitle(id string) string {
	for _, c := range kb.Checks {
		if c.ID == id {
			return c.Title
		}
	}
	return id
}

// render fills a rule's templates with a check's variables.
func (r *Rule) render(vars map[string]any) (Finding, error) {
	f := Finding{ID: r.ID, Severity: r.Severity, Check: r.Check, Refs: r.Refs}
	for _, p := range []struct {
		t   *template.Template
		out *string
	}{{r.message, &f.Message}, {r.fix, &f.Fix}, {r.explanation, &f.Explanation}} {
		var b strings.Builder
		if err := p.t.Execute(&b, vars); err != nil {
			return f, fmt.Errorf("rule %s: %w", r.ID, err)
		}
		*p.out = strings.TrimSpace(b.String())
	}
	if len(r.Env) > 0 {
		f.Env = map[string]string{}
		for _, e := range r.Env {
			f.Env[e.Name] = e.Value
		}
	}
	return f, nil
}

// minimum looks a version up in a table keyed by "X.Y" (CUDA or compute
// capability); ok is false when the key is not listed.
func (t versionTable) minimum(key string) (Version, bool) {
	s, ok := t.Versions[key]
	if !ok {
		return Version{}, false
	}
	return MustVersion(s), true
}

// keys lists a table's keys in version order.
func (t versionTable) keys() []string {
	ks := make([]string, 0, len(t.Versions))
	for k := range t.Versions {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return MustVersion(ks[i]).Less(MustVersion(ks[j])) })
	return ks
}

// driverMinimumFor returns the minimum Linux driver for CUDA "X.Y". A CUDA
// version missing from the table (13.1, say) takes the nearest lower entry
// of the same major: a newer minor never needs less.
func (kb *KB) driverMinimumFor(cuda string) (Version, string, bool) {
	want, err := ParseVersion(cuda)
	if err != nil {
		return Version{}, "", false
	}
	best := ""
	for _, k := range kb.DriverMinimum.keys() {
		kv := MustVersion(k)
		if kv.Major() == want.Major() && !want.Less(kv) {
			best = k
		}
	}
	if best == "" {
		return Version{}, "", false
	}
	v, _ := kb.DriverMinimum.minimum(best)
	return v, best, true
}

// SetAtStartup reports whether one of rules sets variable name at libgocl's
// startup (doctor/defaults).
func (kb *KB) SetAtStartup(name string, rules []string) bool {
	for _, id := range rules {
		if r := kb.Rule(id); r != nil {
			for _, e := range r.Env {
				if e.Name == name && e.Startup {
					return true
				}
			}
		}
	}
	return false
}
