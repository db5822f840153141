// Package telemetrytest reads back what the recorders wrote, for tests.
package telemetrytest

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// ReadLines decodes each line of the JSON-lines file at path (a metrics or
// trace file) into a T, failing the test on a line that does not decode.
func ReadLines[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20) // a trace line holds a whole call
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Text())
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}
