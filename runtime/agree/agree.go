// Package agree is the survivors' agreement of a shrink, as logic with no
// I/O (as etcd's raft is): one Machine per rank of a parent communicator
// takes events (the rank calls shrink, a message arrives, a peer cannot be
// reached, time passes) and returns messages to send and, once, the run's
// outcome. runtime/comm drives it over the bootstrap listeners; the tests
// drive it in a deterministic simulator over seeded schedules.
//
// The agreement is single-decree Paxos per epoch (one shrink of the
// parent), so it is safe whatever the failure detector says: a rank taken
// for dead while only slow, a partition, a coordinator that dies while
// telling the survivors. Its guarantees (checked by the simulator):
//
//   - uniform agreement: every rank that returns a communicator for an
//     epoch holds the same members in the same order, and the same id;
//   - validity: the members are ranks that called shrink, at least a
//     majority of the parent's ranks (agreed shrinks: the side of a
//     partition without a majority fails, and no rank ever goes on alone);
//     a rank that called shrink within the join window and stays reachable
//     is a member;
//   - termination: every rank that called shrink returns (a decision or an
//     error) within Bound of its call.
//
// Roles: every rank that called shrink is an acceptor. The lowest rank that
// finds no lower rank in the shrink coordinates: it prepares a ballot,
// waits for every rank to promise or to be gone (refused) until the join
// window closes, proposes the value a promise carried (a decision may
// already be under way) or else the promisers as members with a new id, and
// decides once a quorum accepted: a majority of the parent (agreed) or
// every listed member (an explicit exclude list). Every message carries the
// decisions its sender knows, so a decision reaches every rank the moment
// it hears from any rank that holds it; a coordinator that dies while
// telling is replaced by the next, whose prepare finds the value accepted by
// a majority and proposes it again. Epochs are not counted by each rank
// alone: a rank that missed a shrink (excluded by a list, or late) learns
// its decision from the others and, when they are shrinking again, joins
// their epoch.
package agree

import (
	"fmt"
	"slices"
	"time"
)

// DefaultTimeout is the join window when the communicator has no timeout
// (GOCL_TIMEOUT=0): the agreement itself is always bounded.
const DefaultTimeout = 30 * time.Second

// Bound is how long after its call a rank's run ends at the latest, for a
// join window of t (the window, then up to two rounds of prepare and
// accept in which peers answer within t).
func Bound(t time.Duration) time.Duration { return 3 * t }

// Ballot orders proposals: a higher round wins; in one round the lower rank
// wins, so the lowest coordinator prevails when two start at once.
type Ballot struct {
	Round int `json:"round"`
	Rank  int `json:"rank"`
}

// Less says whether b is below o; the zero ballot (round 0) is below all.
func (b Ballot) Less(o Ballot) bool {
	if b.Round != o.Round {
		return b.Round < o.Round
	}
	return b.Rank > o.Rank
}

// Value is a decision: the members of the new communicator in order, and
// its unique id (made by the proposer); or an error every rank returns.
type Value struct {
	Members []int  `json:"members,omitempty"`
	ID      []byte `json:"id,omitempty"`
	Agreed  bool   `json:"agreed,omitempty"` // by agreement, not an exclude list
	Err     string `json:"err,omitempty"`
}

// Equal says whether two decisions are the same.
func (v Value) Equal(o Value) bool {
	return slices.Equal(v.Members, o.Members) && string(v.ID) == string(o.ID) && v.Agreed == o.Agreed && v.Err == o.Err
}

// Kind is a message's kind.
type Kind uint8

const (
	Hello    Kind = iota + 1 // which epoch are you shrinking? (answered with Status)
	Status                   // the sender's epoch (Active), its call, its decisions
	Prepare                  // phase 1 of Ballot
	Promise                  // the promise of Ballot, with what the sender accepted
	Accept                   // phase 2: accept Value at Ballot
	Accepted                 // the sender accepted Ballot
	Nack                     // the sender promised a higher Ballot
	Decide                   // Value is decided for Epoch
)

func (k Kind) String() string {
	names := [...]string{"?", "hello", "status", "prepare", "promise", "accept", "accepted", "nack", "decide"}
	if int(k) < len(names) {
		return names[k]
	}
	return "?"
}

