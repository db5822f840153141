package host

import (
	"sync/atomic"
	"syscall"
	"time"
)

// The waiting policy every waiter of this process shares (the transports'
// links, the streams' workers). A waiter first polls, then sleeps its own
// way (transport.Await on a Bell, shm on a futex, a socket on the
// netpoller, a stream on its condition variable):
//
//   - busy polling (bare loads, for an adaptive part of busyFor: see
//     busyRounds) only while the host's ranks do not outnumber its cores;
//   - then polling with sched_yield for SpinFor (GOCL_SPIN_US), each round
//     offering the core to whoever needs it, while fewer waiters of this
//     process poll than there are cores; a thread that C called into is
//     locked to its goroutine, and parking it costs a thread hand-off on
//     wake-up, which polling avoids;
//   - when ranks outnumber cores (NoteRanks), no busy polling, and the
//     yielding is cut by cores per rank: a poller would take the core that
//     the peer it waits for (or the application's compute) needs; waits for
//     another process (Spin) then yield up to crowdedSpin instead.
//
// Measurements behind each rule: bench/HOST.md, "Waiting policy".

var polling atomic.Int32 // waiters polling now, in this process

// epoch anchors since: the policy reads only the monotonic clock.
var epoch = time.Now()

// since is the monotonic time since epoch.
func since() time.Duration { return time.Since(epoch) }

// SpinFor is how long a waiter polls now: GOCL_SPIN_US, scaled by cores per
// rank when the host's ranks outnumber its cores (4 ranks on 2 cores poll
// half as long, 8 a quarter), so pollers leave the cores to the ranks and
// the compute that need them while a peer running now is still caught.
// Waits on ranks of this process (Poll) poll for that long; waits for
// another process (Spin) poll longer on crowded hosts (crowdedSpin).
func SpinFor() time.Duration {
	d := time.Duration(spinFor.Load())
	if r := int64(ranks.Load()); r > int64(Cores()) {
		d = d * time.Duration(Cores()) / time.Duration(r)
	}
	return d
}

// crowdedSpin bounds how long a waiter for another process keeps yielding
// when the host's ranks outnumber its cores (GOCL_SPIN_US=0 still sleeps at
// once). A yield costs the peer it waits for nothing, while a waiter that
// sleeps leaves its core idle when its core-mate waits too, and each futex
// wake lets the kernel re-place ranks, piling them onto one core. Not for
// ranks of one process: a poller there holds one of the few Ps (GOMAXPROCS)
// its peers' goroutines need, so it would delay them instead.
// Measurements: bench/HOST.md, "Crowded hosts".
const crowdedSpin = time.Millisecond

// crowdBudget is the budget of the next crowded wait for another process,
// in ns (0: crowdedSpin). It adapts as busyRounds does: a wait that spends
// it all and sleeps halves it (down to SpinFor), one that ends while
// polling doubles it, so waits that outlast any poll (a peer busy with
// other work between calls) do not burn the whole budget each time.
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

// busyRounds is the next busy phase, in rounds of clockPolls polls (it
// starts at the most). The phase adapts to where the peer runs: on another
// core its answer comes within a µs or so and polling catches it; on this
// core polling cannot succeed and every wait would burn the whole phase.
// So a wait whose busy phase fails halves the next ones, down to none; one
// wait in probeEvery runs the whole phase to notice that the peer has a
// core of its own again; and any wait that succeeds while polling busily
// restores the whole phase (on a loaded host the peer is descheduled now
// and then, which must not leave ranks yielding for good).
// Measurements: bench/HOST.md, "Busy phase".
var busyRounds atomic.Int32

// probeEvery: one wait in this many polls for the whole busy phase.
const probeEvery = 16

var waits atomic.Uint32 // waits that polled, for the probes

// maxBusyRounds is the most rounds a busy phase can run (busyFor ends it
// earlier on a slow clock).
const maxBusyRounds = 64

func init() { busyRounds.Store(maxBusyRounds) }

// poll runs try under the policy: busy (for an adaptive part of busyFor),
// then yielding, until it succeeds or limit is spent. It reports
// whether try succeeded. The clock is read only every clockPolls polls (a
// read can cost as much as a whole small exchange), so a wait that ends
// within a µs or so never reads it.
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
			RestoreThread() // a peer that busy polling misses may share this core
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

// Poll calls try under the policy for SpinFor, until it reports success or
// the budget is spent, and returns whether try succeeded: the polling of a
// wait on ranks of this process, before the waiter sleeps its own way.
func Poll(try func() bool) bool { return poll(try, SpinFor()) }

// Spin calls try until it reports success or the policy's polling budget
// is spent, and returns whether try succeeded. The caller then sleeps its
// own way (a futex, the netpoller, a condition variable). On a crowded
// host its budget is crowdBudget, for waits on another process.
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
