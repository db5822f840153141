package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Segment layout, one per direction, owned (created) by the receiver:
//
//	[0, hdrBytes)       control words, each on its own 128-byte line so the
//	                    sender's and the receiver's writes never share one
//	[hdrBytes, +llBytes) LL FIFO: llSlots slots of llSlotBytes
//	[dataOff, +dataBytes) Simple data ring
const (
	lineBytes   = 128
	offMagic    = 0 * lineBytes // uint64, set by the owner
	offPosted   = 1 * lineBytes // uint32 futex: the sender bumps it per posted frame
	offRecvWait = 2 * lineBytes // uint32: the receiver is (about to be) asleep on offPosted
	offLLTail   = 3 * lineBytes // uint64: LL slots the receiver has released
	offDataTail = 4 * lineBytes // uint64: data-ring bytes the receiver has released
	offFreed    = 5 * lineBytes // uint32 futex: the receiver bumps it when it frees room for a sleeping sender
	offSendWait = 6 * lineBytes // uint32: the sender is (about to be) asleep on offFreed
	hdrBytes    = 4096

	llSlots     = 64
	llSlotBytes = 4096
	llWords     = llSlotBytes / 8
	llBytes     = llSlots * llSlotBytes

	dataOff   = hdrBytes + llBytes
	dataBytes = 4 << 20
	segBytes  = dataOff + dataBytes

	segMagic = 0x34_4d48_5320_4c43 // "CL SHM4": packed slot descriptors, short LL frames (slot.go); the handshake ends with the CMA agreement (cma.go)
)

// segment is one mapped direction.
type segment struct{ mem []byte }

func (s segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

// word returns the i-th 8-byte word of LL slot k.
func (s segment) word(k, i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&s.mem[hdrBytes+k*llSlotBytes+8*i]))
}

// populate maps the control words and the LL slots in now: each slot is a
// page of its own, and a page first touched during a call costs a fault
// (the creator's a zeroing too) on the critical path. With many ranks on a
// host (Options.Populate false) most pairs stay idle, and populating every
// pair's slots would hold 0.5 MiB of memory per pair: there they fault in
// as they are used. The data ring is
// left to fault in as it is used (reserve keeps small frames on a few
// pages): populating all of it makes init slow (bench/SHM.md). A kernel
// without MADV_POPULATE_WRITE (before 5.14) faults them in later.
func (s segment) populate() {
	syscall.Madvise(s.mem[:dataOff], madvPopulateWrite)
}

// slot returns LL slot k's words.
func (s segment) slot(k int) *[llWords]uint64 {
	return (*[llWords]uint64)(unsafe.Pointer(&s.mem[hdrBytes+k*llSlotBytes]))
}

func (s segment) data() []byte { return s.mem[dataOff:segBytes:segBytes] }

// create makes an anonymous memory file (memfd: it has no name in /dev/shm,
// so nothing can be left behind by a crash) and maps it.

func create(populate bool) (fd int, s segment, err error) {
	name := []byte("gocl-shm\x00")
	r, _, e := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdCloexec, 0)
	if e != 0 {
		return -1, s, fmt.Errorf("memfd_create: %w", e)
	}
	fd = int(r)
	if err := syscall.Ftruncate(fd, segBytes); err != nil {
		syscall.Close(fd)
		return -1, s, fmt.Errorf("ftruncate: %w", err)
	}
	mem, err := syscall.Mmap(fd, 0, segBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return -1, s, fmt.Errorf("mmap: %w", err)
	}
	s = segment{mem}
	if populate {
		s.populate()
	}
	*s.u64(offMagic) = segMagic
	return fd, s, nil
}

// open maps the peer's memory file through /proc/PID/fd/FD (same user and
// pid namespace; the peer keeps the descriptor open until we say we are done).
func open(pid, fd int, populate bool) (segment, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR, 0)
	if err != nil {
		return segment{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return segment{}, err
	}
	if st.Size() != segBytes {
		return segment{}, fmt.Errorf("segment of %d bytes, want %d (a different gocl version?)", st.Size(), segBytes)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, segBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return segment{}, fmt.Errorf("mmap: %w", err)
	}
	s := segment{mem}
	if populate {
		s.populate()
	}
	if *s.u64(offMagic) != segMagic {
		syscall.Munmap(mem)
		return segment{}, errors.New("segment has the wrong magic (not a gocl segment)")
	}
	return s, nil
}

