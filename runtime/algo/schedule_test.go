package algo

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt from the schedules the algorithms make now")

// The schedules of testdata/*.txt, in the style of etcd raft's data-driven
// tests: each case names a collective, an algorithm and its shape, and
// lists every link call of every rank in order, as a run over recording
// links (record_test.go) makes it. The run must keep the protocol rule
// (a sender at most one frame ahead), leave no frame unread and compute
// the right result; then its schedule must be the file's, line for line.
// go test ./runtime/algo -run TestSchedules -update rewrites the files
// from the current algorithms (read the diff before committing it).
func TestSchedules(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.txt (%v)", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) { runScheduleFile(t, path) })
	}
}

// A schedule file: comment lines (#) and blank lines, and cases of
//
//	<collective> <algorithm> ranks=N count=C [chunk=B] [root=R] [hosts=H] [link=lending|buffered]
//	----
//	rank 0
//	  <event>
//	  ...
//	rank 1
//	  ...
//
// ended by a blank line. An event is one link call of the rank:
//
//	claim to P, B bytes          waits for a free slot to P (Lend), to fill in place
//	send to P, step S, B bytes   the frame goes out (Commit, or Send)
//	recv from P, step S, B bytes the frame from P is taken
//
// A send that follows its claim at once is written as the send alone. A
// frame carries the step its receiver takes it at (a ring's hop, a chain's
// or a tree's chunk); the recording link fails a schedule that numbers one
// otherwise.
type scheduleCase struct {
	line int    // of the command, 1-based
	cmd  string // the command line
	want string // the expected schedule, lines joined with \n
}

func runScheduleFile(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder // the file as -update writes it
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	changed := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			out.WriteString(l + "\n")
			continue
		}
		c := scheduleCase{line: i + 1, cmd: l}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: a case's command must be followed by ----", path, i+1)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		c.want = strings.Join(want, "\n")
		got, err := runCase(c.cmd)
		if err != nil {
			t.Errorf("%s:%d: %s: %v", path, c.line, c.cmd, err)
			got = c.want // keep what the file says
		} else if got != c.want {
			changed = true
			if !*update {
				t.Errorf("%s:%d: %s: the schedule changed (go test ./runtime/algo -run TestSchedules -update rewrites testdata)\n%s",
					path, c.line, c.cmd, firstDiff(path, c.line+2, c.want, got))
			}
		}
		out.WriteString(c.cmd + "\n----\n" + got + "\n")
		if i < len(lines) {
			out.WriteString("\n")
		}
	}
	if *update && changed && !t.Failed() {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
	}
}

// firstDiff shows where two schedules part: the file's line (the schedule
// starts at line start) and the rank.
func firstDiff(path string, start int, want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	rank := ""
	for j := min(i, len(g)-1); j >= 0; j-- {
		if strings.HasPrefix(g[j], "rank ") {
			rank = g[j]
			break
		}
	}
	at := func(s []string) string {
		if i < len(s) {
			return strings.TrimSpace(s[i])
		}
		return "(end)"
	}
	return fmt.Sprintf("%s:%d (%s): want %q, got %q", path, start+i, rank, at(w), at(g))
}

// A case's shape, from its command line.
type shape struct {
	coll         wire.Coll
	algo         string
	ranks, count int
	chunk, root  int
	hosts        int
	lending      bool
}

func parseCase(cmd string) (shape, error) {
	f := strings.Fields(cmd)
	if len(f) < 2 {
		return shape{}, fmt.Errorf("want <collective> <algorithm> key=value...")
	}
	s := shape{algo: f[1], chunk: 1 << 20, hosts: 1, lending: true}
	for c := wire.AllReduce; c <= wire.Scatter; c++ {
		if c.String() == f[0] {
			s.coll = c
		}
	}
	if s.coll == 0 {
		return s, fmt.Errorf("unknown collective %q", f[0])
	}
	for _, kv := range f[2:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("%q is not key=value", kv)
		}
		if k == "link" {
			switch v {
			case "lending":
				s.lending = true
			case "buffered":
				s.lending = false
			default:
				return s, fmt.Errorf("link=%s: want lending or buffered", v)
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("%s: %v", kv, err)
		}
		switch k {
		case "ranks":
			s.ranks = n
		case "count":
			s.count = n
		case "chunk":
			s.chunk = n
		case "root":
			s.root = n
		case "hosts":
			s.hosts = n
		default:
			return s, fmt.Errorf("unknown key %q", k)
		}
	}
	if s.ranks < 1 || s.count < 1 || s.root < 0 || s.root >= s.ranks || s.hosts < 1 || s.ranks%s.hosts != 0 {
		return s, fmt.Errorf("bad shape %+v", s)
	}
	return s, nil
}

