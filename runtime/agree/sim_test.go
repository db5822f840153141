package agree

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"gocl/runtime/bootstrap"
)

// A deterministic simulator (as FoundationDB's and TigerBeetle's): every
// rank's Machine driven over a virtual clock and a network whose delays,
// drops, stalled links, partitions, crashes, stopped (paused) ranks and late
// callers come from one seed. Messages travel as the live driver sends
// them: one request and its replies on one connection, which fails whole
// (timed out after the probe wait, or refused at once by a dead rank). The
// invariants are checked after every event; a failing seed replays exactly:
//
//	go test ./runtime/agree -run TestSimulation -seed 1234 -v

var (
	seedFlag  = flag.Int64("seed", -1, "replay one simulation seed (with -v: its trace)")
	seedsFlag = flag.Int("seeds", 10000, "simulation seeds to run")
)

const window = time.Second // the join window (GOCL_TIMEOUT) of every simulation

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type span struct{ from, to time.Duration }

func (s span) has(t time.Duration) bool { return t >= s.from && t < s.to }

// plan is one seed's schedule of faults.
type plan struct {
	n        int
	explicit []int           // the exclude list (explicit shrinks), else nil
	start    []time.Duration // when each rank calls shrink (-1: never)
	crash    []time.Duration // when each rank dies (-1: never)
	pause    []span          // each rank stopped (SIGSTOP) during
	cut      map[[2]int]span // link a->b silent during
	parts    []span          // partitions: ranks below split are cut from the others
	split    int
	drop     float64
	// dieAt: a rank that dies the moment it first sends a message of this
	// kind (Accept: a coordinator in phase 2; Decide: one that decided),
	// the messages of that batch reaching only some peers.
	dieAt []Kind
	// verdicts: a failure detector (gocl's heartbeats) declares a rank dead
	// on one rank (Machine.Dead): the crashed and stopped ones soon after,
	// and now and then a healthy one (a false verdict: safety must hold).
	verdicts []verdict
}

type verdict struct {
	at      time.Duration
	by, who int
}

func makePlan(rng *rand.Rand) plan {
	n := 2 + rng.Intn(6)
	p := plan{n: n, start: make([]time.Duration, n), crash: make([]time.Duration, n), pause: make([]span, n),
		cut: map[[2]int]span{}, dieAt: make([]Kind, n)}
	ms := func(max int) time.Duration { return time.Duration(rng.Intn(max)) * time.Millisecond }
	if rng.Intn(8) == 0 && n > 2 { // an explicit shrink: the listed ranks do not call it
		k := 1 + rng.Intn(n-1)
		p.explicit = rng.Perm(n)[:k]
		slices.Sort(p.explicit)
	}
	for r := range n {
		p.start[r], p.crash[r] = ms(50), -1
		switch x := rng.Intn(20); {
		case x == 0:
			p.start[r] = -1 // alive, never calls shrink
		case x < 3:
			p.start[r] = ms(3000) // late
		}
		if p.explicit != nil && slices.Contains(p.explicit, r) {
			p.start[r] = -1
		}
		if rng.Intn(6) == 0 {
			p.crash[r] = ms(3000) // before, during or after the decision
		}
		if rng.Intn(8) == 0 {
			at := ms(2500)
			p.pause[r] = span{at, at + ms(2000)}
		}
		if p.crash[r] < 0 && rng.Intn(5) == 0 {
			p.dieAt[r] = []Kind{Accept, Decide}[rng.Intn(2)]
		}
	}
	for k := rng.Intn(4); k > 0; k-- {
		a, b := rng.Intn(n), rng.Intn(n)
		if a != b {
			at := ms(2000)
			p.cut[[2]int{a, b}] = span{at, at + ms(1500)}
		}
	}
	if rng.Intn(6) == 0 {
		p.split = 1 + rng.Intn(n-1)
		at := ms(1000)
		end := at + ms(4000)
		if rng.Intn(2) == 0 {
			end = time.Hour // for good
		}
		p.parts = append(p.parts, span{at, end})
	}
	if rng.Intn(3) == 0 {
		p.drop = rng.Float64() * 0.1
	}
	if rng.Intn(2) == 0 { // heartbeats on: a verdict reaches every other rank
		const hb = 400 * time.Millisecond
		declare := func(who int, at time.Duration) {
			for by := range n {
				if by != who {
					p.verdicts = append(p.verdicts, verdict{at + ms(100), by, who})
				}
			}
		}
		for r := range n {
			if p.crash[r] >= 0 {
				declare(r, p.crash[r]+hb)
			}
			if s := p.pause[r]; s.to-s.from > hb {
				declare(r, s.from+hb)
			}
			if rng.Intn(12) == 0 {
				declare(r, ms(3000)) // wrongly: it is only slow, or nothing at all
			}
		}
	}
	return p
}