// Msg is one message. Every message carries the sender's shrink call
// (Active: the epoch it is shrinking, -1 none; Explicit, Exclude) and every
// decision it knows, keyed by epoch.
type Msg struct {
	Kind      Kind          `json:"kind"`
	From      int           `json:"from"`
	To        int           `json:"to"`
	Epoch     int           `json:"epoch"`
	Ballot    Ballot        `json:"ballot"`
	AccBallot Ballot        `json:"acc_ballot"`
	AccValue  *Value        `json:"acc_value,omitempty"`
	Value     *Value        `json:"value,omitempty"`
	Active    int           `json:"active"`
	Explicit  bool          `json:"explicit,omitempty"`
	Exclude   []int         `json:"exclude,omitempty"`
	Decisions map[int]Value `json:"decisions,omitempty"`
}

// Outcome ends a run: the decision (Value.Err set: every rank fails with
// it) or this rank's own error (Err: it failed alone, left out or out of
// time); Epoch is the shrink it belongs to.
type Outcome struct {
	Epoch int
	Value Value
	Err   error
}

// Config is one rank's view of the parent communicator.
type Config struct {
	Rank, N int
	// Timeout is the join window (0: DefaultTimeout).
	Timeout time.Duration
	// NewID makes the unique id of a proposed communicator.
	NewID func() ([]byte, error)
}

// peer is what this rank knows of another during a run.
type peer struct {
	active   int  // the epoch it last said it is shrinking (-1: none)
	heard    bool // it answered during this run
	gone     bool // refused: its communicator or process is gone
	silent   bool // its last message timed out
	silentAt time.Duration
	lastSeen time.Duration
	explicit bool
	exclude  []int
}

// acceptor is this rank's Paxos state in one epoch.
type acceptor struct {
	promised Ballot
	accBal   Ballot
	accVal   *Value
}

// proposal is this rank's ballot while it coordinates.
type proposal struct {
	ballot   Ballot
	promised map[int]*Msg // promises by rank (self included)
	value    *Value       // phase 2 once set
	accepted map[int]bool
	err      string // a mismatch found in phase 1: proposed as the decision
}

// run is a shrink in progress on this rank.
type run struct {
	epoch    int
	explicit bool
	exclude  []int
	start    time.Duration
	peers    []peer
	prop     *proposal
	round    int                      // highest round seen
	lowerAt  time.Duration            // when a lower rank last prepared
	maxSeen  int                      // the highest epoch a peer is shrinking
	sent     map[[2]int]time.Duration // (kind, peer) -> when last sent: one of each per tick
	done     bool
}

// Machine is one rank's agreement state for a parent communicator, across
// its shrinks. It is not safe for concurrent use.
type Machine struct {
	cfg       Config
	decisions map[int]Value
	acc       map[int]*acceptor
	next      int // the first epoch without a known decision
	run       *run
	// dead are the ranks a failure detector declared gone (gocl's
	// heartbeats): every run starts with them gone, so it does not wait its
	// join window for them. A message from one brings it back.
	dead map[int]bool
	// leftOut is an agreed shrink the others decided without this rank
	// while it was not shrinking (it was late, or taken for dead): its next
	// shrink call is that one, and fails at once saying so (-1: none).
	leftOut int
}

// New makes a rank's machine.
func New(cfg Config) *Machine {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Machine{cfg: cfg, decisions: map[int]Value{}, acc: map[int]*acceptor{}, dead: map[int]bool{}, leftOut: -1}
}

// Timeout is the join window in force.
func (m *Machine) Timeout() time.Duration { return m.cfg.Timeout }

// Decisions returns the decisions this rank knows (for tests).
func (m *Machine) Decisions() map[int]Value { return m.decisions }

// Running says whether a shrink is in progress.
func (m *Machine) Running() bool { return m.run != nil && !m.run.done }

// tick is how often a run retries (hellos, prepares, accepts) and checks
// its deadlines: a twentieth of the window, within [50 ms, 1 s].
func (m *Machine) tick() time.Duration {
	return min(max(m.cfg.Timeout/20, 50*time.Millisecond), time.Second)
}

// Tick is how often the driver should call Step with no event.
func (m *Machine) Tick() time.Duration { return m.tick() }

