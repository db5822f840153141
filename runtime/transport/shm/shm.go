// Package shm is the shared-memory transport between processes of one host.
// Each direction of a pair is one segment, created by its receiver as an
// anonymous memory file (memfd, never a name in /dev/shm) that the sender
// maps through /proc/PID/fd during the handshake; the descriptors are closed
// right after, so the memory lives exactly as long as the mappings.
//
// Frames go through a FIFO of LL slots. A slot's 8-byte words each carry 4
// bytes of data and a 4-byte flag (the slot's sequence number), so a
// receiver knows a word has arrived without any fence or counter: payloads
// up to LLMax travel inside the slot this way (the LL protocol). Larger
// payloads are copied into a data ring and the slot only describes them
// (the Simple protocol). Either way the slot's first word, which the
// receiver polls, is stored last, with release semantics, so a slot's
// cache lines cross to the receiver once.
// The receiver hands ring bytes straight to reductions (RecvWith), and a
// producer can write into the ring directly (Lend/Commit).
//
// A pair may have several channels (NCCL's word): independent FIFOs, each
// its own pair of segments, so a large call can be split across them and
// run by one goroutine per channel. They share the control connection, the
// deadline and the failure state: closing or aborting one closes them all.
//
// Waiters poll, then yield, then sleep on a futex word the other side bumps.
// Shared memory does not tell a receiver that its peer died, so each link
// keeps the pair's TCP connection as a control channel: it carries abort
// reasons, and its end (a process killed with SIGKILL included) wakes every
// waiter at once.
package shm