func (p plan) linkDown(a, b int, t time.Duration) bool {
	if s, ok := p.cut[[2]int{a, b}]; ok && s.has(t) {
		return true
	}
	for _, s := range p.parts {
		if s.has(t) && (a < p.split) != (b < p.split) {
			return true
		}
	}
	return false
}

func (p plan) dead(r int, t time.Duration) bool   { return p.crash[r] >= 0 && t >= p.crash[r] }
func (p plan) paused(r int, t time.Duration) bool { return p.pause[r].has(t) }

// healthy ranks called shrink within the first quarter of the window and
// met no fault of their own: validity promises them membership.
func (p plan) healthy(r int) bool {
	if p.start[r] < 0 || p.start[r] > window/4 || p.crash[r] >= 0 || p.pause[r].to > 0 {
		return false
	}
	for k := range p.cut {
		if k[0] == r || k[1] == r {
			return false
		}
	}
	for _, v := range p.verdicts {
		if v.who == r { // declared dead: it may be left out
			return false
		}
	}
	return len(p.parts) == 0 && p.dieAt[r] == 0
}

type sim struct {
	t       *testing.T
	seed    int64
	rng     *rand.Rand
	p       plan
	now     time.Duration
	seq     int
	q       queue
	ms      []*Machine
	outcome []*Outcome
	doneAt  []time.Duration
	ids     int
	called  []time.Duration // when each rank called shrink (-1: not yet)
	trace   []string
	verbose bool
}

func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: t, seq: s.seq, fn: fn})
}

func (s *sim) logf(format string, a ...any) {
	if s.verbose {
		s.trace = append(s.trace, fmt.Sprintf("%8.3fs ", s.now.Seconds())+fmt.Sprintf(format, a...))
	}
}

// send delivers m as one request from m.From to m.To at now.
func (s *sim) send(m Msg) {
	a, b, t0 := m.From, m.To, s.now
	pw := bootstrap.ProbeWait(window)
	fail := func(refused bool) {
		d := pw
		if refused {
			d = time.Millisecond
		}
		s.at(t0+d, func() { s.feedUnreachable(a, b, refused) })
	}
	if s.p.dead(b, t0) {
		fail(true)
		return
	}
	if s.p.linkDown(a, b, t0) || s.rng.Float64() < s.p.drop {
		fail(false)
		return
	}
	arrive := t0 + time.Duration(100+s.rng.Intn(3000))*time.Microsecond
	if s.rng.Intn(50) == 0 {
		arrive += time.Duration(s.rng.Intn(100)) * time.Millisecond // a slow hop
	}
	for s.p.paused(b, arrive) {
		arrive = s.p.pause[b].to // a stopped process answers once it runs again
	}
	if arrive-t0 >= pw || s.p.dead(b, arrive) {
		fail(s.p.dead(b, arrive) && arrive-t0 < pw)
		return
	}
	s.at(arrive, func() {
		if s.p.dead(b, s.now) {
			fail(true)
			return
		}
		s.logf("%d -> %d %s e%d b%v", a, b, m.Kind, m.Epoch, m.Ballot)
		out, o := s.ms[b].Receive(s.now, m)
		s.finish(b, o)
		var replies []Msg
		for _, x := range out {
			if x.To == a {
				replies = append(replies, x)
			} else {
				s.send(x)
			}
		}
		back := s.now + time.Duration(100+s.rng.Intn(3000))*time.Microsecond
		if back-t0 >= pw || s.p.linkDown(b, a, s.now) || s.p.dead(a, back) {
			if !s.p.dead(a, back) {
				fail(false)
			}
			return
		}
		for s.p.paused(a, back) {
			back = s.p.pause[a].to
		}
		s.at(back, func() {
			for _, x := range replies {
				if s.p.dead(a, s.now) {
					return
				}
				s.logf("%d <- %d %s e%d", a, b, x.Kind, x.Epoch)
				out, o := s.ms[a].Receive(s.now, x)
				s.finish(a, o)
				s.sendAll(out)
			}
		})
	})
}