// Start begins this rank's shrink at now: agreed (exclude nil, explicit
// false) or with the caller's exclude list.
func (m *Machine) Start(now time.Duration, explicit bool, exclude []int) ([]Msg, *Outcome) {
	if m.Running() {
		return nil, &Outcome{Epoch: m.run.epoch, Err: fmt.Errorf("rank %d: a shrink of this communicator is already in progress", m.cfg.Rank)}
	}
	if e := m.leftOut; e >= 0 {
		m.leftOut = -1
		return nil, &Outcome{Epoch: e, Err: m.leftOutErr()}
	}
	r := &run{epoch: m.next, explicit: explicit, exclude: slices.Clone(exclude), start: now, maxSeen: -1,
		sent: map[[2]int]time.Duration{}}
	r.peers = make([]peer, m.cfg.N)
	for i := range r.peers {
		r.peers[i].active = -1
		r.peers[i].gone = m.dead[i]
	}
	m.run = r
	return m.Step(now)
}

// Dead tells the machine that a failure detector declared peer gone (it
// stopped answering heartbeats): this run and later ones take it for gone
// as if it had refused, unless it speaks again. Safety does not rest on it:
// a rank declared dead while only slow is at worst left out.
func (m *Machine) Dead(now time.Duration, peerRank int) ([]Msg, *Outcome) {
	if peerRank < 0 || peerRank >= m.cfg.N || peerRank == m.cfg.Rank {
		return nil, nil
	}
	m.dead[peerRank] = true
	if r := m.run; r != nil && !r.done {
		r.peers[peerRank].gone = true
	}
	return m.Step(now)
}

func (m *Machine) acceptor(e int) *acceptor {
	a := m.acc[e]
	if a == nil {
		a = &acceptor{}
		m.acc[e] = a
	}
	return a
}

// due says whether a message of kind k to q may be (re)sent at now: once a
// tick, so that the replies that each trigger a step do not multiply them.
func (m *Machine) due(now time.Duration, k Kind, q int) bool {
	key := [2]int{int(k), q}
	if at, ok := m.run.sent[key]; ok && now-at < m.tick() {
		return false
	}
	m.run.sent[key] = now
	return true
}

// msg stamps a message from this rank.
func (m *Machine) msg(k Kind, to, epoch int) Msg {
	out := Msg{Kind: k, From: m.cfg.Rank, To: to, Epoch: epoch, Active: -1, Decisions: m.decisions}
	if m.Running() {
		out.Active, out.Explicit, out.Exclude = m.run.epoch, m.run.explicit, m.run.exclude
	}
	return out
}

// learn merges decisions; a conflict would break the agreement's very
// guarantee, so it panics (the simulator checks it never happens).
func (m *Machine) learn(ds map[int]Value) {
	for e, v := range ds {
		if have, ok := m.decisions[e]; ok {
			if !have.Equal(v) {
				panic(fmt.Sprintf("agree: rank %d holds two decisions for epoch %d: %+v and %+v", m.cfg.Rank, e, have, v))
			}
			continue
		}
		if m.decisions == nil {
			m.decisions = map[int]Value{}
		}
		m.decisions = cloneDecisions(m.decisions)
		m.decisions[e] = v
		if v.Agreed && !slices.Contains(v.Members, m.cfg.Rank) && !(m.Running() && m.run.epoch <= e) && e >= m.next {
			m.leftOut = e
		}
	}
	for {
		if _, ok := m.decisions[m.next]; !ok {
			break
		}
		m.next++
	}
}

// cloneDecisions copies the map: messages already sent keep the old one.
func cloneDecisions(d map[int]Value) map[int]Value {
	out := make(map[int]Value, len(d)+1)
	for k, v := range d {
		out[k] = v
	}
	return out
}

