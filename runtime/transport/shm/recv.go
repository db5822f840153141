package shm

// Receiving: a frame's slots, decoded, and its payload read from the slot
// (LL), the data ring (Simple) or the sender's memory (cma.go).

import (
	"encoding/binary"
	"sync/atomic"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// word waits for word i of slot seq and returns its data half.
func (l *link) word(seq uint64, i int, want *wire.Header) (uint32, error) {
	w := l.recv.word(int(seq%llSlots), i)
	flag := uint32(seq)
	v := atomic.LoadUint64(w)
	if uint32(v>>32) == flag {
		return uint32(v), nil
	}
	err := l.await(transport.WaitRecv, func() bool {
		v = atomic.LoadUint64(w)
		return uint32(v>>32) == flag
	}, l.recv.u32(offPosted), l.recv.u32(offRecvWait), func() string { return "waiting for " + want.Describe() })
	return uint32(v), err
}

// next waits for the next slot and decodes its descriptor. The sender
// stores the flags word last, so once it has come the rest is normally
// there too and is read in one pass; a word whose flag is not (yet) this
// slot's is waited for on its own.
func (l *link) next(want *wire.Header, p *piece) error {
	p.seq = l.rseq + 1
	w0, err := l.word(p.seq, wFlags, want)
	if err != nil {
		return err
	}
	slot, flag := l.recv.slot(int(p.seq%llSlots)), uint32(p.seq)
	var d [simpleDesc]uint32
	d[wFlags] = w0
	for i := 1; i < descWords(w0); i++ {
		v := atomic.LoadUint64(&slot[i])
		if uint32(v>>32) != flag {
			w, err := l.word(p.seq, i, want)
			if err != nil {
				return err
			}
			v = uint64(w)
		}
		d[i] = uint32(v)
	}
	if !decode(&d, p) {
		return transport.PeerClosed(l.self, l.peer, "corrupt shared-memory slot: unknown frame kind")
	}
	return nil
}

// llPayload decodes an LL piece's payload into dst (len(dst) == p.n).
func (l *link) llPayload(p *piece, dst []byte, want *wire.Header) error {
	slot, flag := l.recv.slot(int(p.seq%llSlots)), uint32(p.seq)
	for i := descWords(uint32(p.flags)); len(dst) > 0; i++ {
		v := atomic.LoadUint64(&slot[i])
		if uint32(v>>32) != flag {
			w, err := l.word(p.seq, i, want)
			if err != nil {
				return err
			}
			v = uint64(w)
		}
		if len(dst) < 4 {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(v))
			copy(dst, b[:])
			return nil
		}
		binary.LittleEndian.PutUint32(dst, uint32(v))
		dst = dst[4:]
	}
	return nil
}

func (l *link) ring(p *piece) []byte {
	pos := int(p.start % dataBytes)
	return l.recv.data()[pos : pos+p.n]
}

// release frees piece p's slot and ring bytes and wakes a sleeping sender.
func (l *link) release(p *piece) {
	l.rseq = p.seq
	if p.flags&modeSimple != 0 {
		atomic.StoreUint64(l.recv.u64(offDataTail), p.end)
	}
	atomic.StoreUint64(l.recv.u64(offLLTail), p.seq) // an xchg: a full barrier before the load below
	if atomic.LoadUint32(l.recv.u32(offSendWait)) != 0 {
		atomic.AddUint32(l.recv.u32(offFreed), 1)
		wake(l.recv.u32(offFreed))
	}
}

// frame receives the frame want describes into dst, or whole to use, or a
// piece at a time to pieces (RecvPieces): exactly one of them is set. No
// closure, so the small path allocates nothing.
func (l *link) frame(want *wire.Header, dst []byte, use func(payload []byte), pieces func(off int, piece []byte)) error {
	if !l.enter() {
		return transport.Aborted(l.self, l.peer)
	}
	defer l.exit()
	if l.closed.Load() {
		return transport.Aborted(l.self, l.peer)
	}
	n := int(want.Len)
	off := 0
	var p piece // filled in place, not returned by value (bench/SHM.md)
	for first := true; ; first = false {
		if err := l.next(want, &p); err != nil {
			return err
		}
		transport.RaceAcquire()
		if first {
			if err := transport.CheckFrame(want, &p.hdr, l.self, l.peer); err != nil {
				return err
			}
		}
		if off+p.n > n {
			return transport.PeerClosed(l.self, l.peer, "shared-memory frame longer than its header says")
		}
		last := p.flags&modeMore == 0
		switch {
		case pieces != nil:
			if err := l.givePiece(&p, want, off, pieces); err != nil {
				return err
			}
		case use != nil && first && last && p.flags&(modeSimple|modeCMA) == modeSimple:
			use(l.ring(&p)) // straight from the ring: no copy
		default:
			buf := dst
			if use != nil {
				if cap(l.scratch) < n {
					l.scratch = make([]byte, n)
				}
				buf = l.scratch[:n]
			}
			d := buf[off : off+p.n]
			switch {
			case p.flags&modeCMA != 0:
				if err := l.claim(&p); err != nil {
					return err
				}
				if err := l.pull(d, p.start); err != nil {
					return err
				}
			case p.flags&modeSimple == 0:
				if err := l.llPayload(&p, d, want); err != nil {
					return err
				}
			default: // cached stores: Go's copy sends 1 MiB pieces to DRAM (non-temporal)
				transport.CopyCached(d, l.ring(&p))
			}
			if use != nil && last {
				use(buf)
			}
		}
		off += p.n
		transport.RaceAcquire()
		l.release(&p)
		if last {
			l.stats.CountReceived(n)
			return nil
		}
	}
}

func (l *link) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	return l.frame(want, dst, nil, nil)
}

func (l *link) RecvWith(want *wire.Header, use func(payload []byte)) error {
	return l.frame(want, nil, use, nil)
}

// Pending reports whether the next frame's first word has arrived, or the
// link has failed (a receive would then return at once).
func (l *link) Pending() bool {
	if !l.enter() {
		return true
	}
	defer l.exit()
	seq := l.rseq + 1
	v := atomic.LoadUint64(l.recv.word(int(seq%llSlots), wFlags))
	return uint32(v>>32) == uint32(seq) || l.closed.Load() || l.dead.Load()
}

// Peek shows the waiting frame's header without consuming it
// (transport.Peeker): a receive from any source skips a peer whose next
// frame belongs to a later collective. A closed or dead link reports a
// KindAbort header, so the receive goes on to report it.
func (l *link) Peek() (wire.Header, bool) {
	if !l.enter() {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	defer l.exit()
	if l.closed.Load() || l.dead.Load() {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	seq := l.rseq + 1
	slot := l.recv.slot(int(seq % llSlots))
	var d [simpleDesc]uint32
	for i, n := 0, 1; i < n; i++ {
		v := atomic.LoadUint64(&slot[i])
		if uint32(v>>32) != uint32(seq) {
			return wire.Header{}, false
		}
		d[i] = uint32(v)
		if i == wFlags {
			n = descWords(d[i])
		}
	}
	var p piece
	if !decode(&d, &p) {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	return p.hdr, true
}

var _ transport.Peeker = (*link)(nil)
