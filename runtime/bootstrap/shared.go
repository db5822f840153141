package bootstrap

import (
	"sync"
	"time"

	"gocl/runtime/status"
)

// The ranks of one process in one rendezvous share one copy of the rank
// table: the first of them to join opens a listener for it (PeerInfo.Boot)
// and takes it in the tree (table.go); the others join without one and
// take that copy here. So a process holding many ranks
// (Communicator.local, InitAll) opens one listener, receives and decodes
// the table once, and keeps one copy. The table is read-only from then on.
// Every rank of the process registers before it joins the root, and the
// root answers once all have joined, so all are registered before the copy
// comes: the entry lives until the last of them has left.

type sharedTable struct {
	ready  chan struct{} // closed when peers or err is set
	once   sync.Once
	peers  []PeerInfo
	err    error
	users  int // the process's ranks registered and not yet gone
	leader int // the rank that takes the table for the process
}

// sharedKey names one process's copy: the rendezvous and the process
// (one process here, but a test plays several).
type sharedKey struct {
	id   ID
	proc string
}

var (
	sharedMu sync.Mutex
	shared   = map[sharedKey]*sharedTable{}
)

// shareTable registers rank self with its process's copy of the table of
// k; it leads (opens the listener, takes the table) when it is the first.
// Each caller calls leave once done with it.
func shareTable(k sharedKey, self int) (s *sharedTable, lead bool) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s = shared[k]
	if s == nil {
		s = &sharedTable{ready: make(chan struct{}), leader: self}
		shared[k] = s
		lead = true
	}
	s.users++
	return s, lead
}

// publish gives the process's other ranks the table, or why it will not
// come. The leader calls it on every path; only the first call counts.
func (s *sharedTable) publish(peers []PeerInfo, err error) {
	s.once.Do(func() {
		s.peers, s.err = peers, err
		close(s.ready)
	})
}

// take waits for the leader's table until the deadline (zero: none).
func (s *sharedTable) take(self int, deadline time.Time) ([]PeerInfo, error) {
	var expire <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-s.ready:
		return s.peers, s.err
	case <-expire:
		return nil, status.Errorf(status.Timeout, "rank %d: the rank table did not reach rank %d, which takes it for this process, within the timeout (GOCL_TIMEOUT, or the timeout given at init)", self, s.leader)
	}
}

// leave drops one user; the last one forgets the table.
func (s *sharedTable) leave(k sharedKey) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s.users--; s.users == 0 && shared[k] == s {
		delete(shared, k)
	}
}
