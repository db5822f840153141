package telemetry

import (
	"errors"
	"strings"
	"testing"

	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

func TestFlightRecorderKeepsTheLastCalls(t *testing.T) {
	f := &Flight{ring: make([]Entry, 3), transports: "shm"}
	for seq := range 4 {
		f.End(f.Begin(Entry{Hdr: wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Seq: uint64(seq), Count: 5},
			Choice: tune.Choice{Algo: tune.Ring}}), nil)
	}
	f.Begin(Entry{Hdr: wire.Header{Kind: wire.KindColl, Coll: wire.Broadcast, Seq: 4}}) // running when the comm fails
	got := strings.Join(f.report(errors.New("boom")), "\n")
	for _, want := range []string{"last 3 calls before: boom", "allreduce #2 (count 5", "allreduce #3", "via ring/", "over shm",
		"broadcast #4 (count 0, int8, root 0) via ring/Simple over shm  (in progress)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "#0") || strings.Contains(got, "#1 ") {
		t.Errorf("report kept evicted calls:\n%s", got)
	}
	var off *Flight // tracing off: every method is a no-op
	off.End(off.Begin(Entry{}), nil)
	off.Dump(nil)
}