func (s *sim) sendAll(out []Msg) {
	for _, m := range out {
		r := m.From
		if k := s.p.dieAt[r]; k != 0 && m.Kind == k && !s.p.dead(r, s.now) {
			// This batch's messages of that kind reach a random subset, then
			// the rank dies.
			for _, x := range out {
				if x.Kind == k && s.rng.Intn(2) == 0 {
					s.send(x)
				}
			}
			s.p.crash[r] = s.now + time.Microsecond
			s.logf("rank %d dies sending %s", r, k)
			return
		}
		s.send(m)
	}
}

func (s *sim) feedUnreachable(a, b int, refused bool) {
	if s.p.dead(a, s.now) {
		return
	}
	if s.p.paused(a, s.now) {
		s.at(s.p.pause[a].to, func() { s.feedUnreachable(a, b, refused) })
		return
	}
	out, o := s.ms[a].Unreachable(s.now, b, refused)
	s.finish(a, o)
	s.sendAll(out)
}

func (s *sim) finish(r int, o *Outcome) {
	if o == nil {
		return
	}
	if s.outcome[r] != nil {
		s.t.Fatalf("seed %d: rank %d ended its run twice: %+v then %+v", s.seed, r, *s.outcome[r], *o)
	}
	s.outcome[r], s.doneAt[r] = o, s.now
	s.logf("rank %d ends: epoch %d value %+v err %v", r, o.Epoch, o.Value, o.Err)
}

func (s *sim) tick(r int) {
	if s.p.dead(r, s.now) || s.outcome[r] != nil {
		return
	}
	next := s.now + s.ms[r].Tick()
	if !s.p.paused(r, s.now) {
		out, o := s.ms[r].Step(s.now)
		s.finish(r, o)
		s.sendAll(out)
	} else {
		next = s.p.pause[r].to
	}
	s.at(next, func() { s.tick(r) })
}

// check is the invariants, after every event.
func (s *sim) check() {
	decided := map[int]Value{}
	for r, m := range s.ms {
		for e, v := range m.Decisions() {
			if have, ok := decided[e]; ok && !have.Equal(v) {
				s.fail("uniform agreement broken: epoch %d decided as %+v and as %+v (rank %d)", e, have, v, r)
			}
			decided[e] = v
		}
	}
	maj := s.p.n/2 + 1
	for e, v := range decided {
		if v.Err != "" {
			continue
		}
		for _, q := range v.Members {
			if s.called[q] < 0 {
				s.fail("validity broken: epoch %d's members %v include rank %d, which did not call shrink", e, v.Members, q)
			}
		}
		if s.p.explicit == nil {
			if len(v.Members) < maj {
				s.fail("epoch %d decided %v: fewer than a majority (%d) of %d", e, v.Members, maj, s.p.n)
			}
			for q := range s.p.n {
				if s.p.healthy(q) && !slices.Contains(v.Members, q) {
					s.fail("validity broken: healthy rank %d (called at %v) left out of %v", q, s.p.start[q], v.Members)
				}
			}
		} else {
			var want []int
			for q := range s.p.n {
				if !slices.Contains(s.p.explicit, q) {
					want = append(want, q)
				}
			}
			if !slices.Equal(v.Members, want) {
				s.fail("explicit shrink excluding %v decided %v", s.p.explicit, v.Members)
			}
		}
	}
	for r, o := range s.outcome {
		if o != nil && o.Err == nil {
			if d, ok := decided[o.Epoch]; !ok || !d.Equal(o.Value) {
				s.fail("rank %d returned %+v for epoch %d, not the decision %+v", r, o.Value, o.Epoch, d)
			}
		}
	}
}

