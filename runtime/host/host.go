// Package host is this process's view of the host it runs on, shared by
// every communicator and every waiter of the process: the cores it may run
// on, the most ranks a communicator put on this host, where ranks' threads
// run (PlaceThread), how many Ps the Go scheduler has while ranks are
// threads of this process (RaiseGOMAXPROCS), and how a waiter polls before
// it sleeps (Spin, Poll, SpinFor).
//
// The state is process-wide: communicators write it at init (NoteRanks,
// PlaceThread), the waiting policy, the transports and the algorithms read
// it. Settings are read again at every communicator init (config.OnReload).
// The package is a leaf: it imports no gocl package but runtime/config.
// Measurements behind its rules: bench/HOST.md.
package host

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"gocl/runtime/config"
)

var (
	spinFor atomic.Int64 // GOCL_SPIN_US, in ns
	cores   atomic.Int32 // CPUs this process may run on
	ranks   atomic.Int32 // the most ranks seen on this host by a communicator of this process
)

func init() {
	config.OnReload(func() {
		spinFor.Store(int64(config.IntOr("SPIN_US", 50)) * int64(time.Microsecond))
		cores.Store(int32(affinityCores()))
	})
}

// NoteRanks records that a communicator of this process has n ranks on this
// host (its own ones included); the host's ranks are the most noted.
func NoteRanks(n int) {
	for {
		old := ranks.Load()
		if int32(n) <= old || ranks.CompareAndSwap(old, int32(n)) {
			return
		}
	}
}

// Cores is the number of CPUs this process may run on (its affinity mask,
// read at each communicator init).
func Cores() int { return int(max(cores.Load(), 1)) }

// Oversubscribed reports whether this host's ranks outnumber the cores.
func Oversubscribed() bool { return int(ranks.Load()) > Cores() }

// RanksPerCore is this host's ranks per core, rounded up (at least 1).
func RanksPerCore() int {
	return max(1, (int(ranks.Load())+Cores()-1)/Cores())
}

// affinityCores counts the CPUs in this process's affinity mask (taskset,
// cgroup cpusets), falling back to all online CPUs.
func affinityCores() int {
	var mask [128]uint64 // 8192 CPUs
	n, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
	if errno != 0 || n == 0 {
		return max(1, runtime.NumCPU())
	}
	c := 0
	for _, w := range mask[:n/8] {
		c += bits.OnesCount64(w)
	}
	return max(c, 1)
}
