// Package tune picks the algorithm and protocol of each call from a cost
// model: every candidate's time is estimated as messages × latency + bytes ÷
// bandwidth (+ bytes reduced ÷ reduction speed), with latency and bandwidth
// per transport and protocol taken from the table in costs.go, and the
// cheapest candidate the settings allow wins. GOCL_ALGO and GOCL_PROTO
// (NCCL_ALGO, NCCL_PROTO as fallbacks) restrict the candidates with NCCL's
// syntax, parsed in settings.go.
//
// Every rank must pick the same algorithm, so the model's inputs are the
// same on every rank: the call, the number of ranks, and the set of
// transports the communicator uses (exchanged at init by the communicator),
// never a rank's own links alone.
package tune

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"gocl/runtime/wire"
)

// Algo is an algorithm family.
type Algo uint8

const (
	Ring            Algo = iota // chunked, pipelined ring or chain: bandwidth-optimal
	Tree                        // NCCL's double binary tree: log2(n) latency
	Direct                      // one-shot: every rank talks to every rank at once
	HalvingDoubling             // recursive halving-doubling: log2(n) steps, ring's bytes; 2^k ranks (allgather: any n, Bruck's)
	Hier                        // hierarchical: inside each host, then between hosts (hier.go)
	numAlgos
)

var algoNames = [...]string{"ring", "tree", "direct", "halvingdoubling", "hier"}

func (a Algo) String() string { return algoNames[a] }

// Proto is a wire protocol, as in NCCL: Simple moves large chunks; LL
// (low latency) sends a flag with every 8-byte word, so a receiver polls one
// word instead of waiting for a whole frame, at half the bandwidth. LL128 is
// NCCL's GPU-only middle ground, accepted in settings but never offered.
type Proto uint8

const (
	Simple Proto = iota
	LL
	LL128
	numProtos
)

var protoNames = [...]string{"simple", "ll", "ll128"}

func (p Proto) String() string { return [...]string{"Simple", "LL", "LL128"}[p] }

// Choice is what a call runs with.
type Choice struct {
	Algo  Algo
	Proto Proto
}

func (c Choice) String() string { return c.Algo.String() + "/" + c.Proto.String() }

// candidates lists the algorithms gocl has for each collective, fewest
// steps first: a tie in the model goes to the earlier one.
func candidates(coll wire.Coll) []Algo {
	switch coll {
	case wire.AllReduce:
		return []Algo{Direct, HalvingDoubling, Tree, Hier, Ring}
	case wire.Broadcast, wire.Reduce:
		return []Algo{Direct, Tree, Ring}
	case wire.AllGather, wire.ReduceScatter:
		return []Algo{Direct, HalvingDoubling, Ring}
	}
	return []Algo{Direct} // alltoall, gather, scatter: pairwise
}

// Plan is one communicator's tuner: the settings, the cost of its links, and
// the table of choices it computed once at init.
type Plan struct {
	Settings
	n      int
	crowd  int             // ranks per core on the most crowded host, rounded up (above 1: they share cores)
	costs  [numProtos]Cost // per protocol; Beta 0: the protocol is not offered
	chunk  int
	choice [numColls][numSizes]Choice

	transports []string
	hosts      hosts // set by SetHosts (hier.go)
	net        Net   // set by SetNet (net.go)
}

// sizes of the precomputed table: 1 B, 2 B, 4 B, ..., 2^numSizes-1 B; larger
// calls use the last row, where the model's choice no longer changes.
const numSizes = 40

const numColls = int(wire.SendRecv) + 1

// NewPlan builds the tuner of a communicator of n ranks whose links use the
// transports named (Link.Name: "inproc", "socket", "shm"...), cutting ring
// and tree data into chunks of chunk bytes. crowd is the ranks per core of
// the most crowded host, rounded up: above 1, ranks share cores (every rank
// must pass the same value).
func NewPlan(s Settings, n int, transports []string, chunk int, crowd int) *Plan {
	p := &Plan{Settings: s, n: n, chunk: max(chunk, 1), crowd: crowd, transports: transports}
	p.costs = p.linkCosts(transports)
	p.decideAll()
	return p
}

// decideAll fills the table of choices.
func (p *Plan) decideAll() {
	for coll := wire.AllReduce; coll < wire.SendRecv; coll++ {
		for b := range numSizes {
			p.choice[coll][b] = p.decide(coll, 1<<b)
		}
	}
}

// Pick chooses the algorithm and protocol for coll moving bytes (the size of
// the largest buffer of the call).
func (p *Plan) Pick(coll wire.Coll, bytes int) Choice {
	if p == nil || coll == 0 || coll >= wire.SendRecv {
		return Choice{Algo: Direct}
	}
	b := 0
	if bytes > 1 {
		b = min(bits.Len64(uint64(bytes-1)), numSizes-1) // smallest 2^b >= bytes
	}
	return p.choice[coll][b]
}