import (
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gocl/runtime/host"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Slot words (4 bytes of data each): the descriptor, which carries the
// frame's wire header field by field (the magic and version of a socket
// frame are the segment's), then the LL payload or the Simple piece's place
// in the data ring.
const (
	wFlags     = 0  // mode bits, then the header's Kind, Coll and Dtype, a byte each
	wLen       = 1  // this piece's payload bytes (24 bits), then the header's Op
	wRoot      = 2  // the header's Root
	wSeq       = 3  // 2 words: Seq
	wCount     = 5  // 2 words: Count
	wStep      = 7  // Step
	wFrame     = 8  // 2 words: the frame's Len (all its pieces)
	llDesc     = 10 // words of an LL descriptor: the payload follows
	wStart     = 10 // Simple: 2 words: the piece's data-ring position (monotonic)
	wEnd       = 12 // Simple: 2 words: where the data ring is released to after it
	simpleDesc = 14 // words of a Simple descriptor
	modeSimple = 1
	modeMore   = 2 // another piece of the same frame follows
	modeCMA    = 4 // with modeSimple: wStart is the sender's address (cma.go)
	modeShort  = 8 // an LL frame in the short layout below
)

// The short layout of an LL frame, for the common case of a header whose
// Seq and Count fit 32 bits and whose Root fits 16 (and an LL frame is one
// piece, so its Len is the piece's): 5 descriptor words, so a frame of up
// to 12 bytes is one cache line (8 words) and the pair moves one line per
// frame instead of two. A 2-rank 8-byte allreduce is little more than one
// such frame each way: the second line cost a read-for-ownership the
// sender's flag store waited for, and a miss the receiver waited for.
const (
	sLen      = 1 // the payload bytes (8 bits), the header's Op (8), its Root (16)
	sSeq      = 2 // Seq
	sCount    = 3 // Count
	sStep     = 4 // Step
	shortDesc = 5 // the payload follows
)

// A piece's length must fit in wLen's 24 bits.
const _ = uint(1<<24 - MaxPiece)

// LLMax is the largest payload sent inside a slot (LL protocol); larger ones
// go through the data ring (Simple protocol). LL moves 4 bytes per 8-byte
// word and its receiver checks every word's flag, while Simple is one
// memmove each side behind one flag: a 256 B LL frame fills 10 cache lines
// of its slot, Simple 2 of the slot and 4 of the ring. In allreduce
// (gocl-perf, medians of 10-14 alternated runs) Simple was the faster at
// 256 B, with 1 rank per core (0.79 µs against LL's 0.93) and with 2 (6.7
// against 7.8: crowded ranks pay for every line in CPU time); at 128 B they
// were even. (A round trip between two cores alone, earlier: 512 B 0.54 µs
// Simple against LL's 0.85, 1 KiB 0.80 against 1.6.)
const LLMax = 128

// The LL payload must fit in a slot after the descriptor.
const _ = uint((llWords-llDesc)*4 - LLMax)

// MaxPiece is the largest payload one slot describes; larger frames are cut
// into pieces, and the largest a Lend can return. A rank may hold two lent
// frames to a peer before it receives (prims.go), and a piece that would
// cross the ring's end skips to its start, wasting up to a piece: three
// pieces must fit, or both ends of a pair can wait in Lend for each other
// (2 MiB chunks after a small ring frame did).
const MaxPiece = dataBytes / 4

// hotBytes is the part of the data ring that small pieces (up to a quarter
// of it) cycle through: a frame that would go past it starts again at the
// ring's start when that is free. With ranks sharing cores the receiver
// often still holds the previous frame, so the fresh-page rule alone let
// small frames walk the whole 4 MiB ring: cold lines and a TLB miss per
// frame.
const hotBytes = 32 << 10

// BufferedMax bounds Buffered: well inside both the slot FIFO and the ring.
const BufferedMax = 64 << 10

// Options are a link's settings.
type Options struct {
	// Channels is how many FIFO pairs this end offers (at least 1); the
	// pair gets the smaller of both ends' offers.
	Channels int
	// CMA offers single-copy reads of large frames (cma.go); the pair
	// uses them when both ends offer them and the kernel allows them.
	CMA bool
}

// mapping is what the cleanup of a forgotten link unmaps.
type mapping struct {
	recv, send segment // recv: peer -> self (ours); send: self -> peer (the peer's)
	users      atomic.Int64
}

func (m *mapping) unmap() {
	if m.users.CompareAndSwap(0, -1) {
		syscall.Munmap(m.recv.mem)
		syscall.Munmap(m.send.mem)
	}
}

// pair is what the channels of one peer's link share.
type pair struct {
	self, peer int
	ctrl       net.Conn
	ctrlMu     sync.Mutex
	opts       Options
	peerPid    int
	cma        bool             // large frames are read from the sender's memory (cma.go)
	chans      []*link          // chans[0] is the link Connect returns
	use        []transport.Link // the channels the communicator agreed to use (UseChannels)
	useMin     int

	deadline  atomic.Pointer[transport.Deadline] // own, or the communicator's (ShareDeadline)
	own       transport.Deadline                 // SetDeadline's
	closed    atomic.Bool                        // this end closed or aborted
	dead      atomic.Bool                        // the peer's control connection ended
	reason    atomic.Pointer[string]
	closeOnce sync.Once
}

// link is one channel: a FIFO each way.
type link struct {
	*pair
	*mapping

	// sender side (one sending goroutine at a time)
	sseq   uint64 // slots posted
	llTail uint64 // cached: slots the peer has released
	dhead  uint64 // data-ring bytes allocated
	dtail  uint64 // cached: data-ring bytes the peer has released
	fresh  uint64 // ring offsets from here on were never written (page-aligned)
	lent   piece  // the outstanding Lend, if lent.n > 0
	refSeq uint64 // the last slot posted by address (cma.go)
	// receiver side
	rseq    uint64
	scratch []byte

	stats transport.Stats // this channel's
}

type piece struct {
	seq        uint64
	flags, n   int
	start, end uint64
	hdr        wire.Header // received pieces: the header the slot carries
}

// Connect sets up the shared-memory link to peer (process peerPid) over the
// pair's authenticated control connection ctrl, which the link keeps. When
// either side cannot map the other's segments both get an error wrapping
// ErrUnavailable and ctrl is left clean (and open) for another transport.
func Connect(ctrl net.Conn, self, peer, peerPid int, opts Options, deadline time.Time) (transport.Link, error) {
	nch, err := agreeChannels(ctrl, opts.Channels, deadline)
	if err != nil {
		return nil, err
	}
	pr := &pair{self: self, peer: peer, peerPid: peerPid, ctrl: ctrl, opts: opts, useMin: 1}
	pr.deadline.Store(&pr.own)
	maps := make([]*mapping, 0, nch)
	for range nch {
		recv, send, err := handshake(ctrl, peerPid, deadline)
		if err != nil {
			for _, m := range maps {
				m.unmap()
			}
			return nil, err
		}
		m := &mapping{recv: recv, send: send}
		maps = append(maps, m)
		pr.chans = append(pr.chans, &link{pair: pr, mapping: m})
	}
	if pr.cma, err = agreeCMA(ctrl, peerPid, maps[0].recv, opts.CMA, deadline); err != nil {
		for _, m := range maps {
			m.unmap()
		}
		return nil, err
	}
	l := pr.chans[0]
	pr.use = []transport.Link{l}
	// A link dropped without Close still gives its memory back.
	runtime.AddCleanup(l, func(ms []*mapping) {
		for _, m := range ms {
			m.unmap()
		}
	}, maps)
	go l.watch()
	return l, nil
}

// agreeChannels exchanges both ends' channel offers (one byte each way).
func agreeChannels(ctrl net.Conn, offer int, deadline time.Time) (int, error) {
	ctrl.SetDeadline(deadline)
	defer ctrl.SetDeadline(time.Time{})
	b := [1]byte{byte(max(1, min(offer, MaxChannels)))}
	if _, err := ctrl.Write(b[:]); err != nil {
		return 0, err
	}
	var peer [1]byte
	if _, err := io.ReadFull(ctrl, peer[:]); err != nil {
		return 0, err
	}
	return int(max(1, min(b[0], peer[0]))), nil
}

// MaxChannels bounds the channels of a pair (each costs two segments).
const MaxChannels = 16

// NumChannels is how many channels the pair has.
func (l *link) NumChannels() int { return len(l.chans) }

// UseChannels sets how many channels Channels offers: at most hi (and at
// most NumChannels), and lo, the fewest a split call should use. The
// communicator calls it once at init with values every rank agreed on.
func (l *link) UseChannels(lo, hi int) {
	n := max(1, min(hi, len(l.chans)))
	use := make([]transport.Link, n)
	for i := range use {
		use[i] = l.chans[i]
	}
	l.use, l.useMin = use, max(1, min(lo, n))
}

// Channels returns the channels a call may be split across (the first is
// the link itself; the slice is shared, not to be modified) and the fewest
// a split should use.
func (l *link) Channels() ([]transport.Link, int) { return l.use, l.useMin }

func (l *link) Name() string        { return "shm" }
func (l *link) Buffered(n int) bool { return n <= BufferedMax }

func (l *link) SetDeadline(t time.Time) {
	l.own.Set(t)
	l.deadline.Store(&l.own)
}

// ShareDeadline makes every channel's waits take their deadline from d
// (transport.DeadlineSharer) until the next SetDeadline.
func (l *link) ShareDeadline(d *transport.Deadline) { l.deadline.Store(d) }

// enter and exit bracket every use of the mapping, so Close unmaps only once
// nobody is inside it.
func (l *link) enter() bool {
	for {
		u := l.users.Load()
		if u < 0 {
			return false
		}
		if l.users.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

func (l *link) exit() {
	if l.users.Add(-1) == 0 && l.closed.Load() {
		l.unmap()
	}
}

// watch reads the control connection: an abort frame's reason, then its end.
func (l *link) watch() {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	var hb [5]byte
	for {
		if _, err := io.ReadFull(l.ctrl, hb[:]); err != nil {
			break
		}
		n := min(binary.LittleEndian.Uint32(hb[1:]), wire.MaxAbortReason)
		b := make([]byte, n)
		if _, err := io.ReadFull(l.ctrl, b); err != nil {
			break
		}
		r := string(b)
		l.reason.Store(&r)
		break
	}
	l.dead.Store(true)
	l.wakeAll()
}

func (l *link) wakeAll() {
	for _, c := range l.chans {
		c.wakeSelf()
	}
}

// wakeSelf wakes this end's sleeping waiters (they then see closed or dead).
func (l *link) wakeSelf() {
	if !l.enter() {
		return
	}
	atomic.AddUint32(l.recv.u32(offPosted), 1)
	wake(l.recv.u32(offPosted))
	atomic.AddUint32(l.send.u32(offFreed), 1)
	wake(l.send.u32(offFreed))
	l.exit()
}

func (l *link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.wakeAll()
		l.ctrl.Close()
		for _, c := range l.chans {
			c.unmap() // now, or at the last exit of a waiter still inside
		}
	})
	return nil
}

// Abort tells the peer why over the control connection, then closes.
func (l *link) Abort(reason string) {
	if l.closed.Load() {
		return
	}
	if len(reason) > wire.MaxAbortReason {
		reason = reason[:wire.MaxAbortReason]
	}
	b := make([]byte, 5+len(reason))
	b[0] = byte(wire.KindAbort)
	binary.LittleEndian.PutUint32(b[1:], uint32(len(reason)))
	copy(b[5:], reason)
	if l.ctrlMu.TryLock() {
		l.ctrl.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		l.ctrl.Write(b)
		l.ctrlMu.Unlock()
	}
	l.Close()
}

// Failure implements transport.Failer; the peer's reason may still wait on
// the control connection, not yet read by watch.
func (l *link) Failure() error {
	if err := l.failure(); err != nil {
		return err
	}
	return l.pendingAbort()
}

// pendingAbort peeks at an abort frame waiting on the control connection
// without consuming it (watch reads it): Control does not wait for watch's
// blocked read.
func (l *link) pendingAbort() error {
	sc, ok := l.ctrl.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	b := make([]byte, 5+wire.MaxAbortReason)
	n := 0
	raw.Control(func(fd uintptr) { n, _, _ = syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT) })
	if n < 5 || b[0] != byte(wire.KindAbort) {
		return nil
	}
	r := int(min(binary.LittleEndian.Uint32(b[1:]), wire.MaxAbortReason))
	if n < 5+r {
		return nil
	}
	return transport.PeerFailed(l.self, l.peer, string(b[5:5+r]))
}

