// Package fakefs builds the fake procfs/sysfs and library trees the doctor's
// tests point a sysfs.System at.
package fakefs

import (
	"os"
	"path/filepath"
	"testing"
)

// Write creates path (and its folders) holding data.
func Write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Symlink creates link (and its folders) pointing at target.
func Symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
