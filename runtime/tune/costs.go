package tune

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// Cost is what one message costs on a transport with a protocol: Alpha µs
// of latency (the wake-up and hand-off of one frame) plus its bytes at Beta
// GB/s.
type Cost struct {
	Transport string
	Proto     Proto
	Alpha     float64 // µs per message
	Beta      float64 // GB/s
}

// costsTable is the committed table of measured costs (see its header for
// how it was measured and why it is not measured at init).
//
//go:embed costs.txt
var costsTable string

// Costs seeds the model: the rows of costs.txt.
var Costs = mustParseCosts(costsTable)

// ParseCosts reads a table in costs.txt's format: one "transport protocol
// latency-µs bandwidth-GB/s" row per line, # comments.
func ParseCosts(text string) ([]Cost, error) {
	var out []Cost
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("costs line %d: want \"transport protocol latency-µs bandwidth-GB/s\", got %q", i+1, line)
		}
		pr := -1
		for p, name := range protoNames {
			if strings.EqualFold(f[1], name) {
				pr = p
			}
		}
		alpha, err1 := strconv.ParseFloat(f[2], 64)
		beta, err2 := strconv.ParseFloat(f[3], 64)
		if pr < 0 || err1 != nil || err2 != nil || alpha < 0 || beta <= 0 {
			return nil, fmt.Errorf("costs line %d: %q: the protocol is one of %v, the latency a number >= 0 and the bandwidth > 0", i+1, line, protoNames)
		}
		out = append(out, Cost{Transport: f[0], Proto: Proto(pr), Alpha: alpha, Beta: beta})
	}
	return out, nil
}

func mustParseCosts(text string) []Cost {
	c, err := ParseCosts(text)
	if err != nil {
		panic(err) // costs.txt is compiled in; TestCostsTable keeps it valid
	}
	return c
}

// ReduceGBs is the speed of the reduction kernels (bytes of output per
// second, in GB/s) on one core.
var ReduceGBs = 8.0

// linkCosts is, per protocol, the cost of the slowest of the transports
// (the largest latency and the smallest bandwidth), since every algorithm
// waits for its slowest link. A protocol is offered only when every
// transport has it.
func (p *Plan) linkCosts(transports []string) [numProtos]Cost {
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
			if t == "socket" {
				c = p.socketCost(c)
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