// Receive handles a message at now and returns the messages it causes
// (replies to the sender among them) and, if the run ends, its outcome.
func (m *Machine) Receive(now time.Duration, in Msg) ([]Msg, *Outcome) {
	m.learn(in.Decisions)
	var out []Msg
	r := m.run
	if r != nil && !r.done && in.From >= 0 && in.From < m.cfg.N && in.From != m.cfg.Rank {
		p := &r.peers[in.From]
		p.active, p.heard, p.silent, p.gone, p.lastSeen = in.Active, true, false, false, now
		delete(m.dead, in.From)
		p.explicit, p.exclude = in.Explicit, in.Exclude
		r.maxSeen = max(r.maxSeen, in.Active)
		r.round = max(r.round, in.Ballot.Round, in.AccBallot.Round)
	}
	switch in.Kind {
	case Hello:
		out = append(out, m.msg(Status, in.From, in.Epoch))
	case Prepare:
		if !m.Running() || m.run.epoch != in.Epoch || !m.sameCall(in) {
			out = append(out, m.msg(Status, in.From, in.Epoch))
			break
		}
		if in.Ballot.Rank < m.cfg.Rank {
			r.lowerAt = now
		}
		a := m.acceptor(in.Epoch)
		if a.promised.Less(in.Ballot) || a.promised == in.Ballot {
			a.promised = in.Ballot
			if r.prop != nil && r.prop.ballot.Less(in.Ballot) {
				r.prop = nil // a higher ballot is under way: serve it instead
			}
			p := m.msg(Promise, in.From, in.Epoch)
			p.Ballot, p.AccBallot, p.AccValue = in.Ballot, a.accBal, a.accVal
			out = append(out, p)
		} else {
			n := m.msg(Nack, in.From, in.Epoch)
			n.Ballot = a.promised
			out = append(out, n)
		}
	case Accept:
		if in.Value == nil {
			break
		}
		a := m.acceptor(in.Epoch)
		running := m.Running() && m.run.epoch == in.Epoch
		if running && !m.sameCall(in) || !running && a.promised.Round == 0 {
			out = append(out, m.msg(Status, in.From, in.Epoch))
			break
		}
		if a.promised.Less(in.Ballot) || a.promised == in.Ballot {
			a.promised, a.accBal, a.accVal = in.Ballot, in.Ballot, in.Value
			if r != nil && r.prop != nil && r.prop.ballot.Less(in.Ballot) {
				r.prop = nil
			}
			ok := m.msg(Accepted, in.From, in.Epoch)
			ok.Ballot = in.Ballot
			out = append(out, ok)
		} else {
			n := m.msg(Nack, in.From, in.Epoch)
			n.Ballot = a.promised
			out = append(out, n)
		}
	case Decide:
		if in.Value != nil {
			m.learn(map[int]Value{in.Epoch: *in.Value})
		}
	case Promise:
		if r != nil && r.prop != nil && r.epoch == in.Epoch && in.Ballot == r.prop.ballot && r.prop.value == nil {
			cp := in
			r.prop.promised[in.From] = &cp
		}
	case Accepted:
		if r != nil && r.prop != nil && r.epoch == in.Epoch && in.Ballot == r.prop.ballot && r.prop.value != nil {
			r.prop.accepted[in.From] = true
		}
	case Nack:
		if r != nil && r.prop != nil && r.epoch == in.Epoch && r.prop.ballot.Less(in.Ballot) {
			r.prop = nil // another coordinator's ballot is higher: follow it
		}
	}
	more, o := m.Step(now)
	return append(out, more...), o
}

// sameCall says whether the sender shrinks the way this rank does.
func (m *Machine) sameCall(in Msg) bool {
	return in.Explicit == m.run.explicit && slices.Equal(in.Exclude, m.run.exclude)
}

// Unreachable tells the machine that a message to peer failed: refused
// (its listener is gone: the process died or freed the communicator) or
// timed out (it may be slow, stopped, or cut off).
func (m *Machine) Unreachable(now time.Duration, peerRank int, refused bool) ([]Msg, *Outcome) {
	if r := m.run; r != nil && !r.done && peerRank >= 0 && peerRank < m.cfg.N {
		p := &r.peers[peerRank]
		if refused {
			p.gone = true
		} else {
			p.silent, p.silentAt = true, now
		}
	}
	return m.Step(now)
}

// majority is the quorum of an agreed shrink.
func (m *Machine) majority() int { return m.cfg.N/2 + 1 }