// allowed reports whether a may run coll on this communicator.
func (p *Plan) allowed(coll wire.Coll, a Algo, bytes int) bool {
	switch a {
	case HalvingDoubling: // at other n allgather has Bruck's, reduce-scatter folds first; allreduce needs 2^k
		return p.n&(p.n-1) == 0 || coll == wire.AllGather || coll == wire.ReduceScatter
	case Hier:
		return p.hosts.hier() && (bytes > p.DirectMax || p.Algos.only(coll, int(Hier)))
	case Direct:
		cap := p.DirectMax
		if coll == wire.AllGather || coll == wire.ReduceScatter {
			cap *= p.n // direct moves one block per peer: cap the block
		}
		return bytes <= cap || p.Algos.only(coll, int(Direct))
	}
	return true
}

// unmeasured: a choice the model is not trusted with unless GOCL_ALGO asks
// for it alone. Halving-doubling at n not a power of two (Bruck's
// allgather, the folded reduce-scatter) on a crowded host, where each of
// its rounds waits for a wake-up: there the one-shot and the ring measured
// as fast or faster where the model, fitted on all-reduce, says Bruck
// (bench/SCALE.md, "Bruck's allgather").
func (p *Plan) unmeasured(coll wire.Coll, a Algo) bool {
	return a == HalvingDoubling && p.n&(p.n-1) != 0 && p.crowd > 1 && !p.Algos.only(coll, int(a))
}

// decide runs the model for one size.
func (p *Plan) decide(coll wire.Coll, bytes int) Choice {
	best, bestT := Choice{Algo: Direct}, math.Inf(1)
	pick := func(strict bool) {
		for _, a := range candidates(coll) {
			if (strict && !p.Algos.has(coll, int(a))) || !p.allowed(coll, a, bytes) || p.unmeasured(coll, a) {
				continue
			}
			for pr := range numProtos {
				if p.costs[pr].Beta == 0 || (strict && !p.Protos.has(coll, int(pr))) {
					continue
				}
				if t := p.Estimate(coll, a, pr, bytes); t < bestT {
					best, bestT = Choice{a, pr}, t
				}
			}
		}
	}
	pick(true)
	if math.IsInf(bestT, 1) { // the settings leave nothing gocl has here: use the model alone
		pick(false)
	}
	return best
}

// WakeUs is what each wake-up of an algorithm costs on a crowded host
// (ranks outnumber cores), on top of the link's latency: the rank that a
// step waits for must first be given a core. Counted up to the one-shot's
// cap (DirectMax), where latency decides the choice (wakes counts them;
// bench/TUNING.md).
const WakeUs = 3

// Estimate is the model's time in µs for coll moving bytes with a and pr.
// On a crowded host, up to DirectMax, each step adds WakeUs and every byte
// costs crowd times as much: the ranks sharing a core copy and reduce in
// turn (bench/TUNING.md).
func (p *Plan) Estimate(coll wire.Coll, a Algo, pr Proto, bytes int) float64 {
	if p.n == 1 {
		return 0
	}
	if p.crowd > 1 && bytes <= p.DirectMax { // where latency decides; large calls keep the idle host's model
		return p.estimate(coll, a, pr, bytes, float64(p.crowd)) + WakeUs*p.wakes(coll, a, bytes)
	}
	return p.estimate(coll, a, pr, bytes, 1)
}

// wakes is how many times a rank is woken before a call with a finishes
// on a crowded host, fitted to gocl-perf all_reduce over 8 to 64 processes
// on 2 cores (bench/TUNING.md, "Wake-ups"): once per dependent step of a
// chain (ring, halving-doubling); the tree's all-reduce 3 per level (a
// parent waits for two children on the way up); the one-shot about once
// per two peers it hears from (the frames of peers that ran meanwhile come
// together), except a broadcast's, which hear only from the root.
func (p *Plan) wakes(coll wire.Coll, a Algo, bytes int) float64 {
	switch {
	case a == Direct && coll != wire.Broadcast:
		return math.Max(1, float64(p.n-1)/2)
	case a == Tree && coll == wire.AllReduce:
		return 1.5 * p.steps(coll, a, bytes) // 3 per level of steps' 2 (up and down)
	}
	return p.steps(coll, a, bytes)
}

// steps is how many times a rank waits for another before a call with a
// can finish (the chain of dependent steps).
func (p *Plan) steps(coll wire.Coll, a Algo, bytes int) float64 {
	n := float64(p.n)
	chunks := math.Max(1, math.Ceil(float64(bytes)/n/float64(p.chunk)))
	lg := math.Ceil(math.Log2(n))
	depth := math.Ceil(math.Log2(n + 1))
	all := coll == wire.AllReduce
	switch a {
	case Ring:
		if all {
			return 2*(n-1) + chunks - 1
		}
		return n - 1 + chunks - 1
	case Tree:
		if all {
			return 2 * depth
		}
		return depth
	case HalvingDoubling:
		if all {
			return 2 * lg
		}
		return lg
	case Hier:
		return p.hierSteps(bytes)
	}
	return 1 // Direct and the pairwise collectives: one exchange
}