func (s *sim) fail(format string, a ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, a...)
	if s.verbose {
		s.t.Log(strings.Join(s.trace, "\n"))
	}
	s.t.Fatalf("seed %d at %v: %s\nplan: %+v\nreplay: go test ./runtime/agree -run TestSimulation -seed %d -v", s.seed, s.now, msg, s.p, s.seed)
}

func runSeed(t *testing.T, seed int64, verbose bool) {
	rng := rand.New(rand.NewSource(seed))
	s := &sim{t: t, seed: seed, rng: rng, p: makePlan(rng), verbose: verbose}
	n := s.p.n
	s.outcome, s.doneAt = make([]*Outcome, n), make([]time.Duration, n)
	for r := range n {
		s.ms = append(s.ms, New(Config{Rank: r, N: n, Timeout: window, NewID: func() ([]byte, error) {
			s.ids++
			return []byte(fmt.Sprintf("id-%d-%d", r, s.ids)), nil
		}}))
	}
	s.called = make([]time.Duration, n)
	for r := range n {
		s.called[r] = -1
		if st := s.p.start[r]; st >= 0 {
			var call func()
			call = func() {
				if s.p.dead(r, s.now) {
					return
				}
				if s.p.paused(r, s.now) {
					s.at(s.p.pause[r].to, call) // it calls once it runs again
					return
				}
				s.called[r] = s.now
				s.logf("rank %d calls shrink", r)
				out, o := s.ms[r].Start(s.now, s.p.explicit != nil, s.p.explicit)
				s.finish(r, o)
				s.sendAll(out)
				s.at(s.now+s.ms[r].Tick(), func() { s.tick(r) })
			}
			s.at(st, call)
		}
	}
	for _, v := range s.p.verdicts {
		s.at(v.at, func() {
			if s.p.dead(v.by, s.now) || s.p.paused(v.by, s.now) {
				return
			}
			s.logf("rank %d: heartbeat verdict on rank %d", v.by, v.who)
			out, o := s.ms[v.by].Dead(s.now, v.who)
			s.finish(v.by, o)
			s.sendAll(out)
		})
	}
	last := time.Duration(0)
	for r := range n {
		last = max(last, s.p.start[r], s.p.pause[r].to)
	}
	stop := last + Bound(window) + 2*time.Second
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at > stop {
			break
		}
		s.now = max(s.now, e.at)
		e.fn()
		s.check()
	}
	// Termination: every rank that called shrink and lives has ended, within
	// the bound of its call (plus a tick, and the time it was stopped).
	clean := true
	for r := range n {
		st := s.p.start[r]
		if st < 0 || s.p.dead(r, stop) {
			clean = clean && s.p.crash[r] < 0 && st < 0 && slices.Contains(s.p.explicit, r)
			continue
		}
		if s.outcome[r] == nil {
			s.fail("termination broken: rank %d (called at %v) never ended", r, st)
		}
		limit := s.called[r] + Bound(window) + s.ms[r].Tick() + bootstrap.ProbeWait(window) + (s.p.pause[r].to - s.p.pause[r].from)
		if s.doneAt[r] > limit {
			s.fail("termination broken: rank %d called at %v ended at %v, past %v", r, st, s.doneAt[r], limit)
		}
		if !s.p.healthy(r) || s.p.dieAt[r] != 0 {
			clean = false
		}
	}
	// With no fault at all, every caller gets the communicator of all callers.
	if clean && s.p.drop == 0 {
		for r := range n {
			if s.p.start[r] >= 0 && (s.outcome[r].Err != nil || s.outcome[r].Value.Err != "") {
				s.fail("no fault, yet rank %d failed: %v %s", r, s.outcome[r].Err, s.outcome[r].Value.Err)
			}
		}
	}
}

// TestSimulation runs the agreement over many seeded schedules.
func TestSimulation(t *testing.T) {
	if *seedFlag >= 0 {
		runSeed(t, *seedFlag, testing.Verbose())
		return
	}
	seeds := *seedsFlag
	if testing.Short() {
		seeds = min(seeds, 2000)
	}
	for seed := range int64(seeds) {
		runSeed(t, seed, false)
		if t.Failed() {
			return
		}
	}
}
