package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A tag is the coloured word in front of a verdict or a finding; the ""
// entry serves every other value.
type tag struct{ color, word string }

var (
	statusTags   = map[string]tag{"fail": {red, "FAIL"}, "note": {cyan, "note"}, "pass": {green, "ok  "}, "": {dim, "skip"}}
	severityTags = map[string]tag{"error": {red, "ERROR"}, "warning": {yellow, "WARN "}, "": {cyan, "INFO "}}
)

func (t *text) tag(tags map[string]tag, value string) string {
	g, ok := tags[value]
	if !ok {
		g = tags[""]
	}
	return t.p.c(g.color, g.word)
}

// checks writes one verdict line per check of the knowledge base.
func (t *text) checks() {
	t.b.WriteString("\nChecks\n")
	for _, v := range t.r.Checks {
		fmt.Fprintf(t.b, "  %s  %-11s %s%s\n", t.tag(statusTags, v.Status), v.Check, v.Title, prefixed(": ", v.Detail))
	}
}

// findings writes each finding with its fix.
func (t *text) findings() {
	if len(t.r.Findings) == 0 {
		return
	}
	t.b.WriteString("\nFindings\n")
	for _, fd := range t.r.Findings {
		fmt.Fprintf(t.b, "  %s %s: %s\n", t.tag(severityTags, fd.Severity), t.p.c(bold, fd.ID), fd.Message)
		for i, l := range strings.Split(fd.Fix, "\n") {
			lead := "        fix: "
			if i > 0 {
				lead = "             "
			}
			fmt.Fprintf(t.b, "%s%s\n", lead, l)
		}
	}
}

// recommendedEnv writes the export lines the findings call for.
func (t *text) recommendedEnv() {
	if len(t.r.RecommendedEnv) == 0 {
		return
	}
	t.b.WriteString("\nRecommended environment (gocl.env.recommended() returns it)\n")
	for _, k := range slices.Sorted(maps.Keys(t.r.RecommendedEnv)) {
		a := t.r.RecommendedEnv[k]
		note := strings.Join(a.Rules, ", ")
		if a.UserValue != nil && *a.UserValue != a.Value {
			note += fmt.Sprintf("; now %s=%s", k, shellQuote(*a.UserValue))
		} else if t.kb.SetAtStartup(k, a.Rules) {
			note += "; gocl sets it in its own processes when unset"
		}
		fmt.Fprintf(t.b, "  export %s=%s   # %s\n", k, shellQuote(a.Value), note)
	}
}

// verdict counts the findings by severity.
func (t *text) verdict() {
	errs, warns, infos := 0, 0, 0
	for _, fd := range t.r.Findings {
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
		verdict = t.p.c(red, "Verdict: "+verdict+" — fix the errors above")
	case warns > 0:
		verdict = t.p.c(yellow, "Verdict: "+verdict)
	default:
		verdict = t.p.c(green, "Verdict: "+verdict+" — no problem found")
	}
	fmt.Fprintf(t.b, "\n%s\n", verdict)
}
