package comm

import (
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"

	"gocl/runtime/wire"
)

var updateElems = flag.Bool("update-elems", false, "rewrite testdata/elems.json from Elems")

// elemsRow is one line of testdata/elems.json, the size rules as a table
// that the Python suite (tests/python/test_sizes.py) checks its helper
// against: a call named as the numpy API names it.
type elemsRow struct {
	Call   string `json:"call"`
	NRanks int    `json:"nranks"`
	Count  int    `json:"count"`
	Send   int    `json:"send"`
	Recv   int    `json:"recv"`
}

var elemsCalls = []struct {
	name   string
	coll   wire.Coll
	isSend bool
}{
	{"all_reduce", wire.AllReduce, false}, {"broadcast", wire.Broadcast, false}, {"reduce", wire.Reduce, false},
	{"all_gather", wire.AllGather, false}, {"reduce_scatter", wire.ReduceScatter, false},
	{"all_to_all", wire.AlltoAll, false}, {"gather", wire.Gather, false}, {"scatter", wire.Scatter, false},
	{"send", wire.SendRecv, true}, {"recv", wire.SendRecv, false},
}

func elemsTable() []elemsRow {
	var rows []elemsRow
	for _, c := range elemsCalls {
		for _, n := range []int{1, 2, 3, 8} {
			for _, count := range []int{0, 1, 5} {
				s, r := Elems(c.coll, count, n, c.isSend)
				rows = append(rows, elemsRow{c.name, n, count, s, r})
			}
		}
	}
	return rows
}

// TestElemsTable pins the size rules to testdata/elems.json, the table both
// suites read (go test -run ElemsTable -update-elems rewrites it).
func TestElemsTable(t *testing.T) {
	want := elemsTable()
	if *updateElems {
		var b []byte
		b = append(b, "[\n"...)
		for i, r := range want {
			line, _ := json.Marshal(r)
			b = append(b, "  "...)
			b = append(b, line...)
			if i < len(want)-1 {
				b = append(b, ',')
			}
			b = append(b, '\n')
		}
		b = append(b, "]\n"...)
		if err := os.WriteFile("testdata/elems.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile("testdata/elems.json")
	if err != nil {
		t.Fatal(err)
	}
	var got []elemsRow
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("testdata/elems.json differs from Elems: run go test -run ElemsTable -update-elems, and check the Python helper (tests/python/test_sizes.py)")
	}
}
