package jaxffi

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"gocl/kernels"
	"gocl/runtime/comm"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// The order round. Every rank that owns its lane and has calls queued
// proposes its oldest ones (up to maxBatch) in one fixed-size block, and the
// ranks all-gather their blocks: every rank then runs rank 0's list, in that
// order, so all agree without knowing anything about the programs. Each
// block also carries the signature of its first call and, when that call's
// input fits (inlineLimit), the input itself: when every rank proposes the
// same first call, the round has already moved its data and each rank
// computes that call's result from the gathered inputs, with no collective
// of its own. That is the common case (one collective at a time, every rank
// reaching the same one), which thereby costs one exchange instead of an
// order message followed by the collective. A rank whose first call differs
// (XLA ran the program's collectives in another order there) only wasted
// its payload: the calls of rank 0's list then run as ordinary collectives.
// The same call with different arguments on two ranks (ranks tracing
// different programs) is an error on every rank, since all see all blocks.
const (
	sigWords   = 7 // kind, dtype, op, root, nsend, nrecv, len(perm)
	tagsOff    = 8
	sigOff     = tagsOff + maxBatch*16
	payloadOff = sigOff + sigWords*8
)

// inlineLimit is the largest input the round carries in a world of n ranks:
// up to 4 KiB a rank, at most 16 KiB in all, since every round, also a
// large call's, moves n blocks. Measured on shared memory, 2 ranks, idle
// machine: an all-gather of 1.6 KB blocks took 17.7 µs, of 4.7 KB 18.6 µs,
// of 8.8 KB 25.7 µs, of 17 KB 33.5 µs (an 8-byte all_reduce: 19.6 µs).
func inlineLimit(n int) int { return min(4<<10, max(1<<10, (16<<10)/n)) }

func blockBytes(n int) int { return payloadOff + inlineLimit(n) }

// proposal is what this rank put into the round.
type proposal struct {
	first *call // the call of its first tag (nil with no tags)
	tag   tag
}

// agree runs one order round. settled is the call the round itself
// completed (taken off the queue; its result is settledErr), nil if none;
// batch names the calls to run next, in order, as ordinary collectives.
func (l *lane) agree() (settled *call, settledErr error, batch []tag, err error) {
	l.mu.Lock()
	mine := append([]tag(nil), l.order[:min(len(l.order), maxBatch)]...)
	var p proposal
	if len(mine) > 0 {
		p = proposal{first: l.pending[mine[0]], tag: mine[0]}
	}
	l.mu.Unlock()
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
	if p.first != nil {
		sig := p.first.r.signature()
		for i, v := range sig {
			binary.LittleEndian.PutUint64(blk[sigOff+8*i:], uint64(v))
		}
		if b := p.first.r.inputBytes(); b <= limit {
			copy(blk[payloadOff:], unsafe.Slice((*byte)(p.first.r.send), b))
		}
	}
	buf := unsafe.Pointer(&l.round[0])
	if err := l.c.Run(nil, comm.Op{Coll: wire.AllGather, Send: unsafe.Pointer(&blk[0]), Recv: buf, Count: bb, Type: kernels.Uint8}); err != nil {
		return nil, nil, nil, firstCause(l.c, err)
	}
	batch = getTags(l.round[:bb])
	if len(batch) == 0 {
		return nil, nil, nil, nil
	}
	// Every rank holding rank 0's first call must hold it with the same
	// arguments; all ranks see the same blocks, so all fail alike.
	want := sigOf(l.round[:bb])
	same := true
	for r := 1; r < n; r++ {
		b := l.round[r*bb : (r+1)*bb]
		t := getTags(b)
		if len(t) == 0 || t[0] != batch[0] {
			same = false
			continue
		}
		if got := sigOf(b); got != want {
			err := status.Errorf(status.InvalidUsage,
				"gocl.jax on rank %d: ranks disagree on collective call site %d (call %d): rank 0 runs %s, rank %d runs %s; every rank must run the same jitted programs (same shapes and arguments) in the same order",
				me, batch[0].site, batch[0].n+1, describe(want), r, describe(got))
			l.c.Abort() // later calls may be mismatched too: fail them everywhere
			return nil, nil, nil, err
		}
	}
	if !same || p.first == nil || p.tag != batch[0] || p.first.r.inputBytes() > limit {
		return nil, nil, batch, nil
	}
	c := l.tryTake(p.tag)
	if c != p.first {
		return nil, nil, nil, status.Errorf(status.InternalError, "gocl.jax on rank %d: internal error (a gocl bug, please report it): the proposed call left the queue during the order round", me)
	}
	l.settled.Add(1)
	return c, c.r.settle(l.round, me, n), batch[1:], nil
}

func putTags(b []byte, tags []tag) {
	binary.LittleEndian.PutUint64(b, uint64(len(tags)))
	for i, t := range tags {
		binary.LittleEndian.PutUint64(b[tagsOff+16*i:], uint64(t.site))
		binary.LittleEndian.PutUint64(b[tagsOff+8+16*i:], t.n)
	}
}

func getTags(b []byte) []tag {
	k := min(int(binary.LittleEndian.Uint64(b)), maxBatch)
	tags := make([]tag, k)
	for i := range tags {
		tags[i] = tag{int64(binary.LittleEndian.Uint64(b[tagsOff+16*i:])), binary.LittleEndian.Uint64(b[tagsOff+8+16*i:])}
	}
	return tags
}

type signature [sigWords]int64

func (r *request) signature() signature {
	return signature{int64(r.kind), int64(r.dtype), int64(r.op), int64(r.root), int64(r.nsend), int64(r.nrecv), int64(len(r.perm))}
}

func sigOf(b []byte) (s signature) {
	for i := range s {
		s[i] = int64(binary.LittleEndian.Uint64(b[sigOff+8*i:]))
	}
	return s
}

func describe(s signature) string {
	name := kindName(int(s[0]))
	if name == "" {
		name = fmt.Sprintf("collective %d", s[0])
	}
	return fmt.Sprintf("%s of %d elements of %v (result %d, op %d, root %d)", name, s[4], kernels.DataType(s[1]), s[5], s[2], s[3])
}

// inputBytes is the size of the call's input.
func (r *request) inputBytes() int { return r.nsend * kernels.DataType(r.dtype).Size() }

// settle computes rank me's result of r from every rank's input, gathered
// in round (block q's payload is rank q's input).
func (r *request) settle(round []byte, me, n int) (err error) {
	defer status.Catch(&err)
	es := kernels.DataType(r.dtype).Size()
	in := func(q int) []byte {
		off := q*blockBytes(n) + payloadOff
		return round[off : off+r.nsend*es]
	}
	out := unsafe.Slice((*byte)(r.recv), r.nrecv*es)
	reduce := func(part func(q int) []byte) error {
		red, err := kernels.NewReducer(kernels.DataType(r.dtype), kernels.RedOp(r.op), n, nil)
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