// failure is the error for a wait that cannot finish: this end closed, or
// the peer gone (with its reason when it sent one).
func (l *link) failure() error {
	if l.closed.Load() {
		return transport.Aborted(l.self, l.peer)
	}
	if !l.dead.Load() {
		return nil
	}
	if r := l.reason.Load(); r != nil {
		return transport.PeerFailed(l.self, l.peer, *r)
	}
	return transport.PeerClosed(l.self, l.peer, "its shared-memory control connection closed")
}

// await returns once ready() holds: polling under the shared waiting
// policy (host.Spin: bare loads, then yielding, for host.SpinFor),
// then sleeping on the futex word fw with *sleep set so the other side
// knows to wake it. Closing, the peer's death and the deadline end the wait
// with an error.
func (l *link) await(k transport.WaitKind, ready func() bool, fw, sleep *uint32, what func() string) error {
	if host.Spin(ready) {
		return nil
	}
	l.stats.BeginWait(k)
	defer l.stats.EndWait()
	for {
		if err := l.failure(); err != nil {
			return err
		}
		d := time.Second // the control channel wakes us on death; this is a backstop
		if dl := l.deadline.Load().UnixNano(); dl != 0 {
			left := time.Duration(dl - transport.Now().UnixNano())
			if left <= 0 {
				if err := l.pendingAbort(); err != nil { // the peer's verdict names the root cause
					return err
				}
				return transport.TimedOut(l.self, l.peer, what())
			}
			d = min(d, left)
		}
		v := atomic.LoadUint32(fw)
		atomic.StoreUint32(sleep, 1)
		if ready() {
			atomic.StoreUint32(sleep, 0)
			return nil
		}
		wait(fw, v, d)
		atomic.StoreUint32(sleep, 0)
		if ready() {
			return nil
		}
	}
}

