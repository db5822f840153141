package comm

import (
	"time"
	"unsafe"

	"gocl/abi"
	"gocl/runtime/host"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// RecvAny receives count elements of typ into buf from whichever peer's send
// is waiting first, and returns that peer. It polls the links
// (transport.Peeker: a waiting point-to-point frame; a link that is only a
// transport.Prober: any waiting frame), starting after the peer it matched
// last so no sender starves, then receives the frame like Recv from that peer: it takes that
// pair's next sequence number, so per-pair order and the header checks are
// those of a plain receive. It runs like a call on the NULL stream (after the
// communicator's queued work) and is bounded by the operation timeout.
func (c *Comm) RecvAny(buf unsafe.Pointer, count int, typ abi.DataType) (peer int, err error) {
	if c.nranks < 2 {
		return -1, status.Errorf(status.InvalidUsage,
			"recv from any source on rank %d: the communicator has no other rank to receive from", c.rank)
	}
	op := &Op{Coll: wire.SendRecv, Recv: buf, Count: count, Type: typ, Peer: (c.rank + 1) % c.nranks}
	if err := c.usable(); err != nil {
		return -1, err
	}
	if err := c.prepare(op); err != nil {
		return -1, err
	}
	var probers []transport.Prober
	if !c.lazy { // else once its links are made, below
		if probers, err = c.probers(); err != nil {
			return -1, err
		}
	}
	if err := c.claim(op); err != nil {
		return -1, err
	}
	defer c.unclaim()
	c.waitQueued()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.prog.enter()
	defer func() {
		if err != nil {
			c.fail(err) // before leaving: a probe must not see an idle rank without its verdict
		}
		c.prog.leave()
	}()
	defer c.catchFault(&op, faulting())
	c.armDeadline()
	if c.lazy { // a message may come from any rank: a link to each
		if err := c.need(c.allPeers()); err != nil {
			return -1, err
		}
		if probers, err = c.probers(); err != nil {
			return -1, err
		}
	}
	waiting := func(p int) bool {
		if pk, ok := probers[p].(transport.Peeker); ok {
			h, ok := pk.Peek()
			return ok && h.Kind != wire.KindColl // a send, or an abort/closed link to report
		}
		return probers[p].Pending()
	}
	find := func() int {
		for i := range c.nranks {
			p := (c.anyNext + i) % c.nranks
			if p != c.rank && waiting(p) {
				return p
			}
		}
		return -1
	}
	nap := time.Microsecond
	for {
		if err := c.usable(); err != nil { // aborted from another goroutine
			return -1, err
		}
		peer = -1
		host.Spin(func() bool { peer = find(); return peer >= 0 })
		if peer >= 0 {
			break
		}
		if dl := c.deadline.UnixNano(); dl != 0 && transport.Now().UnixNano() > dl {
			return -1, status.Errorf(status.Timeout,
				"rank %d: recv from any source of %d %s timed out: no rank sent within GOCL_TIMEOUT (a sender is stuck, too slow, or not sending to rank %d)",
				c.rank, count, typ, c.rank)
		}
		time.Sleep(nap) // idle: back off to 1 ms between polls
		nap = min(2*nap, time.Millisecond)
	}
	op.Peer = peer
	if err := c.p2p(op); err != nil {
		return -1, err
	}
	c.anyNext = peer + 1
	return peer, nil
}

// probers is every link as a transport.Prober, or an error naming the link
// that cannot tell whether a message is waiting.
func (c *Comm) probers() ([]transport.Prober, error) {
	probers := make([]transport.Prober, c.nranks)
	for p, l := range c.links {
		if p == c.rank {
			continue
		}
		pr, ok := l.(transport.Prober)
		if !ok {
			return nil, status.Errorf(status.InvalidUsage,
				"recv from any source on rank %d: the %s link to rank %d cannot tell whether a message is waiting; receive from rank %d by name",
				c.rank, l.Name(), p, p)
		}
		probers[p] = pr
	}
	return probers, nil
}
