package host

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// PlaceThread moves the calling thread to CPU slot%n of its affinity mask's
// n CPUs and gives the mask back at once: a placement, not a binding, so
// the kernel may still move it. Ranks call it with their local rank and
// their communicator's ranks on this host (of) once set up, from the thread
// that will call them (a C thread that calls into Go keeps its OS thread),
// and only when the host's ranks fill its cores: polling ranks left to the
// kernel stay paired on one core for the tens of ms its load balancer
// takes, while with cores to spare the kernel's choice (SMT siblings,
// interrupt-heavy CPUs, NUMA) is the better one. The communicator with the
// most ranks on this host names the process's home slot (noteHome); a
// smaller one (a split, a 1-rank clique) places its thread there too, not
// at its own local rank, which would put a rank on its neighbour's core.
// Measurements: bench/HOST.md, "Thread placement".
func PlaceThread(slot, of int) {
	if of < 2 {
		return
	}
	noteHome(slot, of)
	if s, most, ok := homeSlot(); ok && of < most {
		slot = s
	}
	place(syscall.Gettid(), slot)
}

func place(tid, slot int) {
	if r := int(ranks.Load()); r < 2 || r < Cores() {
		return
	}
	p := &placement{}
	n, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(p.mask), uintptr(unsafe.Pointer(&p.mask)))
	if errno != 0 || n == 0 {
		return
	}
	p.n = n
	words := p.mask[:n/8]
	c := 0
	for _, w := range words {
		c += bits.OnesCount64(w)
	}
	if c < 2 {
		return
	}
	k := slot % c
	for i, w := range words {
		if k >= bits.OnesCount64(w) {
			k -= bits.OnesCount64(w)
			continue
		}
		for ; k > 0; k-- {
			w &= w - 1 // drop the lowest CPU
		}
		p.one[i] = w & -w
		break
	}
	if p.apply() {
		placed.Store(tid, p)
	}
}

// RestoreThread puts a thread that PlaceThread placed back on its CPU (and
// gives its mask back again). A thread never placed is placed on the
// process's home slot, when it has one: the threads that call collectives
// are not always the one that made the communicator (JAX's collectives run
// on XLA's worker threads, which take turns; a framework may call from its
// own thread), and unplaced, the kernel's wake-ups piled both processes'
// callers on one core of two. The waiting policy calls it when a busy
// phase failed, the sign of a peer that shares this core: two syscalls
// (five the first time), small beside the busy phase.
// Measurements: bench/HOST.md, "Thread placement".
func RestoreThread() {
	tid := syscall.Gettid()
	if p, ok := placed.Load(tid); ok {
		p.(*placement).apply()
	} else if slot, _, ok := homeSlot(); ok {
		place(tid, slot)
	}
}

// home is the process's home slot: the local rank of its communicator with
// the most ranks on this host, packed as of<<32 | slot+1 (slot+1 == 0 with
// of > 0: the communicators with the most ranks disagree, as the ranks of
// one process in Communicator.local do, and there is no home).
var home atomic.Uint64

// noteHome records that a communicator with of ranks on this host has this
// process's rank at slot.
func noteHome(slot, of int) {
	for {
		old := home.Load()
		oldSlot, oldOf := unpackHome(old)
		var next uint64
		switch {
		case of > oldOf:
			next = uint64(of)<<32 | uint64(uint32(slot+1))
		case of == oldOf && oldSlot >= 0 && oldSlot != slot:
			next = uint64(of) << 32 // two homes: none
		default:
			return
		}
		if home.CompareAndSwap(old, next) {
			return
		}
	}
}

// homeSlot is the process's home slot, if it has one, and the most ranks
// on this host of a communicator of this process (one load: both agree).
func homeSlot() (slot, of int, ok bool) {
	slot, of = unpackHome(home.Load())
	return slot, of, of > 0 && slot >= 0
}

func unpackHome(h uint64) (slot, of int) { return int(uint32(h)) - 1, int(h >> 32) }

// placement is a placed thread's CPU and the affinity mask it gives back.
type placement struct {
	mask, one [128]uint64
	n         uintptr
}

func (p *placement) apply() bool {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, p.n, uintptr(unsafe.Pointer(&p.one))); errno != 0 {
		return false
	}
	syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, p.n, uintptr(unsafe.Pointer(&p.mask)))
	return true
}

// placed maps the thread ids placed to their placements (a thread that
// reuses an exited one's id inherits a placement: harmless, it binds
// nothing; the threads that call collectives are few and long-lived).
var placed sync.Map // int -> *placement
