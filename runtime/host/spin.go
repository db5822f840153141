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
//   - busy polling (up to busyFor of bare loads, less while polls keep
//     failing: see busyRounds) only while this process has a
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
// Ranks of one process poll for that long; waits for another process
// (Spin) poll longer on crowded hosts (crowdedSpin).
func SpinFor() time.Duration {
	d := time.Duration(spinFor.Load())
	if r := int64(hostRanks.Load()); r > int64(Cores()) {
		d = d * time.Duration(Cores()) / time.Duration(r)
	}
	return d
}

// crowdedSpin bounds how long a waiter for another process keeps yielding
// when the host's ranks outnumber its cores (GOCL_SPIN_US=0 still sleeps at
// once). Such waits end when a peer on this core (which the yield runs) or
// on another one has produced a frame: tens to hundreds of µs for frames of
// 32 KiB and up. A yield costs that peer nothing, but a waiter that sleeps
// leaves its core idle when its core-mate waits too, and each futex wake
// lets the kernel re-place ranks, piling them onto one core. Measured with
// 4 processes on 2 cores (gocl-perf all_reduce, medians of 5 alternated
// runs): at 25 µs the ranks used 1.6-1.8 CPUs at 256 KiB-4 MiB, at 1 ms
// 2.0, and 16 KiB-64 MiB ran 1.0-1.5x faster; 8 B-8 KiB did not change.
// Not for ranks of one process: a poller there holds one of the few Ps
// (GOMAXPROCS) its peers' goroutines need, so it would delay them instead.
const crowdedSpin = time.Millisecond

// crowdBudget is the budget of the next crowded wait for another process,
// in ns (0: crowdedSpin). It adapts as busyRounds does: a wait that spends
// it all and sleeps halves it (down to SpinFor), one that ends while
// polling doubles it. Waits that outlast any poll (a peer busy with other
// work between calls) would otherwise burn the whole budget each time:
// that made the shm collective tests with 3 to 8 processes on 2 cores 3x
// slower.
var crowdBudget atomic.Int64

// spinAcross is Spin's budget: SpinFor, or on a crowded host crowdBudget,
// at least SpinFor.
func spinAcross() (d time.Duration, crowded bool) {
	d = SpinFor()
	if d <= 0 || !Oversubscribed() {
		return d, false
	}
	b := time.Duration(crowdBudget.Load())
	if b == 0 {
		b = crowdedSpin
	}
	return max(d, b), true
}

// busyFor bounds the busy phase: how long a waiter polls with bare loads
// before it starts yielding, while the host's ranks do not outnumber its
// cores. A bound in time, not in polls, so it does not depend on the CPU.
const busyFor = 10 * time.Microsecond

// The busy phase adapts to where the peer runs. On another core, its
// answer comes within a µs or so and polling catches it. On this core (the
// scheduler put both ranks on one CPU: a waiter that yields looks like half
// a CPU, and two of them fit on one), polling cannot succeed, every wait
// burns the whole phase, and a 2-rank exchange took 16-22 µs with a 10 µs
// phase and 60 µs with a 50 µs one (OpenMPI's ranks, which never yield,
// take a core each: 0.5 µs). So a wait whose busy phase fails halves the
// next ones, down to none, and one wait in probeEvery runs the whole phase
// to notice that the peer has a core of its own again. Any wait that
// succeeds while polling busily restores the whole phase: on a host loaded
// by other programs the peer is descheduled now and then, and halving for
// good at each of those left two ranks on two cores yielding at every wait
// (4-7 µs an 8-byte allreduce at load 5, against OpenMPI's 0.5).
var busyRounds atomic.Int32 // rounds of clockPolls polls; starts at the most

// probeEvery: one wait in this many polls for the whole busy phase.
const probeEvery = 16

var waits atomic.Uint32 // waits that polled, for the probes

// maxBusyRounds is the most rounds a busy phase can run (busyFor ends it
// earlier on a slow clock).
const maxBusyRounds = 64

func init() { busyRounds.Store(maxBusyRounds) }

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

