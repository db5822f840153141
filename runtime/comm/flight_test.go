package comm

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gocl/runtime/config/configtest"
	"gocl/runtime/telemetry/telemetrytest"
)

// With GOCL_TRACE_FILE set, a failure writes each rank's calls as JSON
// lines (the failing call still "started"), and DumpTrace writes them on request.
// traceLine is what a test reads back of a trace file's line (the fields
// python/gocl/trace.py reads).
type traceLine struct {
	Comm, Op, Dtype, RedOp, Algorithm, Transport, State string
	Rank, NRanks                                        int
	Seq, Count                                          uint64
	Reason                                              string `json:"dump_reason"`
}

func TestTraceFileOnFailureAndOnRequest(t *testing.T) {
	dir := t.TempDir()
	configtest.Setenv(t, "GOCL_TRACE_FILE", filepath.Join(dir, "trace-%r.jsonl"), "GOCL_TIMEOUT", "5")
	comms, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := comms[0].DumpTrace(filepath.Join(dir, "early.jsonl")); err != nil { // nothing recorded yet: an empty file
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allReduce(c, 10)
			allReduce(c, 100+i) // counts differ: both ranks fail
		}()
	}
	wg.Wait()
	for r := range comms {
		recs := telemetrytest.ReadLines[traceLine](t, filepath.Join(dir, "trace-"+string(rune('0'+r))+".jsonl"))
		if len(recs) != 3 { // init's own allgather, then the two calls
			t.Fatalf("rank %d: %d records, want 3: %+v", r, len(recs), recs)
		}
		ok, bad := recs[1], recs[2]
		if ok.Op != "allreduce" || ok.Seq != 1 || ok.Count != 10 || ok.State != "completed" || ok.Dtype != "float32" ||
			ok.RedOp != "sum" || ok.Algorithm == "" || ok.Transport != "inproc" || ok.NRanks != 2 || ok.Rank != r {
			t.Errorf("rank %d: first record %+v", r, ok)
		}
		if bad.Seq != 2 || bad.Count != uint64(100+r) || bad.State != "started" || !strings.Contains(bad.Reason, "disagree") ||
			!strings.HasPrefix(bad.Reason, "failure: ") || bad.Comm != ok.Comm {
			t.Errorf("rank %d: second record %+v", r, bad)
		}
	}
	for _, c := range comms {
		c.Abort()
	}
	configtest.Setenv(t, "GOCL_TRACE_FILE", "")
	plain, err := InitAll(1, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain[0].DumpTrace(filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "GOCL_TRACE_BUFFER") {
		t.Errorf("DumpTrace with the recorder off: %v, want an error naming GOCL_TRACE_BUFFER", err)
	}
	plain[0].Destroy()
}
