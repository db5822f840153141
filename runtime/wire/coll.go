package wire

import "fmt"

// Coll names the operation a frame belongs to.
type Coll uint8

const (
	AllReduce Coll = iota + 1
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AlltoAll
	Gather
	Scatter
	SendRecv
)

// Size is a buffer's length as a multiple of a call's count.
type Size uint8

const (
	None   Size = iota // no buffer
	Count              // count elements
	NCount             // nranks × count elements
)

// Desc describes one collective, once: what the call path, validation,
// metrics, the flight recorder and error messages ask of it. Adding a
// collective is a row here and its algorithm files (runtime/algo) and
// candidates (runtime/tune).
type Desc struct {
	Name       string
	Send, Recv Size // the buffers' lengths (SendRecv: a send has no recv buffer, a receive no send buffer)
	Reduces    bool // takes a reduction op
	Rooted     bool // takes a root
	// Only the root reads the send buffer (RootSends) or writes the recv
	// buffer (RootRecvs): elsewhere it may be NULL, as in NCCL.
	RootSends, RootRecvs bool
	// BusFactor is nccl-tests' bus bandwidth factor on n ranks (busbw =
	// algbw × factor; cmd/gocl-perf/perf_common.h).
	BusFactor func(n int) float64
}

func one(int) float64       { return 1 }
func ring(n int) float64    { return float64(n-1) / float64(n) }
func allRing(n int) float64 { return 2 * float64(n-1) / float64(n) }

var descs = [...]Desc{
	AllReduce:     {Name: "allreduce", Send: Count, Recv: Count, Reduces: true, BusFactor: allRing},
	Broadcast:     {Name: "broadcast", Send: Count, Recv: Count, Rooted: true, RootSends: true, BusFactor: one},
	Reduce:        {Name: "reduce", Send: Count, Recv: Count, Reduces: true, Rooted: true, RootRecvs: true, BusFactor: one},
	AllGather:     {Name: "allgather", Send: Count, Recv: NCount, BusFactor: ring},
	ReduceScatter: {Name: "reducescatter", Send: NCount, Recv: Count, Reduces: true, BusFactor: ring},
	AlltoAll:      {Name: "alltoall", Send: NCount, Recv: NCount, BusFactor: ring},
	Gather:        {Name: "gather", Send: Count, Recv: NCount, Rooted: true, RootRecvs: true, BusFactor: ring},
	Scatter:       {Name: "scatter", Send: NCount, Recv: Count, Rooted: true, RootSends: true, BusFactor: ring},
	SendRecv:      {Name: "send/recv", Send: Count, Recv: Count, BusFactor: one},
}

var unknown = Desc{Name: "?", BusFactor: one}

// Desc is c's description; an unknown collective's takes nothing and needs
// no buffers.
func (c Coll) Desc() *Desc {
	if c > 0 && int(c) < len(descs) {
		return &descs[c]
	}
	return &unknown
}

func (c Coll) String() string {
	if c == 0 || int(c) < len(descs) {
		return c.Desc().Name
	}
	return fmt.Sprintf("coll(%d)", c)
}

// Elems is a buffer's element count for count and nranks.
func (s Size) Elems(count, nranks int) int {
	switch s {
	case Count:
		return count
	case NCount:
		return nranks * count
	}
	return 0
}
