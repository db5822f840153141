package jaxffi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/comm"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// The order round. Every rank that owns its lane and has calls queued
// proposes its oldest ones (up to maxBatch) in one fixed-size block, and the
// ranks all-gather their blocks: every rank then runs rank 0's list, in that
// order, so all agree without knowing anything about the programs. Each
// block also carries the arguments of every proposed call and the inputs of
// its first calls as far as they fit (inlineLimit): calls that every rank
// proposed in the same leading positions have had their data moved by the
// round, and each rank computes their results from the gathered inputs,
// with no collective of their own. That is the common case (one collective
// at a time, every rank reaching the same one; or a step's small gradients
// queued in the same order), which thereby costs one exchange instead of an
// order message followed by the collective. A rank whose calls came in
// another order (XLA ran the program's collectives in another order there)
// only wasted payload: the rest of rank 0's list runs as ordinary
// collectives. The same call with different arguments on two ranks (ranks
// tracing different programs) is an error on every rank, since all see all
// blocks.
const (
	sigWords   = 7  // kind, dtype, op, root, nsend, nrecv, len(perm)
	tagsOff    = 16 // after the number of tags and the number of inputs carried
	sigOff     = tagsOff + maxBatch*16
	payloadOff = sigOff + maxBatch*sigWords*8
)

// inlineLimit is the most input bytes a rank's block carries in a world of
// n ranks: 4 KiB, at most 16 KiB in all, since every round, also a large
// call's, moves n blocks: up to a few KiB a block costs a round no more
// than an 8-byte all_reduce, past that it grows with the bytes
// (bench/CALLPATH.md, "jaxffi's order round").
func inlineLimit(n int) int { return min(4<<10, max(1<<10, (16<<10)/n)) }

func blockBytes(n int) int { return payloadOff + inlineLimit(n) }

// agree runs one order round. settled are the calls the round itself
// completed (taken off the queue; results in settledErrs), in order; batch
// names the calls to run next, in order, as ordinary collectives.
func (l *lane) agree() (settled []*call, settledErrs []error, batch []tag, err error) {
	l.mu.Lock()
	mine := append(l.mine[:0], l.order[:min(len(l.order), maxBatch)]...)
	calls := l.calls[:0]
	for _, t := range mine {
		calls = append(calls, l.pending[t])
	}
	l.mine, l.calls = mine, calls // scratch for the next round (the owner's alone)
	l.mu.Unlock()
	defer clear(calls) // keep no finished call (and its buffers) reachable
	n := l.c.NRanks()
	if n == 1 {
		return nil, nil, mine, nil
	}
	bb, limit := blockBytes(n), inlineLimit(n)
	if len(l.round) != n*bb {
		l.round = make([]byte, n*bb)
	}
	me := l.c.Rank()
	blk := l.round[me*bb : (me+1)*bb]
	clear(blk[:payloadOff])
	putTags(blk, mine)
	off, carried := 0, 0
	for i, c := range calls {
		for j, v := range c.r.signature() {
			binary.LittleEndian.PutUint64(blk[sigOff+(i*sigWords+j)*8:], uint64(v))
		}
		if b := c.r.inputBytes(); carried == i && off+b <= limit {
			copy(blk[payloadOff+off:], unsafe.Slice((*byte)(c.r.send), b))
			off += b
			carried++
		}
	}
	binary.LittleEndian.PutUint64(blk[8:], uint64(carried))
	buf := unsafe.Pointer(&l.round[0])
	if err := l.c.Run(nil, comm.Op{Coll: wire.AllGather, Send: unsafe.Pointer(&blk[0]), Recv: buf, Count: bb, Type: abi.Uint8}); err != nil {
		return nil, nil, nil, firstCause(l.c, err)
	}
	block := func(r int) []byte { return l.round[r*bb : (r+1)*bb] }
	batch = getTags(block(0))
	// A call every rank holds must have the same arguments everywhere: all
	// ranks see the same blocks, so all fail alike. Meanwhile find how many
	// of rank 0's calls every rank proposed at the same position, input
	// carried.
	common := carriedOf(block(0), len(batch))
	for r := 1; r < n; r++ {
		b := block(r)
		ntags := numTags(b)
		prefix := 0
		for j := range ntags {
			t := tagAt(b, j)
			i := slices.Index(batch, t) // at most maxBatch: no map to build per round
			if i < 0 {
				continue
			}
			if want, got := sigOf(block(0), i), sigOf(b, j); got != want {
				err := status.Errorf(status.InvalidUsage,
					"gocl.jax on rank %d: ranks disagree on %s: rank 0 runs %s, rank %d runs %s; every rank must run the same jitted programs (same shapes and arguments) in the same order",
					me, siteName(t), describe(want), r, describe(got))
				l.c.Abort() // later calls may be mismatched too: fail them everywhere
				return nil, nil, nil, err
			}
			if i == j && prefix == j {
				prefix++
			}
		}
		common = min(common, prefix, carriedOf(b, ntags))
	}
	// The common calls are this rank's first ones too, with the same
	// arguments, so their inputs sit at the same offsets in every block.
	off = 0
	for i := range common {
		c := l.tryTake(batch[i])
		if c != calls[i] {
			return settled, settledErrs, nil, status.Errorf(status.InternalError, "gocl.jax on rank %d: internal error (a gocl bug, please report it): a proposed call left the queue during the order round", me)
		}
		l.settled.Add(1)
		settled = append(settled, c)
		settledErrs = append(settledErrs, c.r.settle(l.round, off, me, n, l.reducer))
		off += c.r.inputBytes()
	}
	return settled, settledErrs, batch[common:], nil
}

