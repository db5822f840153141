package tune

import "fmt"

// Net is the link between hosts as the tuner models socket links: its
// rate, and where the rate came from (GOCL_NET_GBPS, or the speed the
// ranks' interfaces report). A 1 GbE link moves 0.125 GB/s, an eighth of
// what costs.txt's socket row (sockets between processes of the measured
// VM, bound by its copies) says: with the row's rate the tuner kept the
// one-shot exchanges, which send every block to every peer, up to 32 KiB
// on 4 hosts, where a ring or halving-doubling moves half the bytes.
type Net struct {
	GBs  float64 // 10⁹ bytes per second; 0: unknown
	From string
}

func (n Net) String() string {
	if n.GBs <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.3g Gbit/s (%s)", n.GBs*8, n.From)
}

// SetNet models the socket links of a communicator that spans hosts at
// net's rate where it is below costs.txt's socket bandwidth (a faster NIC
// does not make sockets faster than the CPUs copy), and decides again.
// Every rank must pass the same rate.
func (p *Plan) SetNet(net Net) {
	p.net = net
	p.costs = p.linkCosts(p.transports)
	p.decideAll()
}

// socketCost is costs.txt's socket row, at the link's rate when that is
// slower.
func (p *Plan) socketCost(c Cost) Cost {
	if p.net.GBs > 0 && p.net.GBs < c.Beta {
		c.Beta = p.net.GBs
	}
	return c
}
