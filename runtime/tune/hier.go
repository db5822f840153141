package tune

import (
	"fmt"
	"math"
	"slices"
)

// hosts is how a communicator's ranks sit on hosts: the hierarchical
// all-reduce (Hier) needs more than one host and the same number of ranks,
// more than one, on each.
type hosts struct {
	n, perHost int // perHost 0: hosts have different numbers of ranks
}

func (h hosts) hier() bool { return h.n > 1 && h.perHost > 1 }

func (h hosts) String() string {
	switch {
	case h.n <= 1:
		return ""
	case h.perHost == 0:
		return fmt.Sprintf(", %d hosts with unequal ranks (no hier)", h.n)
	}
	return fmt.Sprintf(", %d hosts x %d ranks", h.n, h.perHost)
}

// SetHosts tells the tuner that the ranks sit on n hosts with perHost ranks
// each (0: unequal), from the host identities every rank exchanged at init,
// so every rank passes the same values, and redoes the table of choices.
func (p *Plan) SetHosts(n, perHost int) {
	p.hosts = hosts{n, perHost}
	p.decideAll()
}

// intraCosts is, per protocol, the cost of the links inside a host: the
// slowest of the transports other than socket (the socket is what joins
// hosts), or of all of them when only sockets are used.
func (p *Plan) intraCosts(pr Proto) Cost {
	inside := slices.DeleteFunc(slices.Clone(p.transports), func(t string) bool { return t == "socket" })
	if len(inside) == 0 {
		return p.costs[pr]
	}
	c := p.linkCosts(inside)[pr]
	if c.Beta == 0 {
		return p.costs[pr]
	}
	return c
}

// hierEstimate is the model's time in µs for the hierarchical all-reduce
// of S bytes: a ring reduce-scatter and all-gather of the host's L ranks
// over the links inside it, and between them a ring all-reduce of each
// rank's S/L share across the H hosts, over the slowest links. The local
// ranks run their inter-host rings at once.
func (p *Plan) hierEstimate(pr Proto, S, share float64) float64 {
	L, H := float64(p.hosts.perHost), float64(p.hosts.n)
	move := func(c Cost, x float64) float64 {
		return math.Max(1, math.Ceil(x/float64(p.chunk)))*c.Alpha + share*x/(c.Beta*1e3)
	}
	red := func(x float64) float64 { return share * x / (ReduceGBs * 1e3) }
	inside := 2*(L-1)*move(p.intraCosts(pr), S/L) + (L-1)*red(S/L)
	between := 2*(H-1)*move(p.costs[pr], S/(L*H)) + (H-1)*red(S/(L*H))
	return inside + between
}

// hierSteps is the hierarchical all-reduce's chain of dependent steps.
func (p *Plan) hierSteps(bytes int) float64 {
	L, H := float64(p.hosts.perHost), float64(p.hosts.n)
	chunks := math.Max(1, math.Ceil(float64(bytes)/L/float64(p.chunk)))
	return 2*(L-1) + 2*(H-1) + chunks - 1
}
