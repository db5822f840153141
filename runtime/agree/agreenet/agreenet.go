// Package agreenet runs runtime/agree's Machine over the ranks' bootstrap
// listeners: the I/O of a shrink's agreement, as etcd's rafthttp is raft's.
//
// The survivors' agreement of a shrink (MPI ULFM's agree-and-shrink) runs
// over the bootstrap listeners, which outlive a failed communicator's links.
// Its logic is the Machine (single-decree Paxos per shrink, proved in a
// deterministic simulator); a Node is its I/O for one communicator: each
// message is one authenticated, sealed request to the peer's listener, whose
// replies come back on the same connection; a refused connection tells the
// machine the peer is gone, a timed-out one that it is silent.
package agreenet

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/agree"
	"gocl/runtime/bootstrap"
	"gocl/runtime/debuglog"
)

// Ask is the listener request that carries an agreement message; its
// answer is the replies (Node.Receive).
const Ask = "agree"

// Member is a communicator as its agreement sees it.
type Member interface {
	Rank() int
	Ranks() int
	Addr(p int) string // p's bootstrap listener
	Secret() []byte    // the job's, for the listeners' handshake
	// Window is the agreement's join window: the communicator's timeout
	// (0: none, then DefaultWindow bounds it all the same).
	Window() time.Duration
	// NewRoot starts a rendezvous root for this rank's proposal, to live
	// as long as the agreement can.
	NewRoot(lifetime time.Duration) (bootstrap.ID, error)
}

// DefaultWindow is the join window when the communicator has no timeout
// (GOCL_TIMEOUT=0). A variable: tests shorten it.
var DefaultWindow = agree.DefaultTimeout

// Test hooks (nil outside tests): drop an outgoing message; see (and
// change) a rank's outcome before its shrink goes on. Atomic: a message of
// a test's agreement may still be on its way when the test removes them.
var (
	DropHook    atomic.Pointer[func(m agree.Msg) bool]
	OutcomeHook atomic.Pointer[func(rank int, o *agree.Outcome)]
)

// Node is one rank's agreement machine and the shrink waiting on it.
type Node struct {
	member  Member
	mu      sync.Mutex
	m       *agree.Machine
	base    time.Time          // the machine's clock starts here
	outcome chan agree.Outcome // the running agreement's result
	made    []bootstrap.ID     // roots this rank started for its proposals
}

// New is member's node; its machine starts with the first message, verdict
// or agreement.
func New(member Member) *Node { return &Node{member: member} }

// machine is the node's machine, made on first use (under n.mu).
func (n *Node) machine() *agree.Machine {
	if n.m == nil {
		n.base = time.Now()
		window := n.member.Window()
		if window <= 0 {
			window = DefaultWindow
		}
		var m *agree.Machine
		m = agree.New(agree.Config{Rank: n.member.Rank(), N: n.member.Ranks(), Timeout: window, NewID: func() ([]byte, error) {
			// The new root lives as long as the agreement can, and is withdrawn
			// when another value is decided (Agree).
			id, err := n.member.NewRoot(agree.Bound(m.Timeout()))
			if err == nil {
				n.made = append(n.made, id)
			}
			return id[:], err
		}})
		n.m = m
	}
	return n.m
}

func (n *Node) now() time.Duration { return time.Since(n.base) }

// step takes the machine's output (under n.mu): the outcome goes to the
// waiting agreement, the messages out to their ranks, except those
// addressed to replyTo, returned (the answer to its request).
func (n *Node) step(out []agree.Msg, o *agree.Outcome, replyTo int) []agree.Msg {
	if o != nil && n.outcome != nil {
		select {
		case n.outcome <- *o:
		default:
		}
	}
	var replies []agree.Msg
	for _, m := range out {
		if m.To == replyTo {
			replies = append(replies, m)
			continue
		}
		go n.send(m)
	}
	return replies
}

// Receive handles a peer's message (an Ask request's body) and returns the
// replies to it; a malformed one gets none.
func (n *Node) Receive(body json.RawMessage) []agree.Msg {
	var m agree.Msg
	self := n.member.Rank()
	if err := json.Unmarshal(body, &m); err != nil || m.From < 0 || m.From >= n.member.Ranks() || m.From == self || m.To != self {
		return []agree.Msg{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out, o := n.machine().Receive(n.now(), m)
	replies := n.step(out, o, m.From)
	if replies == nil {
		replies = []agree.Msg{}
	}
	return replies
}

// Dead tells the machine that rank p is gone (a heartbeat's verdict): the
// agreement does not wait for it.
func (n *Node) Dead(p int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out, o := n.machine().Dead(n.now(), p)
	n.step(out, o, -1)
}

// send sends m and feeds the replies, or the failure, back in.
func (n *Node) send(m agree.Msg) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	if drop := DropHook.Load(); drop != nil && (*drop)(m) {
		return
	}
	var replies []agree.Msg
	wait := bootstrap.ProbeWait(n.m.Timeout()) // n.m was made before any send started, and its timeout never changes
	err := bootstrap.Ask(n.member.Addr(m.To), n.member.Secret(), time.Now().Add(wait), bootstrap.NewRequest(Ask, m), &replies)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		refused := errors.Is(err, syscall.ECONNREFUSED)
		out, o := n.m.Unreachable(n.now(), m.To, refused)
		n.step(out, o, -1)
		return
	}
	self := n.member.Rank()
	for _, r := range replies {
		if r.From != m.To || r.To != self {
			continue // not from the peer asked: ignore it
		}
		out, o := n.m.Receive(n.now(), r)
		n.step(out, o, -1)
	}
}

// Agree runs this rank's side of one agreement: agreed (exclude nil,
// explicit false) or on the caller's exclude list. It returns the decision
// (or the error every rank returns) within agree.Bound of the window.
func (n *Node) Agree(explicit bool, exclude []int) (agree.Outcome, error) {
	n.mu.Lock()
	m := n.machine()
	ch := make(chan agree.Outcome, 1)
	n.outcome = ch
	out, o := m.Start(n.now(), explicit, exclude)
	n.step(out, o, -1)
	tick := m.Tick()
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.outcome = nil
		n.mu.Unlock()
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	self := n.member.Rank()
	for {
		select {
		case o := <-ch:
			if see := OutcomeHook.Load(); see != nil {
				(*see)(self, &o)
			}
			n.mu.Lock()
			for _, id := range n.made {
				if o.Err != nil || string(o.Value.ID) != string(id[:]) {
					bootstrap.StopRoot(id) // a proposal of ours nobody will join
				}
			}
			n.made = nil
			n.mu.Unlock()
			if o.Err != nil {
				return o, o.Err
			}
			if o.Value.Err != "" {
				return o, errors.New(o.Value.Err)
			}
			debuglog.Infof(debuglog.Init, self, "shrink epoch %d: decided members %v", o.Epoch, o.Value.Members)
			return o, nil
		case <-t.C:
			n.mu.Lock()
			out, o := m.Step(n.now())
			n.step(out, o, -1)
			n.mu.Unlock()
		}
	}
}
