// Package version is gocl's one version number. It comes from the VERSION
// file next to this one, which is also the Python package's version source
// (pyproject.toml, tool.hatch.version): goclGetVersion, `gocl version`,
// gocl.__version__ and the wheel's metadata all report it.
package version

import (
	_ "embed"
	"regexp"
	"strconv"
	"strings"
)

//go:embed VERSION
var file string

// String is the release, as written in VERSION: MAJOR.MINOR.PATCH, optionally
// followed by a PEP 440 pre-release (a1, b2, rc1).
var String = strings.TrimSpace(file)

// Code is NCCL's integer form of String, MAJOR*10000 + MINOR*100 + PATCH
// (what goclGetVersion reports and gocl.h's GOCL_VERSION_CODE spells).
var Code = code(String)

// Pattern is the form VERSION must have.
var Pattern = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)((a|b|rc)\d+)?$`)

// code is -1 for a malformed version; TestVersionFile keeps VERSION well formed,
// so a release never carries that.
func code(s string) int {
	m := Pattern.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n := 0
	for i, part := range m[1:4] {
		v, err := strconv.Atoi(part)
		if err != nil || i > 0 && v > 99 { // MINOR and PATCH get two digits each
			return -1
		}
		n = n*100 + v
	}
	return n
}
