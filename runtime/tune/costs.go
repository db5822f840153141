package tune

// Cost is what one message costs on a transport with a protocol: Alpha µs
// of latency (the wake-up and hand-off of one frame) plus its bytes at Beta
// GB/s.
type Cost struct {
	Transport string
	Proto     Proto
	Alpha     float64 // µs per message
	Beta      float64 // GB/s
}

// Costs seeds the model. Alpha and Beta of inproc and socket come from
// `go test -bench AllReduce ./runtime/comm` with 2 ranks on a 2-core x86 VM
// (8 B calls for Alpha; 16 MiB for Beta, less the reduction), rounded; the
// shm rows are estimates for a shared-memory FIFO (spin wake-ups; LL at half
// the bandwidth). A transport missing here costs like "socket"; a transport
// offers a protocol only if it has a row for it.
var Costs = []Cost{
	{"inproc", Simple, 10, 4},
	{"socket", Simple, 30, 1},
	{"shm", Simple, 2, 6},
	{"shm", LL, 0.5, 3},
}

// ReduceGBs is the speed of the reduction kernels (bytes of output per
// second, in GB/s) on one core.
var ReduceGBs = 8.0

// linkCosts is, per protocol, the cost of the slowest of the transports
// (the largest latency and the smallest bandwidth), since every algorithm
// waits for its slowest link. A protocol is offered only when every
// transport has it.
func linkCosts(transports []string) [numProtos]Cost {
	var out [numProtos]Cost
	if len(transports) == 0 {
		transports = []string{"inproc"}
	}
	for pr := range numProtos {
		for i, t := range transports {
			c, ok := lookupCost(t, pr)
			if !ok {
				out[pr] = Cost{}
				break
			}
			if i == 0 {
				out[pr] = c
				continue
			}
			out[pr].Alpha = max(out[pr].Alpha, c.Alpha)
			out[pr].Beta = min(out[pr].Beta, c.Beta)
			out[pr].Transport += "+" + t
		}
	}
	return out
}

func lookupCost(transport string, pr Proto) (Cost, bool) {
	known := false
	for _, c := range Costs {
		if c.Transport == transport {
			known = true
			if c.Proto == pr {
				return c, true
			}
		}
	}
	if !known && transport != "socket" {
		c, ok := lookupCost("socket", pr)
		c.Transport = transport
		return c, ok
	}
	return Cost{}, false
}