// Step advances the run at now: it checks for a decision and the
// deadlines, and (re)sends what the run is waiting for. The driver calls it
// every Tick.
func (m *Machine) Step(now time.Duration) ([]Msg, *Outcome) {
	r := m.run
	if r == nil || r.done {
		return nil, nil
	}
	end := func(o Outcome) ([]Msg, *Outcome) {
		r.done = true
		o.Epoch = r.epoch
		return nil, &o
	}
	me, n, t := m.cfg.Rank, m.cfg.N, m.cfg.Timeout
	// A decision for this epoch, made here or learned: the run is over,
	// unless it left this rank out while the others shrink again.
	for {
		v, ok := m.decisions[r.epoch]
		if !ok {
			break
		}
		if v.Err != "" || slices.Contains(v.Members, me) {
			return end(Outcome{Value: v})
		}
		if r.maxSeen > r.epoch {
			r.epoch, r.prop = r.maxSeen, nil
			continue
		}
		return end(Outcome{Err: m.leftOutErr()})
	}
	// Behind: the others shrink a later epoch and this one is unknown to
	// them (a shrink this rank was excluded from): join theirs.
	if r.maxSeen > r.epoch {
		if _, ok := m.decisions[r.epoch]; !ok && m.acc[r.epoch] == nil {
			r.epoch, r.prop = r.maxSeen, nil
		}
	}
	for q, p := range r.peers {
		if q != me && p.active == r.epoch && (p.explicit != r.explicit || !slices.Equal(p.exclude, r.exclude)) {
			return end(Outcome{Err: fmt.Errorf("ranks shrink differently: rank %d %s but rank %d %s; every survivor must pass the same list of excluded ranks (or none to agree)", me, describeCall(r.explicit, r.exclude), q, describeCall(p.explicit, p.exclude))})
		}
	}
	elapsed := now - r.start
	if elapsed >= Bound(t) {
		return end(Outcome{Err: fmt.Errorf("rank %d: the survivors did not agree within %v (3 × the timeout %v): %s", me, Bound(t), t, m.why())})
	}
	var out []Msg
	// Agreed shrinks need a majority that can still answer: refused ranks
	// never come back.
	if !r.explicit {
		gone := 0
		for q := range n {
			if q != me && r.peers[q].gone {
				gone++
			}
		}
		if n-gone < m.majority() {
			return end(Outcome{Err: fmt.Errorf("rank %d: only %d of the %d ranks are left (the others' communicators are gone): a shrink needs a majority (%d), so these ranks cannot go on alone", me, n-gone, n, m.majority())})
		}
	}
	// Ask every peer not heard from in this run, or silent, where it is.
	for q := range n {
		p := r.peers[q]
		if q == me || p.gone || (p.heard && !p.silent && now-p.lastSeen < 4*m.tick()) || !m.due(now, Hello, q) {
			continue
		}
		out = append(out, m.msg(Hello, q, r.epoch))
	}
	if r.prop == nil && m.mayCoordinate(now) {
		a := m.acceptor(r.epoch)
		r.round = max(r.round, a.promised.Round) + 1
		r.prop = &proposal{ballot: Ballot{Round: r.round, Rank: me}, promised: map[int]*Msg{}, accepted: map[int]bool{}}
		a.promised = r.prop.ballot
		self := m.msg(Promise, me, r.epoch)
		self.Ballot, self.AccBallot, self.AccValue = r.prop.ballot, a.accBal, a.accVal
		r.prop.promised[me] = &self
	}
	if r.prop != nil {
		more, o := m.coordinate(now)
		out = append(out, more...)
		if o != nil {
			r.done = true
			o.Epoch = r.epoch
			return out, o
		}
	}
	return out, nil
}

func (m *Machine) leftOutErr() error {
	return fmt.Errorf("rank %d was left out of the shrunk communicator: the survivors decided without it (it did not answer in time, or called shrink after they had decided)", m.cfg.Rank)
}

// why says what the run was waiting for, for the timeout's sentence.
func (m *Machine) why() string {
	r := m.run
	var silent, gone, notIn []int
	for q, p := range r.peers {
		switch {
		case q == m.cfg.Rank:
		case p.gone:
			gone = append(gone, q)
		case p.silent || !p.heard:
			silent = append(silent, q)
		case p.active != r.epoch:
			notIn = append(notIn, q)
		}
	}
	return fmt.Sprintf("ranks not answering %v, gone %v, alive but not in this shrink %v", silent, gone, notIn)
}

// mayCoordinate says whether this rank should propose: it is the lowest
// rank it finds in the shrink (explicit shrinks: the lowest listed member).
func (m *Machine) mayCoordinate(now time.Duration) bool {
	r := m.run
	me := m.cfg.Rank
	if r.explicit {
		for q := 0; q < me; q++ {
			if !slices.Contains(r.exclude, q) {
				return false
			}
		}
		return true
	}
	if now-r.lowerAt < 4*m.tick() && r.lowerAt > 0 {
		return false // a lower rank is coordinating
	}
	for q := 0; q < me; q++ {
		p := r.peers[q]
		if p.gone || p.silent {
			continue
		}
		if !p.heard || p.active == r.epoch {
			return false // not asked yet, or in the shrink: it coordinates
		}
	}
	return true
}

