// Package render writes a doctor report as the pasteable text block of
// `gocl doctor`: the facts, one verdict line per check, the findings with
// their fixes, the recommended environment and a verdict. Only the
// gocl-doctor command imports it; libgocl.so judges without rendering.
package render

import (
	"fmt"
	"io"
	"strings"

	"gocl/doctor"
)

// TextOptions shape the human-readable report.
type TextOptions struct {
	Color  bool
	Source string // "judged from FILE" line, when facts were loaded
}

// Text writes r as one pasteable block.
func Text(w io.Writer, r *doctor.Report, o TextOptions) error {
	t := &text{b: &strings.Builder{}, p: painter{o.Color}, r: r, f: &r.Facts, kb: doctor.DefaultKB()}
	t.header(o.Source)
	t.facts()
	t.checks()
	t.findings()
	t.recommendedEnv()
	t.verdict()
	_, err := io.WriteString(w, t.b.String())
	return err
}

// text is one report being written, section by section.
type text struct {
	b  *strings.Builder
	p  painter
	r  *doctor.Report
	f  *doctor.Facts
	kb *doctor.KB
}

func (t *text) header(source string) {
	fmt.Fprintf(t.b, "%s %s · schema %s · knowledge base %s\n", t.p.c(bold, "gocl doctor"), doctor.DoctorVersion, doctor.Schema, t.kb.Version)
	if source != "" {
		fmt.Fprintf(t.b, "judged from %s", source)
		if t.f.Doctor != nil {
			fmt.Fprintf(t.b, " (collected %s by gocl-doctor %s)", t.f.Doctor.CollectedAt, t.f.Doctor.Version)
		}
		t.b.WriteString("\n")
	}
	t.b.WriteString("\n")
}

// row writes a labelled fact; continuation lines are indented under it.
func (t *text) row(label, format string, a ...any) {
	lines := strings.Split(fmt.Sprintf(format, a...), "\n")
	fmt.Fprintf(t.b, "%-10s%s\n", label, lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintf(t.b, "%-10s%s\n", "", l)
	}
}

// missing says why a fact is absent.
func (t *text) missing(fact string) string {
	if why, ok := t.f.Missing[fact]; ok {
		return "missing: " + why
	}
	return "missing"
}
