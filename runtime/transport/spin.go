package transport

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"gocl/runtime/config"
)

// The waiting policy every transport shares. A waiter first polls, then
// sleeps (Await sleeps on a futex; Spin's callers park their own way):
//
//   - busy polling (busyFor of bare loads) only while this process has a
//     core to spare for it and the host's ranks do not outnumber its cores;
//   - polling with sched_yield for GOCL_SPIN_US, each round offering the
//     core to whoever needs it, while fewer waiters poll than there are
//     cores; a thread that C called into is locked to its goroutine, and
//     parking it costs a thread hand-off of tens of µs on wake-up, which
//     polling avoids;
//   - when ranks outnumber cores (NoteHostRanks), no busy polling, and the
//     yielding is cut by cores per rank: a poller would take the core that
//     the peer it waits for (or the application's compute) needs.
//
// The settings are process-wide, read again at every communicator init.
var (
	spinFor   atomic.Int64 // GOCL_SPIN_US, in ns
	cores     atomic.Int32 // CPUs this process may run on
	hostRanks atomic.Int32 // the most ranks seen on this host by a communicator of this process
	polling   atomic.Int32 // waiters polling now, in this process
)

func init() {
	config.OnReload(func() {
		spinFor.Store(int64(config.IntOr("SPIN_US", 50)) * int64(time.Microsecond))
		cores.Store(int32(affinityCores()))
	})
}

// SpinFor is how long a waiter polls now: GOCL_SPIN_US, scaled by cores per
// rank when the host's ranks outnumber its cores (4 ranks on 2 cores poll
// half as long, 8 a quarter), so pollers leave the cores to the ranks and
// the compute that need them while a peer running now is still caught.
func SpinFor() time.Duration {
	d := time.Duration(spinFor.Load())
	if r := int64(hostRanks.Load()); r > int64(Cores()) {
		d = d * time.Duration(Cores()) / time.Duration(r)
	}
	return d
}

// busyFor is how long a waiter polls with bare loads before it starts
// yielding, while the host's ranks do not outnumber its cores: the peer is
// then most likely running on another core, and a round trip over shared
// memory takes well under a µs. A bound in time, not in polls, so it does
// not depend on the CPU. Longer does not pay on a loaded host: a 2-rank
// ping-pong with 10 runnable tasks on 2 cores took 2-4x longer at 100 µs
// than at 0.5-20 µs, which measured alike within the noise.
const busyFor = 10 * time.Microsecond

// NoteHostRanks tells the policy that a communicator of this process has n
// ranks on this host (its own ones included).
func NoteHostRanks(n int) {
	for {
		old := hostRanks.Load()
		if int32(n) <= old || hostRanks.CompareAndSwap(old, int32(n)) {
			return
		}
	}
}

// Cores is the number of CPUs this process may run on (its affinity mask,
// read at each communicator init).
func Cores() int { return int(max(cores.Load(), 1)) }

// Oversubscribed reports whether this host's ranks outnumber the cores.
func Oversubscribed() bool { return int(hostRanks.Load()) > Cores() }

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

// poll runs try under the policy: busy, then yielding, until it succeeds or
// the budget is spent. It reports whether try succeeded. The clock is read
// only after clockPolls polls and then every clockPolls (a read costs
// 0.1-0.3 µs on some VMs, more than a whole exchange), so a wait that ends
// within a µs or so never reads it.
func poll(try func() bool) bool {
	limit := SpinFor()
	if limit <= 0 {
		return false
	}
	if n := polling.Add(1); int(n) > Cores() { // every core has a poller already
		polling.Add(-1)
		return false
	}
	defer polling.Add(-1)
	var start time.Duration // since epoch; 0: not read yet
	if !Oversubscribed() {
		busy := min(busyFor, limit)
	busyLoop:
		for {
			for range clockPolls {
				if try() {
					return true
				}
			}
			switch now := since(); {
			case start == 0:
				start = now
			case now-start >= busy:
				break busyLoop
			}
		}
	}
	if start == 0 {
		start = since()
	}
	for {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if try() {
			return true
		}
		if since()-start >= limit {
			return false
		}
	}
}

// clockPolls is how many bare polls run between clock reads (about 1 µs).
const clockPolls = 512

// Spin calls try until it reports success or the policy's polling budget
// is spent, and returns whether try succeeded. The caller then sleeps its
// own way (a futex, the netpoller).
func Spin(try func() bool) bool {
	return try() || poll(try)
}

// ShareProcess prepares the Go scheduler for ranks that are threads of this
// process: a polling rank holds a P, as does a rank running Go code for a C
// thread, so with GOMAXPROCS at the core count a sender goroutine of another
// rank could wait for a P while pollers keep them all. GOMAXPROCS becomes at
// least twice the cores (pollers are at most one per core); the OS still
// shares the cores, and pollers yield theirs. Not when ranks outnumber
// cores: polls are then a few µs, and more threads running memory-bound
// copies on the same cores only thrash (measured with 8 ranks on 2 cores).
//
// The setting is the Go runtime's inside libgocl.so, which runs only gocl's
// goroutines (the host's threads are not Go's), and it lasts only while
// such ranks exist: each in-process link calls ShareProcess once and the
// returned release when it closes; the last release puts back the value
// found before the first raise.
func ShareProcess() (release func()) {
	shared.Lock()
	defer shared.Unlock()
	shared.users++
	if want := 2 * Cores(); !Oversubscribed() && runtime.GOMAXPROCS(0) < want {
		if was := runtime.GOMAXPROCS(want); shared.prev == 0 {
			shared.prev = was
		}
	}
	return sync.OnceFunc(func() {
		shared.Lock()
		defer shared.Unlock()
		if shared.users--; shared.users == 0 && shared.prev != 0 {
			runtime.GOMAXPROCS(shared.prev)
			shared.prev = 0
		}
	})
}

// shared is ShareProcess's state: the links that asked for it, and
// GOMAXPROCS before it was raised (0: not raised).
var shared struct {
	sync.Mutex
	users, prev int
}