// RanksPerCore is this host's ranks per core, rounded up (at least 1).
func RanksPerCore() int {
	return max(1, (int(hostRanks.Load())+Cores()-1)/Cores())
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

// Settle moves the calling thread to CPU slot%n of its affinity mask's n
// CPUs and gives the mask back at once: a placement, not a binding, so the
// kernel may still move it. Ranks of one host that wait by polling spread
// badly when left to the kernel: ranks found on a shared core after init
// stay there for the tens of ms its load balancer needs to move a task that
// ran within the last 0.5 ms (a poller always has), and 4 ranks on 2 cores
// took 4.6-6.6 µs an 8-byte allreduce spread 2+2, 7-9 µs spread 3+1 and
// 10-15 µs all on one core; 2 ranks on one core of 2, 4-7 µs against 0.7.
// Ranks call it with their local rank once set up, from the thread that
// will call them (a C thread that calls into Go keeps its OS thread). Only
// when the host's ranks fill its cores: with cores to spare the kernel's
// choice (SMT siblings, interrupt-heavy CPUs, NUMA) is the better one.
func Settle(slot int) {
	if r := int(hostRanks.Load()); r < 2 || r < Cores() {
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
		settled.Store(syscall.Gettid(), p)
	}
}

// placement is a settled thread's CPU and the affinity mask it gives back.
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

// settled maps the thread ids Settle placed to their placements (a thread
// that reuses an exited one's id inherits a placement: harmless, it binds
// nothing).
var settled sync.Map // int -> *placement

// Resettle puts a thread that Settle placed back on its CPU; poll calls it
// when a busy phase failed, the sign of a peer that shares this core. Ranks
// paired on one core stay paired for the tens of ms the load balancer
// takes: an 8-byte allreduce on 2 ranks and 2 cores took 3.5-8.8 µs
// instead of 0.4-0.6 in 9 of 60 short runs (gocl-perf -n 1000), against 1
// of 60 with it. Two syscalls, after a busy phase that cost 10 µs.
func Resettle() {
	if p, ok := settled.Load(syscall.Gettid()); ok {
		p.(*placement).apply()
	}
}

// poll runs try under the policy: busy (for an adaptive part of busyFor),
// then yielding, until it succeeds or limit is spent. It reports
// whether try succeeded. The clock is read only every clockPolls polls (a
// read costs 0.1-0.3 µs on some VMs, more than a whole exchange), so a
// wait that ends within a µs or so never reads it.
func poll(try func() bool, limit time.Duration) bool {
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
		cur, probe := busyRounds.Load(), waits.Add(1)%probeEvery == 0
		rounds := cur
		if probe {
			rounds = maxBusyRounds
		}
		busy := min(busyFor, limit)
		for i := int32(0); i < rounds; i++ {
			for range clockPolls {
				if try() {
					if cur != maxBusyRounds {
						busyRounds.Store(maxBusyRounds)
					}
					return true
				}
			}
			now := since()
			if start == 0 {
				start = now
			} else if now-start >= busy {
				break
			}
		}
		if rounds > 0 {
			if !probe {
				busyRounds.CompareAndSwap(rounds, rounds/2)
			}
			Resettle() // a peer that busy polling misses may share this core
		}
	}
	for {
		// Raw: a yield never blocks, and a Syscall that outlasts sysmon's
		// 20 µs tick (the core went to another rank) has its P handed off,
		// which wakes another thread, and keeps sysmon ticking every 20 µs:
		// both steal the core that crowded ranks share.
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if try() {
			return true
		}
		// The budget starts after the first yield when the busy phase did
		// not read the clock: a wait that one yield ends reads it not at all.
		if now := since(); start == 0 {
			start = now
		} else if now-start >= limit {
			return false
		}
	}
}

// clockPolls is how many bare polls run between clock reads (about 1 µs).
const clockPolls = 512

// quickPolls is how many bare polls Spin runs first (about 0.1-0.2 µs).
const quickPolls = 64

// Spin calls try until it reports success or the policy's polling budget
// is spent, and returns whether try succeeded. The caller then sleeps its
// own way (a futex, the netpoller).
func Spin(try func() bool) bool {
	// A few bare polls before the policy's bookkeeping (three atomic adds
	// on process-wide counters): a peer on another core that is about to
	// post, the common case of a small exchange, is caught without them.
	for range quickPolls {
		if try() {
			return true
		}
	}
	limit, crowded := spinAcross()
	ok := poll(try, limit)
	if crowded {
		next := limit / 2
		if ok {
			next = min(2*limit, crowdedSpin)
		}
		if next != limit {
			crowdBudget.Store(int64(next))
		}
	}
	return ok
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
