package comm

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/host"
	"gocl/runtime/status"
	"gocl/runtime/transport/socket"
	"gocl/runtime/tune"
)

// The init exchange is one all-reduce (max) of a few words per rank, so it
// costs O(1) per rank at any N where an allgather of records cost O(N)
// (4096 in-process ranks held 2 GiB of them). A minimum travels as its
// complement; a union as one word per connector (1: some rank has a link
// of that transport).
const (
	tuneFP      = iota // fingerprint of the settings that must agree
	tuneFPNot          // its complement: max and min differ when ranks disagree
	tuneHaveNot        // 255 - the channels a rank can run
	tuneLoNot          // 255 - ... with each rank's own buffers
	tuneCrowd          // the host's ranks per core when they outnumber its cores (else 1)
	tuneNetNot         // ^ its link to other hosts in Mbit/s (0: unknown)
	tuneLinks          // one word per connector
	tuneWords   = tuneLinks + 8
)

// initAlgo runs init's exchange (setupTuner) before there is a tuner,
// connecting on first use: over the links the tuner's small all-reduces
// take next (recursive doubling at a power of two, else the tree), not a
// link to every rank, in log2(n) rounds or a tree's depth.
func (c *Comm) initAlgo() tune.Algo {
	if c.nranks&(c.nranks-1) == 0 {
		return tune.HalvingDoubling
	}
	return tune.Tree
}

// testSettings lets tests give one rank other tuning settings.
var testSettings func(rank int, s tune.Settings) tune.Settings

// setupTuner builds the communicator's tuner. Every rank must pick the same
// algorithm for a call, so the ranks first combine the transports their
// links use and a fingerprint of their tuning settings: all build the model
// from the union of transports, and ranks whose settings differ fail init
// here instead of mismatching on their first call. The same exchange
// settles the channel count (channelOffer).
func (c *Comm) setupTuner(s tune.Settings) error {
	if testSettings != nil {
		s = testSettings(c.rank, s)
	}
	seen := c.transportsSeen()
	_, from := config.Source("BUFFSIZE")
	chunkSet := from != "default" // a set chunk is kept over sockets
	fp := fnv.New64a()
	fmt.Fprintf(fp, "%s|%d|%d|%t", s, s.DirectMax, c.chunk, chunkSet)
	have, lo := c.channelOffer()
	have, lo = min(have, 255), min(lo, 255)
	crowd := 1
	if host.Oversubscribed() {
		crowd = min(host.RanksPerCore(), 255)
	}
	netMbps, netFrom := c.netRate()
	var v [tuneWords]uint64
	v[tuneFP] = fp.Sum64()
	v[tuneFPNot] = ^v[tuneFP]
	v[tuneHaveNot], v[tuneLoNot] = uint64(255-have), uint64(255-lo)
	v[tuneCrowd] = uint64(crowd)
	if netMbps > 0 {
		v[tuneNetNot] = ^uint64(netMbps)
	}
	for i := range connectors {
		if seen[connectors[i].name] {
			v[tuneLinks+i] = 1
		}
	}
	if c.nranks > 1 {
		mine := v
		if err := c.allReduceMax(v[:]); err != nil {
			return err
		}
		if v[tuneFP] != ^v[tuneFPNot] {
			return c.settingsDiffer(mine[tuneFP], s)
		}
		have, lo = 255-int(v[tuneHaveNot]), 255-int(v[tuneLoNot])
		crowd = int(v[tuneCrowd])
		if m := int(^v[tuneNetNot]); v[tuneNetNot] != 0 && m != netMbps {
			netMbps, netFrom = m, "the slowest rate of the ranks"
		}
		for i := range connectors {
			if v[tuneLinks+i] != 0 {
				seen[connectors[i].name] = true
			}
		}
	}
	c.useChannels(have, lo)
	net := tune.Net{}
	if c.nnodes > 1 && netMbps > 0 { // sockets inside a host do not cross the NIC
		net = tune.Net{GBs: float64(netMbps) / 8000, From: netFrom}
	}
	if seen["socket"] && !chunkSet { // every rank saw the same transports
		if net.GBs > 0 {
			c.chunk = socket.ChunkFor(net.GBs)
		} else {
			c.chunk = max(c.chunk, socket.Chunk)
		}
	}
	perHost := 0
	if c.hosts != nil {
		perHost = len(c.hosts[0])
	}
	c.plan = planFor(planKey{s, c.nranks, strings.Join(sortedKeys(seen), ","), c.chunk, crowd, net, c.nnodes, perHost})
	if c.rank == 0 && debuglog.Enabled(debuglog.Info, debuglog.Tuning) {
		for _, line := range c.plan.Table() {
			debuglog.Infof(debuglog.Tuning, c.rank, "%s", line)
		}
	}
	return nil
}

