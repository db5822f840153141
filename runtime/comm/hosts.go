package comm

import (
	"fmt"
	"sync"
	"weak"

	"gocl/runtime/bootstrap"
)

// tableFacts is what every rank derives alike from the rank table: how the
// ranks sit on hosts (groups lists the ranks of each host, hosts in order of
// their lowest rank, ranks in rank order; nodeOf each rank's host) and the
// classes that decide a pair's transport.
type tableFacts struct {
	groups [][]int
	nodeOf []int32

	// The ranks by what decides a pair's transport (connectors' can):
	// a rank's pairs not yet connected use, for each class, the first
	// connector between its class and that one.
	classes []peerClass
	members []int // ranks per class
	classOf []int32
	mu      sync.Mutex
	seen    map[int32]map[string]bool // by class, computed on first ask
}

// peerClass is what connectors' can functions read of a PeerInfo.
type peerClass struct {
	proc, shm string
	noP2P     bool
}

// even is groups when every host has as many ranks, else nil: the
// hierarchical all-reduce needs the same number on each (local rank l of
// every host forms one cross-host ring).
func (f *tableFacts) even() [][]int {
	for _, g := range f.groups {
		if len(g) != len(f.groups[0]) {
			return nil
		}
	}
	return f.groups
}

// The last table's facts: the ranks of a process share one table
// (bootstrap/shared.go), so they are computed once for all of them, not
// O(N) again per rank. Weak: the cache keeps no table alive.
var lastFacts struct {
	sync.Mutex
	table weak.Pointer[bootstrap.PeerInfo]
	n     int
	facts *tableFacts
}

// factsOf is peers' facts (read-only: shared).
func factsOf(peers []bootstrap.PeerInfo) *tableFacts {
	key := weak.Make(&peers[0])
	lastFacts.Lock()
	defer lastFacts.Unlock()
	if lastFacts.table == key && lastFacts.n == len(peers) && lastFacts.facts != nil {
		return lastFacts.facts
	}
	f := &tableFacts{nodeOf: make([]int32, len(peers)), classOf: make([]int32, len(peers))}
	classIndex := map[peerClass]int32{}
	index := map[string]int{}
	for r, p := range peers {
		h, ok := index[p.Host]
		if !ok {
			h = len(f.groups)
			index[p.Host] = h
			f.groups = append(f.groups, nil)
		}
		f.groups[h] = append(f.groups[h], r)
		f.nodeOf[r] = int32(h)
		k := peerClass{p.Proc, p.Shm, p.NoP2P}
		ci, ok := classIndex[k]
		if !ok {
			ci = int32(len(f.classes))
			classIndex[k] = ci
			f.classes = append(f.classes, k)
			f.members = append(f.members, 0)
		}
		f.members[ci]++
		f.classOf[r] = ci
	}
	lastFacts.table, lastFacts.n, lastFacts.facts = key, len(peers), f
	return f
}

// firstConnectors is the transports rank r's pairs take when they connect
// (the first candidate of each): one pass over the classes, shared by the
// table's ranks. Read-only.
func (f *tableFacts) firstConnectors(r int) map[string]bool {
	k := f.classOf[r]
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.seen[k]; ok {
		return s
	}
	me := bootstrap.PeerInfo{Proc: f.classes[k].proc, Shm: f.classes[k].shm, NoP2P: f.classes[k].noP2P}
	s := map[string]bool{}
	for j, cl := range f.classes {
		if int32(j) == k && f.members[j] == 1 {
			continue // r alone: no pair within its class
		}
		p := bootstrap.PeerInfo{Proc: cl.proc, Shm: cl.shm, NoP2P: cl.noP2P}
		s[firstConnector(&me, &p).name] = true
	}
	if f.seen == nil {
		f.seen = map[int32]map[string]bool{}
	}
	f.seen[k] = s
	return s
}

// testHost lets tests place in-process ranks on fake hosts: a rank's host
// identity, process identity and shm domain gain the name it returns, so
// ranks of different fake hosts connect over sockets, as on real hosts.
var testHost func(rank int) string

// fakeHost applies testHost to what this rank publishes.
func fakeHost(me *bootstrap.PeerInfo) {
	if testHost == nil {
		return
	}
	tag := fmt.Sprintf("/fakehost:%s", testHost(me.Rank))
	me.Host += tag
	me.Proc += tag
	if me.Shm != "" {
		me.Shm += tag
	}
}
