package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Go's own environment calls read the copy taken when the library was
// loaded (env.go says why). Outside env*.go, gocl's code must not use them;
// tests may (they run as ordinary Go programs).
func TestEnvironmentIsReadOnlyThroughConfig(t *testing.T) {
	banned := map[string]map[string]bool{
		"os":      {"Getenv": true, "LookupEnv": true, "Environ": true, "ExpandEnv": true},
		"syscall": {"Getenv": true, "Environ": true},
	}
	root := "../.."
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "build" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if rel, _ := filepath.Rel(root, path); strings.HasPrefix(rel, filepath.Join("runtime", "config", "env")) {
			return nil // the one place
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		names := map[string]string{} // local name -> import path, for banned packages
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if banned[p] == nil {
				continue
			}
			name := p
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && banned[names[x.Name]][sel.Sel.Name] {
				t.Errorf("%s: %s.%s reads Go's copy of the environment, taken when libgocl.so was loaded; use config.LookupEnv / config.Environ (runtime/config/env.go)",
					fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d Go files under %s: the walk is broken", checked, root)
	}
}

// A change made by C's setenv (what Python's os.environ, C programs and
// launch helpers do) is seen, though Go's own copy of the environment
// never learns it.
func TestLiveEnvironment(t *testing.T) {
	const name = "GOCL_TEST_LIVE_ENV"
	t.Cleanup(func() { cUnsetenv(name) })
	cSetenv(name, "from C")
	if v, ok := LookupEnv(name); !ok || v != "from C" {
		t.Fatalf("LookupEnv after C setenv = %q, %v", v, ok)
	}
	found := false
	for _, e := range Environ() {
		found = found || e == name+"=from C"
	}
	if !found {
		t.Fatal("Environ() lacks the variable C set")
	}
	cSetenv("GOCL_TIMEOUT", "2.5")
	t.Cleanup(func() { cUnsetenv("GOCL_TIMEOUT") })
	if got := Timeout(); got != 2500*time.Millisecond {
		t.Fatalf("GOCL_TIMEOUT set by C: Timeout() = %v", got)
	}
	cUnsetenv(name)
	if _, ok := LookupEnv(name); ok {
		t.Fatal("LookupEnv still sees a variable C unset")
	}
}

// Process-wide settings are re-read at every Reload (each communicator init).
func TestReloadRunsHooks(t *testing.T) {
	t.Cleanup(func() { cUnsetenv("GOCL_SPIN_US") })
	var seen []string
	OnReload(func() { seen = append(seen, String("SPIN_US")) })
	cSetenv("GOCL_SPIN_US", "7")
	Reload()
	if len(seen) < 2 || seen[0] != "50" || seen[len(seen)-1] != "7" {
		t.Fatalf("reload saw %q, want 50 then 7", seen)
	}
}
