package config

import (
	"strings"
	"testing"
)

// FuzzSettings: any value of any setting either fails Check with a sentence
// naming the variable, or passes it and every accessor then returns a usable
// value (never a panic, a negative or overflowed timeout, an out-of-range
// count).
func FuzzSettings(f *testing.F) {
	for _, v := range table {
		f.Add(v.Name, v.Default)
	}
	for _, s := range []string{"", " 7 ", "-1", "0x10", "1e3", "NaN", "inf", "1e300", "9223372036854775808", "^ring;allreduce:tree", "yes"} {
		f.Add("TIMEOUT", s)
		f.Add("BUFFSIZE", s)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		var v *Var
		for i := range table {
			if table[i].Name == name {
				v = &table[i]
			}
		}
		if v == nil || strings.ContainsAny(value, "\x00") {
			return
		}
		t.Setenv("GOCL_"+name, value)
		if got, src := Source(name); got != value || src != "GOCL_"+name {
			t.Fatalf("GOCL_%s=%q reads back as %q from %s", name, value, got, src)
		}
		String(name)
		Bool(name)
		if err := Check(); err != nil {
			if !strings.Contains(err.Error(), "GOCL_"+name) {
				t.Fatalf("GOCL_%s=%q: the error does not name the variable: %v", name, value, err)
			}
			return
		}
		if d := Timeout(); d < 0 {
			t.Fatalf("GOCL_%s=%q: Timeout() = %v", name, value, d)
		} else if sec, _ := parseSeconds(value); name == "TIMEOUT" && strings.TrimSpace(value) != "" && (sec > 0) != (d > 0) {
			t.Fatalf("GOCL_TIMEOUT=%q passed Check but Timeout() = %v", value, d)
		}
		for _, n := range []string{"SOCKET_NTHREADS", "NSOCKS_PERTHREAD", "BUFFSIZE", "DIRECT_THRESHOLD"} {
			if k, err := Int(n); err != nil || k < 0 {
				t.Fatalf("GOCL_%s=%q passed Check but Int(%s) = %d, %v", name, value, n, k, err)
			}
		}
	})
}
