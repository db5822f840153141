package debuglog

import "testing"

func TestParse(t *testing.T) {
	if ParseLevel("info") != Info || ParseLevel("nonsense") != None || ParseLevel("TRACE") != Trace {
		t.Error("ParseLevel")
	}
	if s := ParseSubsys("INIT,NET"); s != Init|Net {
		t.Errorf("INIT,NET = %b", s)
	}
	if s := ParseSubsys("^COLL"); s&Coll != 0 || s&Init == 0 {
		t.Errorf("^COLL = %b", s)
	}
	if s := ParseSubsys("ALL"); s != All {
		t.Errorf("ALL = %b", s)
	}
	if got := ExpandFileName("/tmp/gocl.%h.%p.log", "node1", 42); got != "/tmp/gocl.node1.42.log" {
		t.Errorf("ExpandFileName = %q", got)
	}
}
