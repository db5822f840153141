package comm

import (
	"time"

	"gocl/runtime/algo"
	"gocl/runtime/debuglog"
	"gocl/runtime/status"
	"gocl/runtime/telemetry"
	"gocl/runtime/transport"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// execute runs a batch of prepared ops (one call, or one comm's share of a
// group): collectives in call order, then all point-to-point ops at once.
// Any failure fails the communicator so that no peer keeps waiting.
func (c *Comm) execute(ops []*Op) (err error) {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave(&err)
	var running *Op // the op a memory fault is blamed on
	defer c.catchFault(&running, faulting())
	var p2p []*Op
	for _, op := range ops {
		running = op
		if op.Coll == wire.SendRecv {
			p2p = append(p2p, op)
			continue
		}
		if err := c.collective(op); err != nil {
			return err
		}
	}
	if len(p2p) > 0 {
		running = p2p[0]
	}
	return c.pointToPoint(p2p)
}

// executeOne is execute for a single collective.
func (c *Comm) executeOne(op *Op) (err error) {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave(&err)
	defer c.catchFault(&op, faulting())
	return c.collective(op)
}

// enter starts an operation: the communicator is this caller's, still
// usable, and every wait of the operation is bounded by its timeout.
func (c *Comm) enter() error {
	c.opMu.Lock()
	if err := c.usable(); err != nil {
		c.opMu.Unlock()
		return err
	}
	c.prog.enter()
	c.armDeadline()
	return nil
}

// leave ends an operation that ended with *err.
func (c *Comm) leave(err *error) {
	if *err != nil {
		c.fail(*err) // before leaving: a probe must not see an idle rank without its verdict
	}
	c.prog.leave()
	c.opMu.Unlock()
}

// ctx describes op to the algorithms. The Ctx is the communicator's own,
// reused by every call (calls hold opMu, and the algorithms keep nothing
// after they return): the small-message call path allocates little.
func (c *Comm) ctx(op *Op) *algo.Ctx {
	if c.scratchFn == nil {
		c.scratchFn, c.failFn = c.scratchBuf, func(err error) { c.fail(c.blame(err)) }
	}
	// Field by field, not c.x = algo.Ctx{...}: the literal was built on
	// the stack and copied, and the copy's loads stalled on its own stores.
	x := &c.x
	x.Rank, x.N, x.Links, x.Chunk, x.Hosts, x.Local = c.rank, c.nranks, c.links, c.chunk, c.hosts, c.localRanks
	x.Red, x.Elem = op.red, op.Type.Size()
	x.Hdr = wire.Header{Kind: wire.KindColl, Coll: op.Coll, Dtype: uint8(op.Type), Op: op.wireOp(),
		Root: int32(op.Root), Seq: c.seq, Count: uint64(op.Count)}
	x.Scratch, x.Fail = c.scratchFn, c.failFn
	return x
}

// scratchBuf returns a buffer of n bytes, reused across calls up to 64 MiB.
func (c *Comm) scratchBuf(n int) []byte {
	if n > 64<<20 {
		return make([]byte, n)
	}
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	return c.scratch[:n]
}

func (c *Comm) collective(op *Op) (err error) {
	x := c.ctx(op)
	c.seq++
	if op.Count == 0 {
		return nil
	}
	sb, rb := c.sizes(op)
	ch := c.plan.Pick(op.Coll, max(sb, rb))
	if c.lazy && c.plan == nil {
		ch = tune.Choice{Algo: c.initAlgo()}
	}
	c.live.set(op.Coll, op.Type, ch, 0, -1, max(sb, rb))
	var start time.Time
	if c.metrics != nil {
		start = transport.Now() // one clock read, not time.Now's two
	}
	if c.flight != nil {
		slot := c.flight.Begin(telemetry.Entry{Hdr: x.Hdr, Bytes: max(sb, rb), Choice: ch})
		defer func() { c.flight.End(slot, err) }()
	}
	if debuglog.Enabled(debuglog.Trace, debuglog.Tuning) {
		debuglog.Tracef(debuglog.Tuning, c.rank, "%s: %d bytes via %s", x.Hdr.Describe(), max(sb, rb), ch)
	}
	if c.lazy {
		root := -1
		if op.Coll.Desc().Rooted {
			root = op.Root
		}
		err = c.needFor(op.Coll, ch.Algo, root)
	}
	switch {
	case err != nil: // its links could not be made
	case op.Coll == wire.AllReduce, op.Coll == wire.AllGather, op.Coll == wire.ReduceScatter:
		err = unrooted[op.Coll][ch.Algo](x, op.send, op.recv, op.Count)
	case op.Coll == wire.Broadcast, op.Coll == wire.Reduce:
		err = rooted[op.Coll][ch.Algo](x, op.send, op.recv, op.Count, op.Root)
	case op.Coll == wire.AlltoAll:
		err = algo.AlltoAll(x, op.send, op.recv, op.Count)
	case op.Coll == wire.Gather:
		err = algo.Gather(x, op.send, op.recv, op.Count, op.Root)
	case op.Coll == wire.Scatter:
		err = algo.Scatter(x, op.send, op.recv, op.Count, op.Root)
	default:
		err = status.Errorf(status.InternalError, "rank %d: no algorithm for %s", c.rank, op.Coll)
	}
	if err != nil { // name the call, so logs and messages say which one failed
		err = c.blame(err)
		err = status.Errorf(status.CodeOf(err), "%s failed on rank %d: %w", x.Hdr.Describe(), c.rank, err)
	}
	if c.metrics != nil {
		c.metrics.Coll(&x.Hdr, ch, max(sb, rb), start, err)
	}
	return err
}

// The algorithms of each collective, by tune.Algo (the tuner picks only
// those a collective has). Arrays by wire.Coll, not maps: a map lookup is
// a visible part of an 8-byte call (bench/CALLPATH.md).
var unrooted = [...][]func(*algo.Ctx, []byte, []byte, int) error{
	wire.AllReduce: {tune.Ring: algo.AllReduceRing, tune.Tree: algo.AllReduceTree,
		tune.Direct: algo.AllReduceDirect, tune.HalvingDoubling: algo.AllReduceHalvingDoubling,
		tune.Hier: algo.AllReduceHier},
	wire.AllGather: {tune.Ring: algo.AllGatherRing, tune.Direct: algo.AllGatherDirect,
		tune.HalvingDoubling: algo.AllGatherHalvingDoubling},
	wire.ReduceScatter: {tune.Ring: algo.ReduceScatterRing, tune.Direct: algo.ReduceScatterDirect,
		tune.HalvingDoubling: algo.ReduceScatterHalvingDoubling},
}

var rooted = [...][]func(*algo.Ctx, []byte, []byte, int, int) error{
	wire.Broadcast: {tune.Ring: algo.BroadcastRing, tune.Tree: algo.BroadcastTree, tune.Direct: algo.BroadcastDirect},
	wire.Reduce:    {tune.Ring: algo.ReduceRing, tune.Tree: algo.ReduceTree, tune.Direct: algo.ReduceDirect},
}

// pointToPoint runs sends and receives together: one goroutine per peer and
// direction keeps each pair's order while no pair waits on another, so a
// grouped ring exchange cannot deadlock. Sends to self are matched with
// receives from self in order.
func (c *Comm) pointToPoint(ops []*Op) error {
	if len(ops) == 0 {
		return nil
	}
	type lane struct {
		peer int
		send bool
	}
	lanes := map[lane][]*Op{}
	var order []lane
	var selfSend, selfRecv []*Op
	for _, op := range ops {
		switch {
		case op.Peer == c.rank && op.IsSend:
			selfSend = append(selfSend, op)
		case op.Peer == c.rank:
			selfRecv = append(selfRecv, op)
		default:
			l := lane{op.Peer, op.IsSend}
			if _, ok := lanes[l]; !ok {
				order = append(order, l)
			}
			lanes[l] = append(lanes[l], op)
		}
	}
	if len(selfSend) != len(selfRecv) {
		return status.Errorf(status.InvalidUsage,
			"rank %d: %d sends to itself but %d receives from itself: put each self-send and its receive in the same group", c.rank, len(selfSend), len(selfRecv))
	}
	if c.lazy {
		peers := make([]int, len(order))
		for i, l := range order {
			peers[i] = l.peer
		}
		if err := c.need(peers); err != nil {
			err = c.blame(err)
			return status.Errorf(status.CodeOf(err), "point-to-point calls with ranks %v on rank %d could not connect: %w", peers, c.rank, err)
		}
	}
	for i := range selfSend {
		s, r := selfSend[i], selfRecv[i]
		if s.Count != r.Count || s.Type != r.Type {
			return status.Errorf(status.InvalidUsage, "rank %d: send to self of %d %s does not match the receive of %d %s",
				c.rank, s.Count, s.Type, r.Count, r.Type)
		}
		copy(r.recv, s.send)
	}
	run := func(l lane) error {
		for _, op := range lanes[l] {
			if err := c.p2p(op); err != nil {
				return err
			}
		}
		return nil
	}
	return status.Parallel(len(order), func(i int) error {
		err := run(order[i])
		if err != nil {
			c.fail(err) // unblock the other lanes
		}
		return err
	})
}

// p2p moves one send or receive. Each direction of each pair has its own
// sequence number, so a count or type mismatch is caught by the header.
func (c *Comm) p2p(op *Op) error {
	peer := op.Peer
	h := wire.Header{Kind: wire.KindP2P, Coll: wire.SendRecv, Dtype: uint8(op.Type), Count: uint64(op.Count)}
	seqs := c.recvSeq
	if op.IsSend {
		seqs = c.sendSeq
	}
	h.Seq = seqs[peer]
	seqs[peer]++
	flags := liveP2P
	if op.IsSend {
		flags |= liveSend
	}
	c.live.set(wire.SendRecv, op.Type, tune.Choice{}, flags, peer, op.Count*op.Type.Size())
	var err error
	var start time.Time
	if c.metrics != nil {
		start = transport.Now() // one clock read, not time.Now's two
	}
	if c.flight != nil {
		slot := c.flight.Begin(telemetry.Entry{Hdr: h, Send: op.IsSend, Peer: peer, Bytes: op.Count * op.Type.Size(), Via: c.links[peer].Name()})
		defer func() { c.flight.End(slot, err) }()
	}
	if op.IsSend {
		err = c.links[peer].Send(&h, op.send)
	} else {
		err = c.links[peer].RecvInto(&h, op.recv)
	}
	if err != nil {
		err = c.blame(err)
		err = status.Errorf(status.CodeOf(err), "%s #%d to/from rank %d failed on rank %d: %w", op.name(), h.Seq, peer, c.rank, err)
	}
	if c.metrics != nil {
		c.metrics.P2P(&h, op.IsSend, peer, op.Count*op.Type.Size(), start, err)
	}
	return err
}

// armDeadline bounds every wait of the operation starting now by the
// communicator's timeout (none when it is 0). Links that share c.deadline
// read the clock only if a wait has to sleep (transport.Deadline); the
// others get a deadline from now, at a clock read per call.
func (c *Comm) armDeadline() {
	c.deadline.Arm(c.timeout)
	if len(c.eager) == 0 {
		return
	}
	var deadline time.Time
	if c.timeout > 0 {
		deadline = transport.Now().Add(c.timeout) // a clock read less than time.Now
	}
	for _, l := range c.eager {
		l.SetDeadline(deadline)
	}
}