// algorithm returns the function a case runs, as rooted (unrooted ones
// ignore root).
func (s shape) algorithm() (func(c *Ctx, send, recv []byte, count, root int) error, error) {
	unrooted := func(f func(*Ctx, []byte, []byte, int) error) func(*Ctx, []byte, []byte, int, int) error {
		return func(c *Ctx, send, recv []byte, count, _ int) error { return f(c, send, recv, count) }
	}
	type key struct {
		c wire.Coll
		a string
	}
	f := map[key]func(*Ctx, []byte, []byte, int, int) error{
		{wire.AllReduce, "ring"}:                unrooted(AllReduceRing),
		{wire.AllReduce, "tree"}:                unrooted(AllReduceTree),
		{wire.AllReduce, "direct"}:              unrooted(AllReduceDirect),
		{wire.AllReduce, "halvingdoubling"}:     unrooted(AllReduceHalvingDoubling),
		{wire.AllReduce, "hier"}:                unrooted(AllReduceHier),
		{wire.AllGather, "ring"}:                unrooted(AllGatherRing),
		{wire.AllGather, "direct"}:              unrooted(AllGatherDirect),
		{wire.AllGather, "halvingdoubling"}:     unrooted(AllGatherHalvingDoubling),
		{wire.ReduceScatter, "ring"}:            unrooted(ReduceScatterRing),
		{wire.ReduceScatter, "direct"}:          unrooted(ReduceScatterDirect),
		{wire.ReduceScatter, "halvingdoubling"}: unrooted(ReduceScatterHalvingDoubling),
		{wire.Broadcast, "ring"}:                BroadcastRing,
		{wire.Broadcast, "tree"}:                BroadcastTree,
		{wire.Broadcast, "direct"}:              BroadcastDirect,
		{wire.Reduce, "ring"}:                   ReduceRing,
		{wire.Reduce, "tree"}:                   ReduceTree,
		{wire.Reduce, "direct"}:                 ReduceDirect,
		{wire.AlltoAll, "direct"}:               unrooted(AlltoAll),
		{wire.Gather, "direct"}:                 Gather,
		{wire.Scatter, "direct"}:                Scatter,
	}[key{s.coll, s.algo}]
	if f == nil {
		return nil, fmt.Errorf("%s has no algorithm %q here", s.coll, s.algo)
	}
	return f, nil
}

// sizes are the send and receive buffers' element counts.
func (s shape) sizes() (send, recv int) {
	n, c := s.ranks, s.count
	switch s.coll {
	case wire.AllGather, wire.Gather:
		return c, n * c
	case wire.ReduceScatter, wire.Scatter:
		return n * c, c
	case wire.AlltoAll:
		return n * c, n * c
	}
	return c, c
}

// input is element i of rank r's send buffer: small integers, so that
// float32 sums are exact whatever the order.
func input(r, i int) float32 { return float32((r + 1) * (i%5 + 1)) }

// want is element i of rank r's result; ok false where the collective
// leaves it unspecified (reduce's and gather's non-roots).
func (s shape) want(r, i int) (v float32, ok bool) {
	n, c := s.ranks, s.count
	sum := func(i int) (t float32) {
		for q := range n {
			t += input(q, i)
		}
		return t
	}
	switch s.coll {
	case wire.AllReduce:
		return sum(i), true
	case wire.Reduce:
		return sum(i), r == s.root
	case wire.ReduceScatter:
		return sum(r*c + i), true
	case wire.AllGather:
		return input(i/c, i%c), true
	case wire.Gather:
		return input(i/c, i%c), r == s.root
	case wire.Broadcast:
		return input(s.root, i), true
	case wire.Scatter:
		return input(s.root, r*c+i), true
	case wire.AlltoAll:
		return input(i/c, r*c+i%c), true
	}
	return 0, false
}