// held is the bytes of the segments this process receives on (one per
// channel of each shared-memory pair), which GOCL_SHM_BUDGET caps.
var held atomic.Int64

// Held is the bytes of shared-memory segments this process holds.
func Held() int64 { return held.Load() }

// reserve takes one segment's share of budget (0: no cap), if it is left.
func reserve(budget int64) bool {
	if n := held.Add(segBytes); budget > 0 && n > budget {
		held.Add(-segBytes)
		return false
	}
	return true
}

// ErrUnavailable says the pair cannot use shared memory (the peer's segment
// could not be mapped on one side). Both ends get it, and the control
// connection is left clean for another transport.
var ErrUnavailable = errors.New("shared memory unavailable for this pair")

// handshake exchanges segments over ctrl: each side creates the segment it
// will receive on, tells the peer its descriptor, maps the peer's, and both
// say whether that worked, so both reach the same verdict. It writes and
// reads exactly 17 bytes each way, leaving ctrl clean for a fallback.
func handshake(ctrl net.Conn, peerPid int, populate bool, budget int64, deadline time.Time) (recv, send segment, err error) {
	ctrl.SetDeadline(deadline)
	defer ctrl.SetDeadline(time.Time{})
	fd, cerr := -1, error(nil)
	if reserve(budget) {
		if fd, recv, cerr = create(populate); cerr != nil {
			held.Add(-segBytes)
		}
	} else {
		cerr = fmt.Errorf("this process holds %d MiB of shared-memory segments and GOCL_SHM_BUDGET is %d MiB", held.Load()>>20, budget>>20)
	}
	defer func() {
		if err != nil && cerr == nil { // the segment went with the failure: so does its share
			held.Add(-segBytes)
		}
	}()
	var msg [16]byte
	binary.LittleEndian.PutUint64(msg[0:], uint64(int64(fd)))
	binary.LittleEndian.PutUint64(msg[8:], segBytes)
	if _, err := ctrl.Write(msg[:]); err != nil {
		cleanup(fd, recv, segment{})
		return recv, send, err
	}
	if _, err := io.ReadFull(ctrl, msg[:]); err != nil {
		cleanup(fd, recv, segment{})
		return recv, send, err
	}
	peerFd := int(int64(binary.LittleEndian.Uint64(msg[0:])))
	var oerr error = cerr
	if oerr == nil && (peerFd < 0 || binary.LittleEndian.Uint64(msg[8:]) != segBytes) {
		oerr = errors.New("the peer has no segment of this version")
	}
	if oerr == nil {
		send, oerr = open(peerPid, peerFd, populate)
	}
	ok := [1]byte{1}
	if oerr != nil {
		ok[0] = 0
	}
	var peerOK [1]byte
	_, err = ctrl.Write(ok[:])
	if err == nil {
		_, err = io.ReadFull(ctrl, peerOK[:])
	}
	// The peer has mapped our segment (or given up): the descriptor can go;
	// the mapping keeps the memory until both sides unmap it.
	cleanup(fd, segment{}, segment{})
	if err != nil || oerr != nil || peerOK[0] != 1 {
		cleanup(-1, recv, send)
		if err == nil {
			err = ErrUnavailable
			if oerr != nil {
				err = fmt.Errorf("%w: %v", ErrUnavailable, oerr)
			}
		}
		return segment{}, segment{}, err
	}
	return recv, send, nil
}

func cleanup(fd int, segs ...segment) {
	if fd >= 0 {
		syscall.Close(fd)
	}
	for _, s := range segs {
		if s.mem != nil {
			syscall.Munmap(s.mem)
		}
	}
}

const (
	futexWait  = 0
	futexWake  = 1
	mfdCloexec = 1

	madvPopulateWrite = 23
	pageBytes         = 4096
)

// wait sleeps while *addr == val, at most d. Shared (not private) futexes:
// the waker is another process.
func wait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func wake(addr *uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, 1<<30, 0, 0, 0) // never blocks
}
