package comm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"gocl/kernels"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/host"
	"gocl/runtime/status"
	"gocl/runtime/transport/socket"
	"gocl/runtime/tune"
)

// tuneRecord is one rank's entry in the init exchange: a hash of the
// settings that must agree, its channel offer (2 bytes), its host's ranks
// per core when they outnumber its cores (1 byte, else 0), the rate of its
// link to other hosts in Mbit/s (4 bytes, 0: unknown), then its links'
// transport names. One exchange at init, so the user's calls start at #1.
const tuneRecord = 128

// setupTuner builds the communicator's tuner. Every rank must pick the same
// algorithm for a call, so the ranks first exchange the transports their
// links use and a fingerprint of their tuning settings: all build the model
// from the union of transports, and ranks whose settings differ fail init
// here instead of mismatching on their first call. The same exchange
// settles the channel count (channelOffer).
func (c *Comm) setupTuner(s tune.Settings) error {
	seen := map[string]bool{}
	for p, name := range c.linkNames() {
		if p != c.rank && name != "" {
			seen[name] = true
		}
	}
	_, from := config.Source("BUFFSIZE")
	chunkSet := from != "default" // a set chunk is kept over sockets
	fp := fnv.New64a()
	fmt.Fprintf(fp, "%s|%d|%d|%t", s, s.DirectMax, c.chunk, chunkSet)
	mine := make([]byte, tuneRecord)
	copy(mine, fp.Sum(nil))
	have, lo := c.channelOffer()
	mine[8], mine[9] = byte(min(have, 255)), byte(min(lo, 255))
	crowd := 1
	if host.Oversubscribed() {
		crowd = min(host.RanksPerCore(), 255)
		mine[10] = byte(crowd)
	}
	netMbps, netFrom := c.netRate()
	binary.LittleEndian.PutUint32(mine[11:15], uint32(netMbps))
	copy(mine[15:], strings.Join(sortedKeys(seen), ","))
	if c.nranks > 1 {
		all := make([]byte, tuneRecord*c.nranks)
		if err := c.allGather(mine, all, tuneRecord, kernels.Uint8); err != nil {
			return err
		}
		for r := 0; r < c.nranks; r++ {
			rec := all[r*tuneRecord : (r+1)*tuneRecord]
			if !bytes.Equal(rec[:8], mine[:8]) {
				return status.Errorf(status.InvalidUsage,
					"rank %d: rank %d runs with other GOCL_ALGO, GOCL_PROTO, GOCL_DIRECT_THRESHOLD or GOCL_BUFFSIZE settings than this rank (%s, direct up to %d B, chunk %d B): set them the same on every rank",
					c.rank, r, s, s.DirectMax, c.chunk)
			}
			have, lo = min(have, int(rec[8])), min(lo, int(rec[9]))
			crowd = max(crowd, int(rec[10]))
			if v := int(binary.LittleEndian.Uint32(rec[11:15])); v > 0 && (netMbps == 0 || v < netMbps) {
				netMbps, netFrom = v, "the slowest rate of the ranks"
			}
			for _, t := range strings.Split(string(bytes.TrimRight(rec[15:], "\x00")), ",") {
				if t != "" {
					seen[t] = true
				}
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
	c.plan = tune.NewPlan(s, c.nranks, sortedKeys(seen), c.chunk, crowd)
	if net.GBs > 0 {
		c.plan.SetNet(net)
	}
	c.tuneHosts()
	if c.rank == 0 && debuglog.Enabled(debuglog.Info, debuglog.Tuning) {
		for _, line := range c.plan.Table() {
			debuglog.Infof(debuglog.Tuning, c.rank, "%s", line)
		}
	}
	return nil
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

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
