package comm

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/debuglog"
)

// Agreement on who is gone (MPI ULFM's agree-and-shrink, over the bootstrap
// listeners, which outlive a failed communicator's links). One survivor
// coordinates each shrink: the lowest rank it believes alive. Every other
// survivor sends it a view (the ranks it found gone); the coordinator waits
// until every rank is either in some view or has reported itself, probing
// the silent ones, then decides once: the dead set and the unique id of the
// new communicator, which it roots. Every survivor gets that one decision,
// so all build the same communicator. A coordinator that dies on the way is
// found gone by the survivors, which turn to the next lowest rank; a
// survivor that dies after the decision makes the new communicator's init
// fail everywhere, and the survivors agree again (a new attempt) without it.

// Listener request kinds.
const (
	askProbe  = "probe"
	askShrink = "shrink"
	askRevoke = "revoke"
)

// serve answers a request on this rank's bootstrap listener.
func (c *Comm) serve(req bootstrap.Request) any {
	switch req.Kind {
	case askProbe:
		return c.answer()
	case askStatus:
		return c.ownView()
	case askShrink:
		var v shrinkView
		if err := json.Unmarshal(req.Body, &v); err != nil {
			return shrinkReply{Redirect: -1, Err: fmt.Sprintf("rank %d: malformed shrink request: %v", c.rank, err)}
		}
		return c.coordinate(v)
	case askRevoke:
		var from int
		if err := json.Unmarshal(req.Body, &from); err != nil || from < 0 || from >= c.nranks {
			return shrinkReply{Redirect: -1, Err: fmt.Sprintf("rank %d: malformed revoke request", c.rank)}
		}
		c.fail(revoked(c.rank, from))
		return shrinkReply{Redirect: -1}
	}
	return shrinkReply{Redirect: -1, Err: fmt.Sprintf("rank %d: unknown request %q (a gocl of another version?)", c.rank, req.Kind)}
}

// shrinkView is what a survivor tells the coordinator.
type shrinkView struct {
	Epoch   int   `json:"epoch"`   // which shrink of the communicator (each rank counts its own)
	Attempt int   `json:"attempt"` // agreements of this shrink so far (a failed init starts another)
	From    int   `json:"from"`
	Agree   bool  `json:"agree"`   // the survivors find the dead set (excludeRanksList == NULL)
	Exclude []int `json:"exclude"` // the caller's list, or (Agree) the ranks it found gone
	WaitMs  int64 `json:"wait_ms"` // how long the sender waits for the decision
}

// shrinkReply is the coordinator's answer: the decision, a lower rank to
// ask instead (it answers probes, so it coordinates), or why there is none.
type shrinkReply struct {
	Redirect int          `json:"redirect"`
	Dead     []int        `json:"dead,omitempty"`
	ID       bootstrap.ID `json:"id"`
	Err      string       `json:"err,omitempty"`
}

// shrinkSession is one agreement, on its coordinator.
type shrinkSession struct {
	mu      sync.Mutex
	views   map[int][]int // survivor -> the ranks it found gone
	arrived chan struct{} // a view came in (capacity 1)
	done    chan struct{} // closed once decided
	exclude []int         // explicit shrinks: the coordinator's own list
	dead    []int
	id      bootstrap.ID
	err     string
}

// shrinkState is a communicator's shrinks: how many it started, and the
// agreements it coordinates, by (epoch, attempt).
type shrinkState struct {
	mu       sync.Mutex
	epoch    int
	sessions map[[2]int]*shrinkSession
}

func (c *Comm) session(epoch, attempt int) *shrinkSession {
	c.shrink.mu.Lock()
	defer c.shrink.mu.Unlock()
	if c.shrink.sessions == nil {
		c.shrink.sessions = map[[2]int]*shrinkSession{}
	}
	k := [2]int{epoch, attempt}
	s := c.shrink.sessions[k]
	if s == nil {
		s = &shrinkSession{views: map[int][]int{}, arrived: make(chan struct{}, 1), done: make(chan struct{})}
		c.shrink.sessions[k] = s
	}
	return s
}

// coordinate takes a survivor's view and answers with the decision, once
// this rank (the coordinator) has made it, or within the sender's wait.
func (c *Comm) coordinate(v shrinkView) shrinkReply {
	no := func(format string, a ...any) shrinkReply {
		return shrinkReply{Redirect: -1, Err: fmt.Sprintf(format, a...)}
	}
	if v.From < 0 || v.From >= c.nranks || v.From == c.rank {
		return no("rank %d: shrink request from rank %d, which is not a peer", c.rank, v.From)
	}
	if v.Agree {
		// The sender found every rank below this one gone. One that answers
		// coordinates instead (it is the lowest survivor), unless it is gone
		// for this rank too.
		for r := 0; r < c.rank; r++ {
			if slices.Contains(v.Exclude, r) && c.alive(r, probeWait(c.timeout)) {
				return shrinkReply{Redirect: r}
			}
		}
	}
	s := c.session(v.Epoch, v.Attempt)
	s.mu.Lock()
	s.views[v.From] = v.Exclude
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	wait := time.Duration(v.WaitMs) * time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		return no("rank %d, the coordinator of this shrink, did not decide within %v: it has not called shrink (every survivor must), or it is still waiting for a survivor that has not", c.rank, wait)
	}
	switch {
	case s.err != "":
		return no("%s", s.err)
	case slices.Contains(s.dead, v.From):
		return no("rank %d was left out of the shrunk communicator: the survivors decided without it (it did not answer, or called shrink after they had decided)", v.From)
	case !v.Agree && !slices.Equal(v.Exclude, s.exclude):
		return no("rank %d excludes ranks %v but rank %d, the lowest survivor, excludes %v: every survivor must pass the same list", v.From, v.Exclude, c.rank, s.exclude)
	}
	return shrinkReply{Redirect: -1, Dead: s.dead, ID: s.id}
}

