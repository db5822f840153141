package shm

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"gocl/runtime/config"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Single-copy large frames (Linux cross-memory attach). A frame of at least
// CMAMin bytes is not copied into the data ring: its slot carries the
// address of the sender's buffer, the receiver reads it with
// process_vm_readv straight into its destination (or, for a reduction, a
// cache-sized piece at a time), and the sender's Send returns once the
// receiver has released the slot. One copy per byte instead of two, and no
// pass through a ring that the sender and the receiver both evict from L2.
//
// The kernel allows it between processes of one user unless ptrace is
// restricted (Yama's ptrace_scope, a seccomp filter, a container without
// CAP_SYS_PTRACE under scope 1...). Whether it works is tried once per
// pair at connect time, each end reading a word of the other's segment,
// and the pair uses it only when both reads succeed (and both ends allow
// it), so both ends always agree.
//
// Which frames go that way is each sender's choice (Options.CMA,
// GOCL_SHM_CMA). By default (CMAMove) only plain data movement that prims
// hands over by reference (transport.Mover: an allgather's or a
// broadcast's frames, in calls of up to 1 MiB): there one copy instead of
// three (the sender's own block, its copy into the ring, the receiver's
// copy out) halves the time, as Open MPI's single copy does (bench/SHM.md,
// "Single-copy reads"). Frames the peer reduces stay on the
// FIFO: there the kernel's copy is the slower one, paying page pinning and
// a page-table walk per 4 KiB page while the FIFO's two copies run on two
// cores at once and its slots stay in the shared cache (CMAAll made
// allreduce slower on the 2-core benchmark host), and so do large calls.
// With Yama's ptrace_scope above 0 the default offers nothing: the read
// would be refused between sibling ranks, and each refusal logged by the
// kernel. Send keeps its buffer until the receiver has read it (prims
// instead posts on the caller's goroutine and flushes at the end of the
// call, transport.Poster).

// CMAMode says which frames a sender has read from its memory.
type CMAMode uint8

const (
	CMAOff  CMAMode = iota // none
	CMAMove                // plain data movement handed over by reference (transport.Mover)
	CMAAll                 // every frame of CMAMin bytes or more
)

// PtraceOpen reports whether the kernel lets a process read a sibling's
// memory without a log line: no Yama, or Yama's ptrace_scope 0. Read at
// each communicator init (config.OnReload), not once per pair.
func PtraceOpen() bool { return ptraceOpen.Load() }

var ptraceOpen atomic.Bool

func init() {
	config.OnReload(func() {
		b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
		ptraceOpen.Store(err != nil || strings.TrimSpace(string(b)) == "0")
	})
}

// CMAMin is the smallest frame read from the sender's memory. Below it the
// data ring wins: a frame up to BufferedMax must never wait for its
// receiver (the algorithms send those inline), and for a small frame the
// rendezvous costs more than the copy it saves.
const CMAMin = 128 << 10

// MoveMin is the smallest frame of plain data movement read from the
// sender's memory (transport.Mover). Below CMAMin, since such a frame saves
// the sender's copy into the ring too (prims copies its own block while the
// peer reads); at smaller frames the rendezvous costs more than the copy
// it saves (bench/SHM.md, "Single-copy reads").
const MoveMin = 64 << 10

// cmaStep is how much a piecewise receive reads per process_vm_readv: the
// piece, the local operand and the destination fit in a 1 MiB L2 together.
const cmaStep = 256 << 10

// cmaMaxPiece bounds one slot's frame piece (its length is a 32-bit word).
const cmaMaxPiece = 1 << 30

// iovec is struct iovec; remoteVec is one in the peer's address space.
type iovec struct {
	base unsafe.Pointer
	n    uintptr
}

type remoteVec struct{ base, n uintptr }

// errNoCMA says the kernel refused a cross-memory read (not permitted, or
// the peer is gone).
var errNoCMA = errors.New("process_vm_readv refused")

// readPeer copies len(dst) bytes at address src in process pid into dst.
func readPeer(pid int, dst []byte, src uint64) error {
	for len(dst) > 0 {
		local := iovec{unsafe.Pointer(&dst[0]), uintptr(len(dst))}
		remote := remoteVec{uintptr(src), uintptr(len(dst))}
		r, _, e := syscall.Syscall6(sysProcessVMReadv, uintptr(pid),
			uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return errors.Join(errNoCMA, e)
		case r == 0:
			return errNoCMA
		}
		dst = dst[r:]
		src += uint64(r)
	}
	return nil
}

