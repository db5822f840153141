package shm

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

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
// It is off unless GOCL_SHM_CMA=1. Send keeps its buffer until the
// receiver has read it (prims instead posts on the caller's goroutine and
// flushes at the end of the call, transport.Poster), and the kernel's copy
// can be the slower one: process_vm_readv pays page pinning and a
// page-table walk per 4 KiB page, while the FIFO's two copies run on two
// cores at once and its slots stay in the shared cache (bench/SHM.md:
// allreduce 2-3x slower with it on the 2-core benchmark host).

// CMAMin is the smallest frame read from the sender's memory. Below it the
// data ring wins: a frame up to BufferedMax must never wait for its
// receiver (the algorithms send those inline), and for a small frame the
// rendezvous costs more than the copy it saves.
const CMAMin = 128 << 10

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
		l.post(&p, h, nil)
	}
	l.refSeq = l.sseq
	return nil
}

// flush waits until the receiver has released the last frame posted by
// address (and so read every one).
func (l *link) flush(h *wire.Header) error {
	seq, tail := l.refSeq, l.send.u64(offLLTail)
	if seq <= l.llTail {
		return nil
	}
	return l.await(transport.WaitSend, func() bool {
		l.llTail = atomic.LoadUint64(tail)
		return l.llTail >= seq
	}, l.send.u32(offFreed), l.send.u32(offSendWait), func() string { return "the peer's read of " + h.Describe() })
}

// Post implements transport.Poster: a frame of CMAMin bytes or more on a
// pair that agreed on CMA goes by address, without waiting for the read.
func (l *link) Post(h *wire.Header, data []byte) (bool, error) {
	if !l.cma || len(data) < CMAMin {
		return false, nil
	}
	h.Len = uint64(len(data))
	if !l.enter() {
		return true, transport.Aborted(l.self, l.peer)
	}
	defer l.exit()
	if err := l.failure(); err != nil {
		return true, err
	}
	err := l.postCMA(h, data)
	if err == nil {
		l.stats.CountSent(len(data))
	}
	return true, err
}

// Flush implements transport.Poster.
func (l *link) Flush() error {
	if l.refSeq <= l.llTail {
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
)