// planKey is everything a plan is built from: the ranks of a communicator
// build the same plan (they must pick alike).
type planKey struct {
	s          tune.Settings
	n          int
	transports string
	chunk      int
	crowd      int
	net        tune.Net
	nodes      int
	perHost    int
}

// The last plan built, read-only once built: a process's ranks of one
// communicator share it, instead of each deciding every call shape again.
var lastPlan struct {
	sync.Mutex
	key  planKey
	plan *tune.Plan
}

func planFor(k planKey) *tune.Plan {
	lastPlan.Lock()
	defer lastPlan.Unlock()
	if lastPlan.plan != nil && lastPlan.key == k {
		return lastPlan.plan
	}
	var ts []string
	if k.transports != "" {
		ts = strings.Split(k.transports, ",")
	}
	p := tune.NewPlan(k.s, k.n, ts, k.chunk, k.crowd)
	if k.net.GBs > 0 {
		p.SetNet(k.net)
	}
	p.SetHosts(k.nodes, k.perHost)
	lastPlan.key, lastPlan.plan = k, p
	return p
}

// netRate is this rank's link to other hosts in Mbit/s, and where the
// figure comes from: GOCL_NET_GBPS, else the speed its interface reports
// (0: unknown).
func (c *Comm) netRate() (int, string) {
	if v := strings.TrimSpace(config.String("NET_GBPS")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return max(1, int(f*1000)), "GOCL_NET_GBPS"
		}
	}
	if m := c.ifc.SpeedMbps(); m > 0 {
		return m, c.ifc.Name + "'s speed"
	}
	return 0, ""
}

// transportsSeen is the transports of this rank's links, or in a
// communicator connecting on first use the ones its pairs will have.
func (c *Comm) transportsSeen() map[string]bool {
	seen := map[string]bool{}
	if c.lazy {
		for name := range c.facts.firstConnectors(c.rank) {
			seen[name] = true
		}
	}
	for _, l := range c.linkList() {
		seen[l.Name()] = true
	}
	return seen
}

// settingsDiffer names, on every rank, a rank whose tuning settings differ:
// the lowest rank whose fingerprint is not the smallest, and to it the
// lowest rank whose fingerprint is (a second, rare exchange).
func (c *Comm) settingsDiffer(mine uint64, s tune.Settings) error {
	lowest := []uint64{^mine} // max of the complement: the smallest fingerprint
	if err := c.allReduceMax(lowest); err != nil {
		return err
	}
	n := uint64(c.nranks)
	v := []uint64{^n, ^n} // ^rank, max: the lowest rank of {not the smallest, the smallest}
	side := 0             // this rank's fingerprint is not the smallest
	if mine == ^lowest[0] {
		side = 1
	}
	v[side] = ^uint64(c.rank)
	if err := c.allReduceMax(v); err != nil {
		return err
	}
	other := int(^v[1-side])
	return status.Errorf(status.InvalidUsage,
		"rank %d: rank %d runs with other GOCL_ALGO, GOCL_PROTO, GOCL_DIRECT_THRESHOLD or GOCL_BUFFSIZE settings than this rank (%s, direct up to %d B, chunk %d B): set them the same on every rank",
		c.rank, other, s, s.DirectMax, c.chunk)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