// agreeCMA finds out whether both ends may read each other's memory: each
// sends the address of its receive segment's magic word (0: not offered),
// reads the peer's with process_vm_readv, and both tell the other whether
// that worked. Exactly 9 bytes go each way.
func agreeCMA(ctrl net.Conn, peerPid int, own segment, offer bool, deadline time.Time) (bool, error) {
	ctrl.SetDeadline(deadline)
	defer ctrl.SetDeadline(time.Time{})
	var msg [8]byte
	if offer {
		binary.LittleEndian.PutUint64(msg[:], uint64(uintptr(unsafe.Pointer(own.u64(offMagic)))))
	}
	if _, err := ctrl.Write(msg[:]); err != nil {
		return false, err
	}
	if _, err := io.ReadFull(ctrl, msg[:]); err != nil {
		return false, err
	}
	ok := [1]byte{0}
	if addr := binary.LittleEndian.Uint64(msg[:]); offer && addr != 0 {
		var w [8]byte
		if readPeer(peerPid, w[:], addr) == nil && binary.LittleEndian.Uint64(w[:]) == segMagic {
			ok[0] = 1
		}
	}
	if _, err := ctrl.Write(ok[:]); err != nil {
		return false, err
	}
	var peerOK [1]byte
	if _, err := io.ReadFull(ctrl, peerOK[:]); err != nil {
		return false, err
	}
	return ok[0] == 1 && peerOK[0] == 1, nil
}

// sendCMA posts data by address and returns once the receiver has read it.
func (l *link) sendCMA(h *wire.Header, data []byte) error {
	if err := l.postCMA(h, data); err != nil {
		return err
	}
	err := l.flush(h)
	runtime.KeepAlive(data)
	return err
}

// postCMA posts data by address, in pieces of at most cmaMaxPiece. data
// stays where it is: frames this large live on the heap or in C memory
// (never on a goroutine stack, which may move), and Go's collector does not
// move heap objects.
func (l *link) postCMA(h *wire.Header, data []byte) error {
	for off := 0; off < len(data); {
		n := min(len(data)-off, cmaMaxPiece)
		// end: the data ring is released to where it already is.
		p := piece{seq: l.sseq + 1, flags: modeSimple | modeCMA, n: n,
			start: uint64(uintptr(unsafe.Pointer(&data[off]))), end: l.dhead}
		if err := l.slotFree(p.seq, h); err != nil {
			return err
		}
		if off += n; off < len(data) {
			p.flags |= modeMore
		}
		atomic.StoreUint64(&l.send.slot(int(p.seq % llSlots))[wClaim], claimWord(p.seq, claimPosted)) // before post publishes the slot
		l.refsMu.Lock()
		l.refs = append(l.refs, p.seq)
		l.refsMu.Unlock()
		l.post(&p, h, nil)
	}
	l.refSeq = l.sseq
	return nil
}

// flush waits until the receiver has released the last frame posted by
// address (and so read every one). When the wait fails (deadline, abort)
// the frames it has not read are withdrawn, so the caller may reuse them.
func (l *link) flush(h *wire.Header) error {
	seq, tail := l.refSeq, l.send.u64(offLLTail)
	if seq <= l.llTail {
		l.forgetRefs()
		return nil
	}
	err := l.await(transport.WaitSend, func() bool {
		l.llTail = atomic.LoadUint64(tail)
		return l.llTail >= seq
	}, l.send.u32(offFreed), l.send.u32(offSendWait), func() string { return "the peer's read of " + h.Describe() })
	if err != nil {
		l.withdraw()
	} else {
		l.forgetRefs()
	}
	return err
}

// The claim word of a piece posted by address (wClaim): the receiver moves
// it from posted to claimed before process_vm_readv, a sender that gives
// the frame up (its flush failed, its link closes) from posted to
// withdrawn. So a sender's buffer is never read after its call returns:
// without it, a receiver already inside the read when the sender's call
// failed could return the bytes the caller was reusing as a good frame.
const (
	claimPosted uint64 = iota
	claimClaimed
	claimWithdrawn
)

// claimWord is a claim state as the slot holds it: tagged with the piece's
// sequence like every slot word, so a later LL frame in the slot never
// takes a claim word left there for payload.
func claimWord(seq, state uint64) uint64 { return uint64(uint32(seq))<<32 | state }

// withdrawWait bounds the wait for a read the peer has claimed (its reads
// never block, so it ends in a release, or with the peer).
const withdrawWait = 10 * time.Second

func (l *link) forgetRefs() {
	l.refsMu.Lock()
	l.refs = l.refs[:0]
	l.refsMu.Unlock()
}

