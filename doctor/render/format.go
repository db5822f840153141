package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// painter colours text with ANSI escapes when on.
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

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" && s != "linux " {
			out = append(out, s)
		}
	}
	return out
}

// pairs lists m's entries as key+sep+value, sorted by key.
func pairs(m map[string]string, sep string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+sep+m[k])
	}
	return out
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
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
