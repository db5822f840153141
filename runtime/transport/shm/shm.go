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

// MaxPiece is the largest payload one slot describes; larger frames are cut
// into pieces, and the largest a Lend can return. A rank may hold two lent
// frames to a peer before it receives (prims.go), and a piece that would
// cross the ring's end skips to its start, wasting up to a piece: three
// pieces must fit, or both ends of a pair can wait in Lend for each other
// (2 MiB chunks after a small ring frame did).
const MaxPiece = dataBytes / 4

// BufferedMax bounds Buffered: well inside both the slot FIFO and the ring.
const BufferedMax = 64 << 10

// Options are a link's settings.
type Options struct {
	// Channels is how many FIFO pairs this end offers (at least 1); the
	// pair gets the smaller of both ends' offers.
	Channels int
	// CMA offers single-copy reads of large frames (cma.go); the pair
	// can use them when both ends offer them and the kernel allows them.
	// Each end decides which frames it sends that way: CMAMove, only the
	// frames prims move by reference (transport.Mover); CMAAll, every large one.
	CMA CMAMode
	// Populate maps each segment's control words and LL slots in at
	// connect (segment.populate); false leaves them to fault in on use.
	Populate bool
	// Budget caps the bytes of segments this process receives on, over
	// all its pairs (GOCL_SHM_BUDGET; 0: none): a pair that would pass it
	// gets ErrUnavailable at both ends, and another transport.
	Budget int64
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
		held.Add(-segBytes) // reserved by its handshake
	}
}

// pair is what the channels of one peer's link share.
type pair struct {
	self, peer int
	ctrl       net.Conn
	ctrlMu     sync.Mutex
	opts       Options
	peerPid    int
	cma        bool             // the pair agreed that the peer may read this end's memory (cma.go)
	cmaAll     bool             // every large frame this end sends is read from its memory (CMAAll)
	chans      []*link          // chans[0] is the link Connect returns
	use        []transport.Link // the channels the communicator agreed to use (UseChannels)
	useMin     int

	deadline  transport.LinkDeadline // own, or the communicator's (ShareDeadline)
	closed    atomic.Bool            // this end closed or aborted
	dead      atomic.Bool            // the peer's control connection ended
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
	refsMu sync.Mutex
	refs   []uint64 // slots posted by address since the last flush (cma.go: withdraw)
	// receiver side
	rseq    uint64
	scratch []byte

	stats transport.Stats // this channel's
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
	maps := make([]*mapping, 0, nch)
	for range nch {
		recv, send, err := handshake(ctrl, peerPid, opts.Populate, opts.Budget, deadline)
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
	if pr.cma, err = agreeCMA(ctrl, peerPid, maps[0].recv, opts.CMA != CMAOff, deadline); err != nil {
		for _, m := range maps {
			m.unmap()
		}
		return nil, err
	}
	pr.cmaAll = pr.cma && opts.CMA == CMAAll
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

var _ transport.Channeled = (*link)(nil)

func (l *link) Name() string        { return "shm" }
func (l *link) Buffered(n int) bool { return n <= BufferedMax }

func (l *link) SetDeadline(t time.Time) {
	l.deadline.Set(t)
}

// ShareDeadline makes every channel's waits take their deadline from d
// (transport.DeadlineSharer) until the next SetDeadline.
func (l *link) ShareDeadline(d *transport.Deadline) { l.deadline.Share(d) }

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

// watch reads the control connection: an abort frame's reason, then its
// end. It peeks at the frame until it is whole, stores the reason, and only
// then consumes it: at every moment the reason is either stored or still
// on the socket for pendingAbort to see (reading it first left a window in
// which a wait past its deadline found neither, and reported a timeout
// instead of the peer's verdict).
func (l *link) watch() {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	defer func() {
		l.dead.Store(true)
		l.wakeAll()
	}()
	sc, ok := l.ctrl.(syscall.Conn)
	if !ok {
		l.watchStream()
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		l.watchStream()
		return
	}
	b := make([]byte, 5+wire.MaxAbortReason)
	var frame []byte
	raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false // wait for (more of) the frame
		}
		if err != nil {
			return true // the end
		}
		switch k := abortFrame(b[:n]); {
		case k < 0:
			return true // closed, or not a frame: the end
		case k == 0:
			return false
		default:
			frame = b[:k]
			return true
		}
	})
	if frame != nil {
		r := string(frame[5:])
		l.reason.Store(&r)
		io.ReadFull(l.ctrl, make([]byte, len(frame))) // consumed only now
	}
}