// withdraw takes back the pieces posted by address that the peer has not
// released; one it is reading now is waited for. Inside enter/exit.
func (l *link) withdraw() {
	l.refsMu.Lock()
	defer l.refsMu.Unlock()
	tail := l.send.u64(offLLTail)
	for _, seq := range l.refs {
		if atomic.LoadUint64(tail) >= seq {
			continue
		}
		if atomic.CompareAndSwapUint64(&l.send.slot(int(seq % llSlots))[wClaim], claimWord(seq, claimPosted), claimWord(seq, claimWithdrawn)) {
			continue
		}
		for end := time.Now().Add(withdrawWait); atomic.LoadUint64(tail) < seq && !l.dead.Load() && time.Now().Before(end); {
			time.Sleep(20 * time.Microsecond)
		}
	}
	l.refs = l.refs[:0]
}

// claim takes a piece posted by address for reading; a piece its sender
// withdrew fails the receive.
func (l *link) claim(p *piece) error {
	if atomic.CompareAndSwapUint64(&l.recv.slot(int(p.seq % llSlots))[wClaim], claimWord(p.seq, claimPosted), claimWord(p.seq, claimClaimed)) {
		return nil
	}
	return transport.PeerFailed(l.self, l.peer, "it took back a frame it was sending by address (its call failed)")
}

// Post implements transport.Poster: with CMAAll, a frame of CMAMin bytes or
// more on a pair that agreed on CMA goes by address, without waiting for
// the read.
func (l *link) Post(h *wire.Header, data []byte) (bool, error) {
	if !l.cmaAll || len(data) < CMAMin {
		return false, nil
	}
	return true, l.postRef(h, data)
}

// Moves implements transport.Mover: on a pair that agreed on CMA, plain
// data movement of MoveMin bytes or more goes by address.
func (l *link) Moves(n int) bool { return l.cma && n >= MoveMin }

// Move implements transport.Mover.
func (l *link) Move(h *wire.Header, data []byte) error { return l.postRef(h, data) }

func (l *link) postRef(h *wire.Header, data []byte) error {
	h.Len = uint64(len(data))
	if !l.enter() {
		return transport.Aborted(l.self, l.peer)
	}
	defer l.exit()
	if err := l.failure(); err != nil {
		return err
	}
	err := l.postCMA(h, data)
	if err == nil {
		l.stats.CountSent(len(data))
	}
	return err
}

// Flush implements transport.Poster.
func (l *link) Flush() error {
	if l.refSeq <= l.llTail { // read already (slotFree refreshes llTail too)
		l.forgetRefs()
		return nil
	}
	if !l.enter() {
		return transport.Aborted(l.self, l.peer)
	}
	defer l.exit()
	return l.flush(&wire.Header{})
}

// pull reads n = len(dst) bytes of the peer's memory at addr.
func (l *link) pull(dst []byte, addr uint64) error {
	if err := readPeer(l.peerPid, dst, addr); err != nil {
		if ferr := l.failure(); ferr != nil {
			return ferr
		}
		return transport.PeerClosed(l.self, l.peer, "reading a frame from its memory: "+err.Error())
	}
	return nil
}

// RecvPieces implements transport.PieceReceiver: ring pieces are handed over
// where they lie, single-copy frames a cache-sized piece at a time.
func (l *link) RecvPieces(want *wire.Header, use func(off int, piece []byte)) error {
	return l.frame(want, nil, nil, use)
}

// givePiece hands one FIFO piece of a frame, at offset off, to use.
func (l *link) givePiece(p *piece, want *wire.Header, off int, use func(off int, piece []byte)) error {
	switch {
	case p.flags&modeCMA != 0:
		if err := l.claim(p); err != nil {
			return err
		}
		if cap(l.scratch) < cmaStep {
			l.scratch = make([]byte, cmaStep)
		}
		for o := 0; o < p.n; o += cmaStep {
			b := l.scratch[:min(cmaStep, p.n-o)]
			if err := l.pull(b, p.start+uint64(o)); err != nil {
				return err
			}
			use(off+o, b)
		}
	case p.flags&modeSimple == 0:
		if cap(l.scratch) < p.n {
			l.scratch = make([]byte, p.n)
		}
		b := l.scratch[:p.n]
		if err := l.llPayload(p, b, want); err != nil {
			return err
		}
		use(off, b)
	default:
		use(off, l.ring(p))
	}
	return nil
}

var (
	_ transport.PieceReceiver = (*link)(nil)
	_ transport.Poster        = (*link)(nil)
	_ transport.Mover         = (*link)(nil)
)
