// Package textutil holds the few string helpers that both the doctor's
// judgement (finding messages) and its text report use, so the two say a
// fact the same way.
package textutil

import "strings"

// FirstLine is the line of a probe's error worth showing: Python tracebacks
// end with the exception, so the last line, cut at 400 bytes.
func FirstLine(s string) string {
	s = strings.TrimSpace(s)
	lines := strings.Split(s, "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 400 {
		last = last[:400] + "..."
	}
	return last
}

// FirstLineOrEmpty is FirstLine, or "" for "".
func FirstLineOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return FirstLine(s)
}

// OrUnknown is s, or "unknown" for "".
func OrUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
