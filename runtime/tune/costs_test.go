package tune

import (
	"strings"
	"testing"
)

// TestCostsTable: the committed table parses, names each transport and
// protocol once, and bad rows are errors that say what a row holds.
func TestCostsTable(t *testing.T) {
	c, err := ParseCosts(costsTable)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range c {
		k := x.Transport + "/" + x.Proto.String()
		if seen[k] {
			t.Errorf("costs.txt has %s twice", k)
		}
		seen[k] = true
	}
	for _, k := range []string{"inproc/Simple", "socket/Simple", "shm/Simple"} {
		if !seen[k] {
			t.Errorf("costs.txt has no %s row", k)
		}
	}
	for _, bad := range []string{"inproc simple 5", "inproc fast 5 8", "inproc simple x 8", "inproc simple 5 0", "shm ll -1 3"} {
		if _, err := ParseCosts("# header\n" + bad + "\n"); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("ParseCosts(%q): want an error naming line 2, got %v", bad, err)
		}
	}
}
