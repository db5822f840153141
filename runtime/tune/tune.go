// Package tune picks the algorithm for a call. Today the model is a size
// threshold between two algorithms; the shared-memory transport and trees
// will bring a cost model (collective, bytes, topology) -> algorithm,
// protocol, channels, and this is where it goes.
package tune

import (
	"strings"

	"gocl/runtime/config"
	"gocl/runtime/wire"
)

// Algo is an algorithm family.
type Algo int

const (
	Ring   Algo = iota // chunked, pipelined ring or chain: bandwidth-optimal
	Direct             // every rank talks to every rank at once: latency-optimal
)

func (a Algo) String() string { return [...]string{"ring", "direct"}[a] }

// Plan is the tuner's configuration, read once per communicator.
type Plan struct {
	Force           string // GOCL_ALGO
	DirectThreshold int    // bytes
}

// FromConfig reads the plan from GOCL_ALGO and GOCL_DIRECT_THRESHOLD.
func FromConfig() Plan {
	return Plan{
		Force:           strings.ToLower(strings.TrimSpace(config.String("ALGO"))),
		DirectThreshold: config.IntOr("DIRECT_THRESHOLD", 32768),
	}
}

// Pick chooses the algorithm for coll moving bytes in total (the size of the
// largest buffer of the call). Collectives without a ring
// form (alltoall, gather, scatter) are always direct.
func (p Plan) Pick(coll wire.Coll, bytes int) Algo {
	switch coll {
	case wire.AlltoAll, wire.Gather, wire.Scatter, wire.SendRecv:
		return Direct
	}
	switch p.Force {
	case "ring":
		return Ring
	case "direct":
		return Direct
	}
	if bytes <= p.DirectThreshold {
		return Direct
	}
	return Ring
}
