package jaxffi

import (
	"unsafe"

	"gocl/abi"
	"gocl/runtime/comm"
	"gocl/runtime/wire"
)

// request is one decoded FFI call; counts are in elements of dtype (a
// gocl datatype; data movement passes bytes as uint8).
type request struct {
	kind         int
	send, recv   unsafe.Pointer
	nsend, nrecv int
	dtype, op    int
	root         int
	perm         []int64 // ppermute: (source, destination) pairs, flattened
}

func kindName(k int) string {
	if wire.Coll(k) == wire.SendRecv {
		return "ppermute"
	}
	return map[wire.Coll]string{wire.AllReduce: "all_reduce", wire.AllGather: "all_gather",
		wire.ReduceScatter: "reduce_scatter", wire.Broadcast: "broadcast", wire.AlltoAll: "all_to_all"}[wire.Coll(k)]
}

// check validates the sizes against the world (bad arguments stay local, as
// in NCCL: peers see the call as missing).
func (r *request) check(c *comm.Comm) error {
	n, me := c.NRanks(), c.Rank()
	bad := func(format string, args ...any) error {
		return badArg("gocl.jax %s on rank %d: "+format, append([]any{kindName(r.kind), me}, args...)...)
	}
	if !r.sized(n) {
		switch wire.Coll(r.kind) {
		case wire.AllReduce, wire.Broadcast, wire.SendRecv:
			return bad("result has %d elements but the input %d: they must match", r.nrecv, r.nsend)
		case wire.AllGather:
			return bad("result has %d elements but needs world size %d × input %d", r.nrecv, n, r.nsend)
		case wire.ReduceScatter:
			return bad("input has %d elements, which is not world size %d × result %d: axis 0 must split into %d equal blocks", r.nsend, n, r.nrecv, n)
		case wire.AlltoAll:
			return bad("input has %d elements: it must split into world size %d equal blocks, and the result must match", r.nsend, n)
		}
	}
	coll := wire.Coll(r.kind)
	d := coll.Desc()
	if d.Rooted && (r.root < 0 || r.root >= n) {
		return bad("root %d is not a rank of this world of %d: pass root in [0, %d]", r.root, n, n-1)
	}
	if d.Reduces && (r.op < 0 || r.op >= int(abi.NumOps)) {
		return bad("op %d is not a gocl reduction (sum 0, prod 1, max 2, min 3, avg 4)", r.op)
	}
	switch coll {
	case wire.AllReduce, wire.Broadcast, wire.AllGather, wire.AlltoAll, wire.ReduceScatter: // checked above
	case wire.SendRecv:
		if len(r.perm)%2 != 0 {
			return bad("perm has %d numbers: it must be (source, destination) pairs", len(r.perm))
		}
		src, dst := map[int64]bool{}, map[int64]bool{}
		for i := 0; i < len(r.perm); i += 2 {
			s, d := r.perm[i], r.perm[i+1]
			if s < 0 || s >= int64(n) || d < 0 || d >= int64(n) {
				return bad("perm pair (%d, %d) names a rank outside this world of %d", s, d, n)
			}
			if src[s] || dst[d] {
				return bad("perm sends from rank %d or to rank %d twice: each rank may appear once as a source and once as a destination", s, d)
			}
			src[s], dst[d] = true, true
		}
	default:
		return bad("unknown collective kind %d", r.kind)
	}
	return nil
}

// count is the count argument of r's call on n ranks, from its buffers and
// the size rules (ppermute: of its send and of its receive).
func (r *request) count(n int) int {
	d := wire.Coll(r.kind).Desc()
	switch {
	case d.Send == wire.Count:
		return r.nsend
	case d.Recv == wire.Count:
		return r.nrecv
	}
	return r.nsend / n
}

// sized says whether r's buffers have the sizes comm.Elems, the size rules,
// gives its call on n ranks (ppermute: a send and a receive of count each).
func (r *request) sized(n int) bool {
	coll, count := wire.Coll(r.kind), r.count(n)
	send, recv := comm.Elems(coll, count, n, false)
	if coll == wire.SendRecv {
		send, _ = comm.Elems(coll, count, n, true)
	}
	return r.nsend == send && r.nrecv == recv
}

// run executes r on c (the lane's goroutine).
func (r *request) run(c *comm.Comm) error {
	t := abi.DataType(r.dtype)
	if coll := wire.Coll(r.kind); coll != wire.SendRecv {
		op := comm.Op{Coll: coll, Send: r.send, Recv: r.recv, Count: r.count(c.NRanks()), Type: t}
		if d := coll.Desc(); d.Reduces {
			op.RedOp = int32(r.op)
		}
		if coll.Desc().Rooted {
			op.Root = r.root
		}
		return c.Run(nil, op)
	}
	// ppermute: send to every destination of ours, receive from our source;
	// nobody sending to us leaves zeros, as jax.lax.ppermute does.
	me := int64(c.Rank())
	var g comm.Group
	got := false
	for i := 0; i < len(r.perm); i += 2 {
		s, d := r.perm[i], r.perm[i+1]
		switch {
		case s == me && d == me:
			copy(unsafe.Slice((*byte)(r.recv), r.nrecv), unsafe.Slice((*byte)(r.send), r.nsend))
			got = true
		case s == me:
			if err := g.Add(c, nil, comm.Op{Coll: wire.SendRecv, Send: r.send, Count: r.nsend, Type: t, Peer: int(d), IsSend: true}); err != nil {
				return err
			}
		case d == me:
			if err := g.Add(c, nil, comm.Op{Coll: wire.SendRecv, Recv: r.recv, Count: r.nrecv, Type: t, Peer: int(s)}); err != nil {
				return err
			}
			got = true
		}
	}
	if !got {
		clear(unsafe.Slice((*byte)(r.recv), r.nrecv))
	}
	if g.Empty() {
		return nil
	}
	return g.Run()
}
