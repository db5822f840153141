package comm

import (
	"fmt"

	"gocl/runtime/bootstrap"
)

// hostGroups lists the ranks of each host (hosts in order of their lowest
// rank, ranks in rank order), from the host identities every rank got from
// the bootstrap, so every rank computes the same lists. nil when the hosts
// have different numbers of ranks: the hierarchical all-reduce needs the
// same number on each (local rank l of every host forms one cross-host ring).
func hostGroups(peers []bootstrap.PeerInfo) [][]int {
	index := map[string]int{}
	var groups [][]int
	for r, p := range peers {
		h, ok := index[p.Host]
		if !ok {
			h = len(groups)
			index[p.Host] = h
			groups = append(groups, nil)
		}
		groups[h] = append(groups[h], r)
	}
	for _, g := range groups {
		if len(g) != len(groups[0]) {
			return nil
		}
	}
	return groups
}

// tuneHosts tells the tuner how the ranks sit on hosts.
func (c *Comm) tuneHosts() {
	perHost := 0
	if c.hosts != nil {
		perHost = len(c.hosts[0])
	}
	c.plan.SetHosts(c.nnodes, perHost)
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