// estimate is the model's time with every byte costing share times its
// idle cost.
func (p *Plan) estimate(coll wire.Coll, a Algo, pr Proto, bytes int, share float64) float64 {
	n := float64(p.n)
	c := p.costs[pr]
	S := float64(bytes)
	// µs to move x bytes as chunked messages, and to reduce x bytes
	msgs := func(x float64) float64 { return math.Max(1, math.Ceil(x/float64(p.chunk))) }
	move := func(x float64) float64 { return msgs(x)*c.Alpha + share*x/(c.Beta*1e3) }
	red := func(x float64) float64 { return share * x / (ReduceGBs * 1e3) }
	lg := math.Ceil(math.Log2(n))
	depth := math.Ceil(math.Log2(n + 1)) // of the trees
	switch coll {
	case wire.AllReduce:
		switch a {
		case Ring:
			return 2*(n-1)*move(S/n) + (n-1)*red(S/n)
		case Tree:
			return 2*depth*c.Alpha + 2*move(S) + red(S)
		case Direct:
			return (n-1)*move(S) + (n-1)*red(S)
		case HalvingDoubling:
			return 2*lg*c.Alpha + 2*move((n-1)/n*S) + red((n-1)/n*S)
		case Hier:
			return p.hierEstimate(pr, S, share)
		}
	case wire.Broadcast, wire.Reduce:
		r := 0.0
		if coll == wire.Reduce {
			r = red(S)
		}
		switch a {
		case Ring:
			return (n-1)*c.Alpha + move(S) + r
		case Tree:
			return depth*c.Alpha + move(S) + r
		case Direct:
			return (n-1)*move(S) + (n-1)*r
		}
	case wire.AllGather, wire.ReduceScatter:
		r := 0.0
		if coll == wire.ReduceScatter {
			r = red((n - 1) / n * S)
		}
		switch a {
		case Ring:
			return (n-1)*move(S/n) + r
		case Direct:
			return (n-1)*move(S/n) + r
		case HalvingDoubling:
			if coll == wire.ReduceScatter && p.n&(p.n-1) != 0 {
				// folded pairs first (algo.ReduceScatterHalvingDoubling): a step each
				// way more, the whole buffer in and a block back, halving on pof2
				pof2 := float64(uint(1) << (bits.Len(uint(p.n)) - 1))
				return (math.Log2(pof2)+2)*c.Alpha + move(S) + move((pof2-1)/pof2*S) + move(S/n) + red(S) + r
			}
			return lg*c.Alpha + move((n-1)/n*S) + r
		}
	}
	return (n - 1) * move(S/n) // pairwise collectives: one block per peer
}

// Table renders the choices for sizes 4 B ... 64 MiB and every collective
// with a choice, with the model's µs for each candidate: what
// GOCL_DEBUG_SUBSYS=TUNING prints at init.
func (p *Plan) Table() []string {
	var lines []string
	crowd := ""
	if p.crowd > 1 {
		crowd = fmt.Sprintf(", %d ranks per core (+%d µs per wake-up: each dependent step, each peer of the one-shot; bytes at 1/%d the speed)", p.crowd, WakeUs, p.crowd)
	}
	net := ""
	if p.net.GBs > 0 {
		net = ", link between hosts " + p.net.String()
	}
	lines = append(lines, fmt.Sprintf("tuner: %d ranks%s, links %s (runtime/tune/costs.txt%s)%s, chunk %d B, direct up to %d B; %s",
		p.n, p.hosts, p.describeCosts(), net, crowd, p.chunk, p.DirectMax, p.Settings))
	for coll := wire.AllReduce; coll < wire.SendRecv; coll++ {
		cands := candidates(coll)
		if len(cands) == 1 {
			continue
		}
		head := fmt.Sprintf("%-14s %10s  %-22s", coll, "bytes", "choice")
		for _, a := range cands {
			head += fmt.Sprintf(" %16s", a)
		}
		lines = append(lines, head)
		for b := 2; b <= 26; b += 3 {
			ch := p.choice[coll][b]
			row := fmt.Sprintf("%-14s %10d  %-22s", "", 1<<b, ch)
			for _, a := range cands {
				cell := "-"
				if p.allowed(coll, a, 1<<b) {
					cell = fmt.Sprintf("%.1f", p.Estimate(coll, a, ch.Proto, 1<<b))
				}
				row += fmt.Sprintf(" %16s", cell)
			}
			lines = append(lines, row)
		}
	}
	return lines
}

func (p *Plan) describeCosts() string {
	var parts []string
	for pr := range numProtos {
		if c := p.costs[pr]; c.Beta > 0 {
			parts = append(parts, fmt.Sprintf("%s/%s %.2g µs + bytes at %.3g GB/s", c.Transport, pr, c.Alpha, c.Beta))
		}
	}
	return strings.Join(parts, ", ")
}
