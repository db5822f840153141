package shm

// Sending: a frame's slot and, above LLMax, its pieces in the data ring
// (Send), or a frame written into the ring in place (Lend, Commit).

import (
	"encoding/binary"
	"sync/atomic"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// hotBytes is the part of the data ring that small pieces (up to a quarter
// of it) cycle through: a frame that would go past it starts again at the
// ring's start when that is free. With ranks sharing cores the receiver
// often still holds the previous frame, so the fresh-page rule alone let
// small frames walk the whole 4 MiB ring: cold lines and a TLB miss per
// frame.
const hotBytes = 32 << 10

// slotFree waits until slot seq may be written.
func (l *link) slotFree(seq uint64, h *wire.Header) error {
	if seq <= llSlots || seq-llSlots <= l.llTail {
		return nil
	}
	tail := l.send.u64(offLLTail)
	return l.await(transport.WaitSend, func() bool {
		l.llTail = atomic.LoadUint64(tail)
		return seq-llSlots <= l.llTail
	}, l.send.u32(offFreed), l.send.u32(offSendWait), func() string { return "sending " + h.Describe() })
}

// reserve waits for a slot and n contiguous bytes of the data ring.
func (l *link) reserve(h *wire.Header, n int) (piece, []byte, error) {
	p := piece{seq: l.sseq + 1, flags: modeSimple, n: n}
	if err := l.slotFree(p.seq, h); err != nil {
		return p, nil, err
	}
	need := uint64((n + 63) &^ 63)
	start := l.dhead
	pos := start % dataBytes
	if pos != 0 && (pos+need > l.fresh || need <= hotBytes/4 && pos+need > hotBytes) {
		// The piece would be the first to touch these pages of the ring: a
		// page fault each, and the zeroing of a new page, on the critical
		// path (bench/SHM.md, "Fresh pages of the data ring"). Or it is a
		// small piece leaving the ring's first hotBytes. Start again at the
		// ring's start when the piece there overlaps nothing still in use,
		// so that small frames keep reusing a few hot lines and pages; a
		// stream of large ones walks all of the ring as before.
		l.dtail = max(l.dtail, atomic.LoadUint64(l.send.u64(offDataTail)))
		restart := start + dataBytes - pos
		if l.dtail == l.dhead {
			l.dtail = restart // nothing is in use before it: the skipped bytes are free
		}
		if restart+need-l.dtail <= dataBytes {
			start, pos = restart, 0
		}
	}
	if pos+need > dataBytes {
		start += dataBytes - pos // the piece must be contiguous: skip the ring's end
		pos = 0
	}
	l.fresh = max(l.fresh, (pos+need+pageBytes-1)&^(pageBytes-1))
	end := start + need
	if end-l.dtail > dataBytes {
		tail := l.send.u64(offDataTail)
		err := l.await(transport.WaitSend, func() bool {
			l.dtail = max(l.dtail, atomic.LoadUint64(tail)) // the peer's tail lags a restart at the ring's start
			return end-l.dtail <= dataBytes
		}, l.send.u32(offFreed), l.send.u32(offSendWait), func() string { return "sending " + h.Describe() })
		if err != nil {
			return p, nil, err
		}
	}
	p.start, p.end = start, end
	l.dhead = end
	return p, l.send.data()[pos : pos+uint64(n) : pos+uint64(n)], nil
}

// post publishes slot p: every word but the first (the flags word, which
// the receiver polls), then the first, with an atomic store. Every word
// still carries its flag (LL), but a receiver that saw the first finds the
// rest of the slot complete, so its cache lines cross once instead of
// bouncing between a writer and a poller word by word; and that store
// orders the slot's other words, plain stores, before the receiver's
// reads (the memory model and the race detector need that edge; on x86 it
// is free anyway).
func (l *link) post(p *piece, h *wire.Header, payload []byte) {
	k := int(p.seq % llSlots)
	flag := uint64(uint32(p.seq)) << 32
	slot := l.send.slot(k)
	i := llDesc
	if p.flags&modeSimple == 0 && h.Seq>>32 == 0 && h.Count>>32 == 0 && uint32(h.Root) < 1<<16 {
		p.flags |= modeShort
		slot[sLen] = flag | uint64(uint32(p.n)|uint32(h.Op)<<8|uint32(h.Root)<<16)
		slot[sSeq] = flag | h.Seq
		slot[sCount] = flag | h.Count
		slot[sStep] = flag | uint64(h.Step)
		i = shortDesc
	} else {
		slot[wLen] = flag | uint64(uint32(p.n)|uint32(h.Op)<<24)
		slot[wRoot] = flag | uint64(uint32(h.Root))
		slot[wSeq] = flag | uint64(uint32(h.Seq))
		slot[wSeq+1] = flag | h.Seq>>32
		slot[wCount] = flag | uint64(uint32(h.Count))
		slot[wCount+1] = flag | h.Count>>32
		slot[wStep] = flag | uint64(h.Step)
		slot[wFrame] = flag | uint64(uint32(h.Len))
		slot[wFrame+1] = flag | h.Len>>32
	}
	first := flag | uint64(uint32(p.flags)|uint32(h.Kind)<<8|uint32(h.Coll)<<16|uint32(h.Dtype)<<24)
	if p.flags&modeSimple != 0 {
		slot[wStart] = flag | uint64(uint32(p.start))
		slot[wStart+1] = flag | p.start>>32
		slot[wEnd] = flag | uint64(uint32(p.end))
		slot[wEnd+1] = flag | p.end>>32
	} else {
		for len(payload) >= 4 {
			slot[i] = flag | uint64(binary.LittleEndian.Uint32(payload))
			payload = payload[4:]
			i++
		}
		if len(payload) > 0 {
			var last [4]byte
			copy(last[:], payload)
			slot[i] = flag | uint64(binary.LittleEndian.Uint32(last[:]))
		}
	}
	transport.RaceRelease()
	// Sequentially consistent (an xchg on amd64): a full barrier between
	// the slot's stores and the load of the receiver's sleep flag below, the
	// mirror image of await's. The futex word is bumped only for a receiver
	// that may sleep: a locked add on every frame costs as much as the whole
	// slot's stores (bench/SHM.md).
	atomic.StoreUint64(&slot[wFlags], first)
	l.sseq = p.seq
	if atomic.LoadUint32(l.send.u32(offRecvWait)) != 0 {
		atomic.AddUint32(l.send.u32(offPosted), 1)
		wake(l.send.u32(offPosted))
	}
}

func (l *link) Send(h *wire.Header, data []byte) error {
	err := l.sendFrame(h, data)
	if err == nil {
		l.stats.CountSent(len(data))
	}
	return err
}

func (l *link) sendFrame(h *wire.Header, data []byte) error {
	h.Len = uint64(len(data))
	if !l.enter() {
		return transport.Aborted(l.self, l.peer)
	}
	defer l.exit()
	if err := l.failure(); err != nil {
		return err
	}
	if len(data) <= LLMax {
		// The header is read where it is, not copied into the piece (wide
		// loads of narrow stores just made; bench/SHM.md).
		p := piece{seq: l.sseq + 1, n: len(data)}
		if err := l.slotFree(p.seq, h); err != nil {
			return err
		}
		l.post(&p, h, data)
		return nil
	}
	if l.cmaAll && len(data) >= CMAMin {
		return l.sendCMA(h, data)
	}
	for off := 0; off < len(data); {
		n := min(len(data)-off, MaxPiece)
		p, buf, err := l.reserve(h, n)
		if err != nil {
			return err
		}
		transport.CopyCached(buf, data[off:off+n])
		off += n
		if off < len(data) {
			p.flags |= modeMore
		}
		l.post(&p, h, nil)
	}
	return nil
}

// Lend returns the data-ring bytes the peer will read the next frame from.
func (l *link) Lend(n int) ([]byte, bool, error) {
	if n <= 0 || n > MaxPiece || l.cmaAll && n >= CMAMin {
		return nil, false, nil
	}
	if !l.enter() {
		return nil, false, transport.Aborted(l.self, l.peer)
	}
	if err := l.failure(); err != nil {
		l.exit()
		return nil, false, err
	}
	h := wire.Header{Len: uint64(n)}
	p, buf, err := l.reserve(&h, n)
	if err != nil {
		l.exit()
		return nil, false, err
	}
	l.lent = p // holds the enter until Commit: the mapping stays while the slot is lent
	return buf, true, nil
}

// Commit sends the lent bytes as one frame.
func (l *link) Commit(h *wire.Header) error {
	if l.lent.n == 0 {
		return transport.Aborted(l.self, l.peer) // no Lend outstanding: a caller bug, reported as failure
	}
	p := l.lent
	l.lent = piece{}
	defer l.exit()
	h.Len = uint64(p.n)
	if err := l.failure(); err != nil {
		return err
	}
	l.post(&p, h, nil)
	l.stats.CountSent(p.n)
	return nil
}

// Cancel gives up the outstanding Lend: its enter is released, so Close can
// unmap (a lend held to the end kept the pair's segments mapped for good).
func (l *link) Cancel() {
	if l.lent.n == 0 {
		return
	}
	l.lent = piece{}
	l.exit()
}