// alive probes rank r: false when its communicator is gone (a refused
// connection) or it does not answer within wait, twice.
func (c *Comm) alive(r int, wait time.Duration) bool {
	for try := 0; try < 2; try++ {
		_, err := c.ask(r, wait)
		if err == nil {
			return true
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return false
}

// gone probes every other rank at once and returns those not alive.
func (c *Comm) gone(except []int) []int {
	wait := probeWait(c.timeout)
	dead := make([]bool, c.nranks)
	var wg sync.WaitGroup
	for r := 0; r < c.nranks; r++ {
		if r == c.rank || slices.Contains(except, r) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dead[r] = !c.alive(r, wait)
		}()
	}
	wg.Wait()
	var out []int
	for r, d := range dead {
		if d {
			out = append(out, r)
		}
	}
	return out
}

// decide runs this rank's agreement as its coordinator: explicit shrinks
// take the list as given; agreed ones wait for every rank's view or its
// absence, until deadline (zero: none).
func (c *Comm) decide(epoch, attempt int, agree bool, exclude []int, deadline time.Time) (shrinkReply, error) {
	s := c.session(epoch, attempt)
	dead := map[int]bool{}
	for _, r := range exclude {
		dead[r] = true
	}
	if agree {
		nextProbe := time.Now()
		for {
			s.mu.Lock()
			for _, view := range s.views {
				for _, r := range view {
					dead[r] = true
				}
			}
			for r := range s.views { // a rank that sent a view is alive, whoever suspected it
				delete(dead, r)
			}
			var missing []int
			for r := 0; r < c.nranks; r++ {
				if _, ok := s.views[r]; !ok && r != c.rank && !dead[r] {
					missing = append(missing, r)
				}
			}
			s.mu.Unlock()
			if len(missing) == 0 {
				break
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				debuglog.Warnf(debuglog.Init, c.rank, "shrink: ranks %v answer probes but did not call shrink in time: left out", missing)
				for _, r := range missing {
					dead[r] = true
				}
				break
			}
			if time.Now().After(nextProbe) {
				for _, r := range c.gone(complement(missing, c.nranks)) {
					dead[r] = true
				}
				nextProbe = time.Now().Add(200 * time.Millisecond)
			}
			select {
			case <-s.arrived:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	delete(dead, c.rank)
	list := make([]int, 0, len(dead))
	for r := range dead {
		list = append(list, r)
	}
	slices.Sort(list)
	id, err := newUniqueID(c.timeout)
	s.mu.Lock()
	s.dead, s.exclude, s.id = list, exclude, id
	if err != nil {
		s.err = fmt.Sprintf("rank %d, the coordinator of this shrink, could not start the new communicator's rendezvous: %v", c.rank, err)
	}
	s.mu.Unlock()
	close(s.done)
	if err != nil {
		return shrinkReply{}, err
	}
	return shrinkReply{Redirect: -1, Dead: list, ID: id}, nil
}

// complement is every rank of n not in keep.
func complement(keep []int, n int) []int {
	var out []int
	for r := 0; r < n; r++ {
		if !slices.Contains(keep, r) {
			out = append(out, r)
		}
	}
	return out
}

// agreeOn returns the decision of shrink epoch's attempt: from this rank
// when it coordinates, else from the coordinator.
func (c *Comm) agreeOn(epoch, attempt int, agree bool, exclude []int, deadline time.Time) (shrinkReply, error) {
	suspects := slices.Clone(exclude)
	if agree {
		suspects = c.gone(nil)
	}
	for {
		coord := 0
		for slices.Contains(suspects, coord) {
			coord++
		}
		if coord == c.rank {
			return c.decide(epoch, attempt, agree, suspects, deadline)
		}
		wait := time.Hour // no timeout: wait as long as it takes
		if !deadline.IsZero() {
			wait = time.Until(deadline) + probeWait(c.timeout) // the coordinator's own wait ends first
		}
		var reply shrinkReply
		v := shrinkView{Epoch: epoch, Attempt: attempt, From: c.rank, Agree: agree, Exclude: suspects, WaitMs: wait.Milliseconds()}
		err := bootstrap.Ask(c.peers[coord].Addr, c.secret, time.Now().Add(wait+time.Second),
			bootstrap.NewRequest(askShrink, v), &reply)
		switch {
		case err != nil && !agree:
			return shrinkReply{}, fmt.Errorf("rank %d, the lowest rank not excluded, coordinates the shrink but cannot be reached (%v): exclude it too", coord, err)
		case err != nil:
			debuglog.Warnf(debuglog.Init, c.rank, "shrink: coordinator rank %d is gone (%v): asking the next survivor", coord, err)
			suspects = append(suspects, coord)
			slices.Sort(suspects)
		case reply.Redirect >= 0:
			suspects = slices.DeleteFunc(suspects, func(r int) bool { return r == reply.Redirect })
		case reply.Err != "":
			return shrinkReply{}, errors.New(reply.Err)
		default:
			return reply, nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return shrinkReply{}, fmt.Errorf("rank %d: the survivors did not agree within the timeout (last coordinator tried: rank %d)", c.rank, coord)
		}
	}
}
