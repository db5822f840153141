package version

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// VERSION must parse: a malformed one would make goclGetVersion report -1.
func TestVersionFile(t *testing.T) {
	if !Pattern.MatchString(String) {
		t.Fatalf("VERSION is %q; want MAJOR.MINOR.PATCH with an optional a/b/rc N suffix (PEP 440)", String)
	}
	if Code < 0 {
		t.Fatalf("VERSION %q has a MINOR or PATCH above 99, which goclGetVersion's code cannot carry", String)
	}
}

func TestCode(t *testing.T) {
	for s, want := range map[string]int{
		"0.1.0": 100, "2.19.3": 21903, "1.0.0rc2": 10000, "0.1": -1, "1.100.0": -1, "1.2.3.4": -1, "v1.2.3": -1,
	} {
		if got := code(s); got != want {
			t.Errorf("code(%q) = %d, want %d", s, got, want)
		}
	}
}

// gocl.h spells the version as macros for C programs (GOCL_VERSION_CODE,
// goclConfig_t.version); they must say what VERSION says.
func TestHeaderAgrees(t *testing.T) {
	h, err := os.ReadFile("../../capi/gocl.h")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, name := range []string{"MAJOR", "MINOR", "PATCH"} {
		m := regexp.MustCompile(`(?m)^#define GOCL_` + name + ` (\d+)$`).FindSubmatch(h)
		if m == nil {
			t.Fatalf("capi/gocl.h has no #define GOCL_%s", name)
		}
		v, _ := strconv.Atoi(string(m[1]))
		got = got*100 + v
	}
	if got != Code {
		t.Fatalf("capi/gocl.h says version code %d, runtime/version/VERSION says %s (%d): update GOCL_MAJOR/MINOR/PATCH", got, String, Code)
	}
}
