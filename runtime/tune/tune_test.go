package tune

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"gocl/runtime/wire"
)

// Data-driven tests in the style of etcd's raft: each file under testdata/
// is a script of inputs and the expected outputs, so a change of the model
// shows up as a readable diff of choices.

func collByNameT(t *testing.T, s string) wire.Coll {
	c, ok := collByName(s)
	if !ok {
		t.Fatalf("unknown collective %q", s)
	}
	return c
}

// TestPickScript runs testdata/pick.txt:
//
//	plan n=4 links=inproc[,socket] [algo=...] [proto=...] [direct=B] [chunk=B] [net=Gbit/s] [hosts=HxL]
//	<collective> <bytes> <algo>/<proto>
func TestPickScript(t *testing.T) {
	f, err := os.Open("testdata/pick.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var p *Plan
	var planLine string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if fields[0] == "plan" {
			p, planLine = scriptPlan(t, line, fields[1:]), text
			continue
		}
		if p == nil || len(fields) != 3 {
			t.Fatalf("pick.txt:%d: want \"<collective> <bytes> <choice>\" after a plan line: %q", line, text)
		}
		bytes, err := strconv.Atoi(fields[1])
		if err != nil {
			t.Fatalf("pick.txt:%d: %v", line, err)
		}
		if got := p.Pick(collByNameT(t, fields[0]), bytes).String(); !strings.EqualFold(got, fields[2]) {
			t.Errorf("pick.txt:%d: %s\n\t%s %d bytes: got %s, want %s", line, planLine, fields[0], bytes, got, fields[2])
		}
	}
}

func scriptPlan(t *testing.T, line int, args []string) *Plan {
	n, chunk := 0, 1<<20
	var links []string
	algo, proto, direct := "", "", 32768
	crowd := 1
	nhosts, perHost := 0, 0
	net := 0.0
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "n":
			n, err = strconv.Atoi(v)
		case "links":
			links = strings.Split(v, ",")
		case "algo":
			algo = v
		case "proto":
			proto = v
		case "direct":
			direct, err = strconv.Atoi(v)
		case "chunk":
			chunk, err = strconv.Atoi(v)
		case "crowd":
			crowd, err = strconv.Atoi(v)
		case "net": // net=G: the link between hosts, Gbit/s
			net, err = strconv.ParseFloat(v, 64)
		case "hosts": // hosts=HxL: H hosts of L ranks (L=0: unequal)
			_, err = fmt.Sscanf(v, "%dx%d", &nhosts, &perHost)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			t.Fatalf("pick.txt:%d: %v", line, err)
		}
	}
	var s Settings
	var err error
	if s.Algos, err = ParseFilter("GOCL_ALGO", algo, algoNames[:], foreignAlgos); err != nil {
		t.Fatalf("pick.txt:%d: %v", line, err)
	}
	if s.Protos, err = ParseFilter("GOCL_PROTO", proto, protoNames[:], nil); err != nil {
		t.Fatalf("pick.txt:%d: %v", line, err)
	}
	s.DirectMax = direct
	p := NewPlan(s, n, links, chunk, crowd)
	if net > 0 {
		p.SetNet(Net{GBs: net / 8, From: "pick.txt"})
	}
	if nhosts > 0 {
		p.SetHosts(nhosts, perHost)
	}
	return p
}

// TestFilterScript runs testdata/filter.txt:
//
//	<value> -> <collective>=<allowed,...> [<collective>=...]
//	<value> -> error: <part of the message>
//
// for GOCL_ALGO values (an empty value is written "").
func TestFilterScript(t *testing.T) {
	data, err := os.ReadFile("testdata/filter.txt")
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range strings.Split(string(data), "\n") {
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		value, want, ok := strings.Cut(text, " -> ")
		if !ok {
			t.Fatalf("filter.txt:%d: no \" -> \" in %q", i+1, text)
		}
		if value == `""` {
			value = ""
		}
		f, err := ParseFilter("GOCL_ALGO", value, algoNames[:], foreignAlgos)
		if msg, isErr := strings.CutPrefix(want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "GOCL_ALGO=") {
				t.Errorf("filter.txt:%d: %q: got error %v, want one containing %q and naming GOCL_ALGO", i+1, value, err, msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("filter.txt:%d: %q: %v", i+1, value, err)
			continue
		}
		for _, exp := range strings.Fields(want) {
			coll, list, _ := strings.Cut(exp, "=")
			c := collByNameT(t, coll)
			var got []string
			for a := range numAlgos {
				if f.has(c, int(a)) {
					got = append(got, a.String())
				}
			}
			if g := strings.Join(got, ","); g != list {
				t.Errorf("filter.txt:%d: %q: %s allows %s, want %s", i+1, value, coll, g, list)
			}
		}
	}
}

// The table printed for GOCL_DEBUG_SUBSYS=TUNING names every candidate.
func TestTableListsCandidates(t *testing.T) {
	p := NewPlan(Settings{DirectMax: 1 << 15}, 4, []string{"inproc"}, 1<<20, 1)
	text := strings.Join(p.Table(), "\n")
	for _, want := range []string{"allreduce", "ring", "tree", "direct", "halvingdoubling", "reducescatter", "67108864"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
}