// ---- sending ----

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
		// path (4 ranks on 2 cores: a 2 KiB allreduce took 60 µs and 8 KiB
		// 150 until the pair had moved 4 MiB, 20 and 52 after). Or it is a
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
	// that may sleep: a locked add on every frame cost as much as the whole
	// slot's stores (4 ranks on 2 cores, 64 B: 39% of post's cycles).
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

// Stats implements transport.Counted: one per channel.
func (l *link) Stats() []*transport.Stats {
	out := make([]*transport.Stats, len(l.chans))
	for i, c := range l.chans {
		out[i] = &c.stats
	}
	return out
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
		// The header is read where it is: copying it into the piece was a
		// tenth of a small Send (wide loads of narrow stores just made).
		p := piece{seq: l.sseq + 1, n: len(data)}
		if err := l.slotFree(p.seq, h); err != nil {
			return err
		}
		l.post(&p, h, data)
		return nil
	}
	if l.cma && len(data) >= CMAMin {
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
	if n <= 0 || n > MaxPiece || l.cma && n >= CMAMin {
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

// ---- receiving ----

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

// descWords is the length of the descriptor whose first word is w0.
func descWords(w0 uint32) int {
	switch {
	case w0&modeSimple != 0:
		return simpleDesc
	case w0&modeShort != 0:
		return shortDesc
	}
	return llDesc
}

// decode sets p's header, mode, length and ring position from a
// descriptor; false when it cannot be one (a corrupt slot).
func decode(d *[simpleDesc]uint32, p *piece) bool {
	h := &p.hdr
	h.Kind, h.Coll, h.Dtype = wire.Kind(d[wFlags]>>8), wire.Coll(d[wFlags]>>16), uint8(d[wFlags]>>24)
	p.flags = int(d[wFlags] & 0xff)
	if p.flags&modeShort != 0 {
		p.n = int(d[sLen] & 0xff)
		h.Op = uint8(d[sLen] >> 8)
		h.Root = int32(d[sLen] >> 16)
		h.Seq, h.Count, h.Step, h.Len = uint64(d[sSeq]), uint64(d[sCount]), d[sStep], uint64(p.n)
		p.start, p.end = 0, 0
	} else {
		p.n = int(d[wLen] & (1<<24 - 1))
		h.Op = uint8(d[wLen] >> 24)
		h.Root = int32(d[wRoot])
		h.Seq = uint64(d[wSeq]) | uint64(d[wSeq+1])<<32
		h.Count = uint64(d[wCount]) | uint64(d[wCount+1])<<32
		h.Step = d[wStep]
		h.Len = uint64(d[wFrame]) | uint64(d[wFrame+1])<<32
		p.start = uint64(d[wStart]) | uint64(d[wStart+1])<<32
		p.end = uint64(d[wEnd]) | uint64(d[wEnd+1])<<32
	}
	return h.Kind == wire.KindColl || h.Kind == wire.KindP2P || h.Kind == wire.KindAbort
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
	var p piece // filled in place: returning it by value was a tenth of a small receive
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
				if err := l.pull(d, p.start); err != nil {
					return err
				}
			case p.flags&modeSimple == 0:
				if err := l.llPayload(&p, d, want); err != nil {
					return err
				}
			default: // cached stores: Go's copy streams 1 MiB pieces to DRAM
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
