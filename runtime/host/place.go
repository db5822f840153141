package host

import (
	"math/bits"
	"sync"
	"syscall"
	"unsafe"
)

// PlaceThread moves the calling thread to CPU slot%n of its affinity mask's
// n CPUs and gives the mask back at once: a placement, not a binding, so
// the kernel may still move it. Ranks call it with their local rank once
// set up, from the thread that will call them (a C thread that calls into
// Go keeps its OS thread), and only when the host's ranks fill its cores:
// polling ranks left to the kernel stay paired on one core for the tens of
// ms its load balancer takes, while with cores to spare the kernel's choice
// (SMT siblings, interrupt-heavy CPUs, NUMA) is the better one.
// Measurements: bench/HOST.md, "Thread placement".
func PlaceThread(slot int) {
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
		placed.Store(syscall.Gettid(), p)
	}
}

// RestoreThread puts a thread that PlaceThread placed back on its CPU (and
// gives its mask back again); it leaves any other thread alone. The waiting
// policy calls it when a busy phase failed, the sign of a peer that shares
// this core: two syscalls, after a busy phase that cost 10 µs.
// Measurements: bench/HOST.md, "Thread placement".
func RestoreThread() {
	if p, ok := placed.Load(syscall.Gettid()); ok {
		p.(*placement).apply()
	}
}

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

// placed maps the thread ids PlaceThread placed to their placements (a
// thread that reuses an exited one's id inherits a placement: harmless, it
// binds nothing).
var placed sync.Map // int -> *placement