// watchStream is watch for a control connection without a descriptor
// (tests' pipes): read, then store.
func (l *link) watchStream() {
	var hb [5]byte
	if _, err := io.ReadFull(l.ctrl, hb[:]); err != nil {
		return
	}
	b := make([]byte, min(binary.LittleEndian.Uint32(hb[1:]), wire.MaxAbortReason))
	if _, err := io.ReadFull(l.ctrl, b); err == nil {
		r := string(b)
		l.reason.Store(&r)
	}
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
		for _, c := range l.chans { // before the control connection ends: the peer may be reading
			if c.enter() {
				c.withdraw()
				c.exit()
			}
		}
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

// Failure implements transport.Link's Failure; the peer's reason may still wait on
// the control connection, not yet read by watch.
func (l *link) Failure() error {
	if err := l.failure(); err != nil {
		return err
	}
	if err := l.pendingAbort(); err != nil {
		return err
	}
	// watch stores the reason before it consumes the frame: a frame gone
	// from the socket since the first look is stored by now.
	return l.failure()
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
	if k := abortFrame(b[:max(n, 0)]); k > 0 {
		return transport.PeerFailed(l.self, l.peer, string(b[5:k]))
	}
	return nil
}

// abortFrame reads what a peek at the control connection saw: the length
// of the whole abort frame at its front, 0 while the frame is incomplete,
// -1 when there is none (nothing, or not a frame).
func abortFrame(b []byte) int {
	switch {
	case len(b) == 0 || b[0] != byte(wire.KindAbort):
		return -1
	case len(b) < 5:
		return 0
	}
	k := 5 + int(min(binary.LittleEndian.Uint32(b[1:5]), wire.MaxAbortReason))
	if len(b) < k {
		return 0
	}
	return k
}

// failure is the error for a wait that cannot finish: this end closed, or
// the peer gone (with its reason when it sent one).
func (l *link) failure() error {
	if l.closed.Load() {
		return transport.Aborted(l.self, l.peer)
	}
	if r := l.reason.Load(); r != nil { // stored before watch consumes the frame: no gap
		return transport.PeerFailed(l.self, l.peer, *r)
	}
	if !l.dead.Load() {
		return nil
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
			if !l.closed.Load() && ready() {
				return nil // the peer's last frame came before it left (a final barrier): take it
			}
			return err
		}
		d := time.Second // the control channel wakes us on death; this is a backstop
		if dl := l.deadline.Get().UnixNano(); dl != 0 {
			left := time.Duration(dl - transport.Now().UnixNano())
			if left <= 0 {
				if err := l.Failure(); err != nil { // the peer's verdict names the root cause
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
		// A close or the peer's death marks the link before it bumps fw:
		// one that came between the check above and the load of v is seen
		// here, not after the 1 s backstop.
		if l.closed.Load() || l.dead.Load() || l.reason.Load() != nil {
			atomic.StoreUint32(sleep, 0)
			continue
		}
		wait(fw, v, d)
		atomic.StoreUint32(sleep, 0)
		if ready() {
			return nil
		}
	}
}

// Stats implements transport.Counted: one per channel.
func (l *link) Stats() []*transport.Stats {
	out := make([]*transport.Stats, len(l.chans))
	for i, c := range l.chans {
		out[i] = &c.stats
	}
	return out
}