func putTags(b []byte, tags []tag) {
	binary.LittleEndian.PutUint64(b, uint64(len(tags)))
	for i, t := range tags {
		binary.LittleEndian.PutUint64(b[tagsOff+16*i:], uint64(t.site))
		binary.LittleEndian.PutUint64(b[tagsOff+8+16*i:], t.n)
	}
}

func numTags(b []byte) int { return min(int(binary.LittleEndian.Uint64(b)), maxBatch) }

func tagAt(b []byte, i int) tag {
	return tag{int64(binary.LittleEndian.Uint64(b[tagsOff+16*i:])), binary.LittleEndian.Uint64(b[tagsOff+8+16*i:])}
}

func getTags(b []byte) []tag {
	tags := make([]tag, numTags(b))
	for i := range tags {
		tags[i] = tagAt(b, i)
	}
	return tags
}

type signature [sigWords]int64

func (r *request) signature() signature {
	return signature{int64(r.kind), int64(r.dtype), int64(r.op), int64(r.root), int64(r.nsend), int64(r.nrecv), int64(len(r.perm))}
}

// sigOf reads the arguments of the i-th call proposed in block b.
func sigOf(b []byte, i int) (s signature) {
	for j := range s {
		s[j] = int64(binary.LittleEndian.Uint64(b[sigOff+(i*sigWords+j)*8:]))
	}
	return s
}

// carriedOf is how many of the ntags calls proposed in block b have their
// input in it.
func carriedOf(b []byte, ntags int) int {
	return min(int(binary.LittleEndian.Uint64(b[8:])), ntags)
}

func describe(s signature) string {
	name := kindName(int(s[0]))
	if name == "" {
		name = fmt.Sprintf("collective %d", s[0])
	}
	return fmt.Sprintf("%s of %d elements of %v (result %d, op %d, root %d)", name, s[4], abi.DataType(s[1]), s[5], s[2], s[3])
}

// inputBytes is the size of the call's input.
func (r *request) inputBytes() int { return r.nsend * abi.DataType(r.dtype).Size() }

// settle computes rank me's result of r from every rank's input, gathered
// in round (rank q's input at offset off of block q's payload); reducer
// gives the reduction of a dtype and op.
func (r *request) settle(round []byte, off, me, n int, reducer func(abi.DataType, abi.RedOp) (*kernels.Reducer, error)) (err error) {
	defer status.Catch(&err)
	es := abi.DataType(r.dtype).Size()
	in := func(q int) []byte {
		at := q*blockBytes(n) + payloadOff + off
		return round[at : at+r.nsend*es]
	}
	out := unsafe.Slice((*byte)(r.recv), r.nrecv*es)
	reduce := func(part func(q int) []byte) error {
		red, err := reducer(abi.DataType(r.dtype), abi.RedOp(r.op))
		if err != nil {
			return status.Errorf(status.InvalidArgument, "gocl.jax %s on rank %d: %v", kindName(r.kind), me, err)
		}
		copy(out, part(0))
		for q := 1; q < n; q++ {
			red.Accumulate(out, out, part(q))
		}
		red.Finalize(out)
		return nil
	}
	switch wire.Coll(r.kind) {
	case wire.AllReduce:
		return reduce(in)
	case wire.ReduceScatter:
		return reduce(func(q int) []byte { return in(q)[me*len(out) : (me+1)*len(out)] })
	case wire.Broadcast:
		copy(out, in(r.root))
	case wire.AllGather:
		for q := range n {
			copy(out[q*r.nsend*es:], in(q))
		}
	case wire.AlltoAll:
		bs := len(out) / n
		for q := range n {
			copy(out[q*bs:(q+1)*bs], in(q)[me*bs:(me+1)*bs])
		}
	case wire.SendRecv:
		for i := 0; i < len(r.perm); i += 2 {
			if r.perm[i+1] == int64(me) {
				copy(out, in(int(r.perm[i])))
				return nil
			}
		}
		clear(out)
	}
	return nil
}

// reducer returns the lane's reducer for t and op, made once (a Reducer is
// immutable; the lane's owner alone calls this).
func (l *lane) reducer(t abi.DataType, op abi.RedOp) (*kernels.Reducer, error) {
	k := [2]int{int(t), int(op)}
	if red, ok := l.reducers[k]; ok {
		return red, nil
	}
	red, err := kernels.NewReducer(t, op, l.c.NRanks(), nil)
	if err == nil {
		if l.reducers == nil {
			l.reducers = map[[2]int]*kernels.Reducer{}
		}
		l.reducers[k] = red
	}
	return red, err
}