// runCase runs one case on its recording world and returns its schedule.
func runCase(cmd string) (string, error) {
	s, err := parseCase(cmd)
	if err != nil {
		return "", err
	}
	run, err := s.algorithm()
	if err != nil {
		return "", err
	}
	red, err := kernels.NewReducer(abi.Float32, abi.Sum, s.ranks, nil)
	if err != nil {
		return "", err
	}
	const elem = 4
	w := newWorld(s.ranks, s.lending)
	ns, nr := s.sizes()
	recvs := make([][]byte, s.ranks)
	var hosts [][]int
	if s.coll == wire.AllReduce && s.algo == "hier" {
		per := s.ranks / s.hosts
		for h := range s.hosts {
			hosts = append(hosts, []int{})
			for l := range per {
				hosts[h] = append(hosts[h], h*per+l)
			}
		}
	}
	var wg sync.WaitGroup
	for r := range s.ranks {
		send := make([]byte, ns*elem)
		for i := range ns {
			binary.LittleEndian.PutUint32(send[i*elem:], math.Float32bits(input(r, i)))
		}
		recvs[r] = make([]byte, nr*elem)
		c := &Ctx{
			Rank: r, N: s.ranks, Links: w.links(r),
			Hdr: wire.Header{Kind: wire.KindColl, Coll: s.coll, Dtype: uint8(abi.Float32), Op: uint8(abi.Sum),
				Root: int32(s.root), Seq: 1, Count: uint64(s.count)},
			Red: red, Elem: elem, Chunk: s.chunk, Local: 1, Hosts: hosts,
			Scratch: func(n int) []byte { return make([]byte, n) },
			Fail:    w.fail,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.done(r, run(c, send, recvs[r], s.count, s.root))
		}()
	}
	wg.Wait()
	if w.err != nil {
		return "", w.err
	}
	if err := w.leftovers(); err != nil {
		return "", err
	}
	for r, buf := range recvs {
		for i := range nr {
			want, ok := s.want(r, i)
			got := math.Float32frombits(binary.LittleEndian.Uint32(buf[i*elem:]))
			if ok && got != want {
				return "", fmt.Errorf("rank %d: element %d is %v, want %v", r, i, got, want)
			}
		}
	}
	return w.schedule(), nil
}

// schedule renders every rank's link calls in the testdata format.
func (w *world) schedule() string {
	var b strings.Builder
	for r, evs := range w.trace {
		if r > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "rank %d", r)
		for i, e := range evs {
			// A claim whose send follows at once is the send alone.
			if e.kind == "claim" && i+1 < len(evs) && evs[i+1].kind == "send" && evs[i+1].peer == e.peer {
				continue
			}
			b.WriteString("\n  ")
			switch e.kind {
			case "claim":
				fmt.Fprintf(&b, "claim to %d, %d bytes", e.peer, e.bytes)
			case "send":
				fmt.Fprintf(&b, "send to %d, step %d, %d bytes", e.peer, e.step, e.bytes)
			case "recv":
				fmt.Fprintf(&b, "recv from %d, step %d, %d bytes", e.peer, e.step, e.bytes)
			}
		}
	}
	return b.String()
}

// The world catches a schedule more than one frame ahead: two ranks that
// each send three frames before receiving block each other with two slots
// a direction (and go through with two frames each).
func TestRecordingWorldCatchesTwoAhead(t *testing.T) {
	for _, ahead := range []int{2, 3} {
		w := newWorld(2, true)
		var wg sync.WaitGroup
		for r := range 2 {
			c := &Ctx{Rank: r, N: 2, Links: w.links(r), Hdr: wire.Header{Kind: wire.KindColl, Coll: wire.AlltoAll, Count: 1},
				Elem: 1, Chunk: 1, Fail: w.fail}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.done(r, c.run(func(p *prims) error {
					buf := make([]byte, ahead)
					for k := range ahead {
						if err := p.send(1-r, k, buf[k:k+1]); err != nil {
							return err
						}
					}
					for k := range ahead {
						if err := p.recv(1-r, k, buf[k:k+1]); err != nil {
							return err
						}
					}
					return nil
				}))
			}()
		}
		wg.Wait()
		switch {
		case ahead == 2 && w.err != nil:
			t.Errorf("one frame ahead: %v", w.err)
		case ahead == 3 && (w.err == nil || !strings.Contains(w.err.Error(), "deadlock")):
			t.Errorf("two frames ahead: got %v, want a deadlock", w.err)
		case ahead == 3:
			t.Logf("two frames ahead: %v", w.err)
		}
	}
}
