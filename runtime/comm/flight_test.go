package comm

import (
	"errors"
	"strings"
	"testing"
)

func TestFlightRecorderKeepsTheLastCalls(t *testing.T) {
	f := newFlightRecorder(3)
	for _, what := range []string{"a", "b", "c", "d"} {
		f.end(f.begin(what), nil)
	}
	f.begin("e") // still running when the comm fails
	got := strings.Join(f.report(errors.New("boom")), "\n")
	for _, want := range []string{"last 3 calls before: boom", "c  (took", "d  (took", "e  (in progress)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "  a  ") || strings.Contains(got, "  b  ") {
		t.Errorf("report kept evicted calls:\n%s", got)
	}
	var off *flightRecorder // GOCL_TRACE_BUFFER unset: every method is a no-op
	off.end(off.begin("x"), nil)
	off.dump(0, nil)
}