// coordinate runs this rank's proposal one step.
func (m *Machine) coordinate(now time.Duration) ([]Msg, *Outcome) {
	r, p := m.run, m.run.prop
	me, n, t := m.cfg.Rank, m.cfg.N, m.cfg.Timeout
	var out []Msg
	members := func() []int { // explicit: the list's complement
		var ms []int
		for q := range n {
			if !slices.Contains(r.exclude, q) {
				ms = append(ms, q)
			}
		}
		return ms
	}
	if p.value == nil {
		// Phase 1: wait for every rank to promise or be gone, until the join
		// window closes with a quorum. Past the window a rank still counts
		// as missing only on fresh evidence (it timed out, or said it is not
		// in this shrink, after the window closed): a coordinator that was
		// itself stopped must not leave out ranks it never heard.
		windowEnd := r.start + t
		fresh := true
		waiting := false
		for q := range n {
			if q == me || p.promised[q] != nil {
				continue
			}
			if r.explicit && slices.Contains(r.exclude, q) {
				continue
			}
			if pq := r.peers[q]; !pq.gone {
				waiting = true
				if !(pq.silent && pq.silentAt >= windowEnd) && !(pq.heard && !pq.silent && pq.active != r.epoch && pq.lastSeen >= windowEnd) {
					fresh = false
				}
				if m.due(now, Prepare, q) {
					pm := m.msg(Prepare, q, r.epoch)
					pm.Ballot = p.ballot
					out = append(out, pm)
				}
			}
		}
		quorum := false
		if r.explicit {
			quorum = true
			for _, q := range members() {
				if p.promised[q] == nil {
					quorum = false
				}
			}
		} else {
			quorum = len(p.promised) >= m.majority()
		}
		windowOver := now >= windowEnd
		if !quorum || (waiting && (!windowOver || !fresh)) {
			return out, nil
		}
		// Phase 1 done: the highest accepted value, or a new one.
		var v *Value
		var best Ballot
		for _, pr := range p.promised {
			if pr.AccValue != nil && (v == nil || best.Less(pr.AccBallot)) {
				v, best = pr.AccValue, pr.AccBallot
			}
		}
		if v == nil {
			nv := Value{}
			for q, pr := range p.promised {
				if pr.Explicit != r.explicit || !slices.Equal(pr.Exclude, r.exclude) {
					nv.Err = fmt.Sprintf("ranks shrink differently: rank %d %s but rank %d %s; every survivor must pass the same list of excluded ranks (or none to agree)", me, describeCall(r.explicit, r.exclude), q, describeCall(pr.Explicit, pr.Exclude))
					break
				}
			}
			if nv.Err == "" {
				if r.explicit {
					nv.Members = members()
				} else {
					nv.Agreed = true
					for q := range p.promised {
						nv.Members = append(nv.Members, q)
					}
					slices.Sort(nv.Members)
				}
				id, err := m.cfg.NewID()
				if err != nil {
					nv = Value{Err: fmt.Sprintf("rank %d, the coordinator of this shrink, could not start the new communicator's rendezvous: %v", me, err)}
				} else {
					nv.ID = id
				}
			}
			v = &nv
		}
		p.value = v
		a := m.acceptor(r.epoch)
		a.promised, a.accBal, a.accVal = p.ballot, p.ballot, v
		p.accepted[me] = true
	}
	// Phase 2: until a quorum accepted.
	need := m.majority()
	targets := make([]int, 0, len(p.promised))
	for q := range p.promised {
		targets = append(targets, q)
	}
	slices.Sort(targets)
	if r.explicit {
		targets = members()
		need = len(targets)
	}
	if len(p.accepted) >= need && (!r.explicit || allIn(targets, p.accepted)) {
		v := *p.value
		m.learn(map[int]Value{r.epoch: v})
		for q := range n {
			if q != me && !r.peers[q].gone {
				d := m.msg(Decide, q, r.epoch)
				d.Value = &v
				out = append(out, d)
			}
		}
		more, o := m.Step(now)
		return append(out, more...), o
	}
	for _, q := range targets {
		if q != me && !p.accepted[q] && !r.peers[q].gone && m.due(now, Accept, q) {
			am := m.msg(Accept, q, r.epoch)
			am.Ballot, am.Value = p.ballot, p.value
			out = append(out, am)
		}
	}
	return out, nil
}

func allIn(ranks []int, set map[int]bool) bool {
	for _, q := range ranks {
		if !set[q] {
			return false
		}
	}
	return true
}

func describeCall(explicit bool, exclude []int) string {
	if !explicit {
		return "asks the survivors to agree"
	}
	return fmt.Sprintf("excludes %v", exclude)
}
