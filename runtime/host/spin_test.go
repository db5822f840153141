package transport

import (
	"bytes"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// ShareProcess raises GOMAXPROCS only while in-process links hold it, and
// the last release puts back the value it found.
func TestShareProcessGivesBackGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer hostRanks.Store(hostRanks.Load())
	hostRanks.Store(1)
	runtime.GOMAXPROCS(1)
	a, b := ShareProcess(), ShareProcess()
	if got, want := runtime.GOMAXPROCS(0), 2*Cores(); got != want {
		t.Fatalf("GOMAXPROCS %d with in-process links, want %d (twice the cores)", got, want)
	}
	a()
	a() // a release counts once
	if got := runtime.GOMAXPROCS(0); got != 2*Cores() {
		t.Fatalf("GOMAXPROCS %d while a link still holds it, want %d", got, 2*Cores())
	}
	b()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS %d after the last release, want 1 (the value before)", got)
	}
}

// A wait whose busy polls fail halves the busy phase of the next ones; a
// probe (one wait in probeEvery) that succeeds while polling restores it,
// and so does any wait that succeeds within its shortened phase.
func TestBusyPhaseAdapts(t *testing.T) {
	defer spinFor.Store(spinFor.Load())
	defer hostRanks.Store(hostRanks.Load())
	defer busyRounds.Store(busyRounds.Load())
	spinFor.Store(int64(20 * time.Microsecond))
	hostRanks.Store(1)
	busyRounds.Store(maxBusyRounds)
	waits.Store(0)
	never := func() bool { return false }
	for i, want := range []int32{maxBusyRounds / 2, maxBusyRounds / 4, maxBusyRounds / 8} {
		if poll(never, SpinFor()) {
			t.Fatal("poll reported success for a condition that never held")
		}
		if got := busyRounds.Load(); got != want {
			t.Fatalf("after %d failed waits: busy phase of %d rounds, want %d", i+1, got, want)
		}
	}
	waits.Store(probeEvery - 1) // the next wait is a probe
	n := 0
	if !poll(func() bool { n++; return n > clockPolls+10 }, SpinFor()) { // succeeds in the 2nd round, before any clock check
		t.Fatal("the probe did not see its condition")
	}
	if got := busyRounds.Load(); got != maxBusyRounds {
		t.Fatalf("after a probe that succeeded polling: busy phase of %d rounds, want %d", got, maxBusyRounds)
	}
	poll(never, SpinFor())
	poll(never, SpinFor())
	if got := busyRounds.Load(); got != maxBusyRounds/4 {
		t.Fatalf("after 2 more failed waits: busy phase of %d rounds, want %d", got, maxBusyRounds/4)
	}
	waits.Store(0) // not a probe
	n = 0
	if !poll(func() bool { n++; return n > clockPolls+10 }, SpinFor()) {
		t.Fatal("the wait did not see its condition")
	}
	if got := busyRounds.Load(); got != maxBusyRounds {
		t.Fatalf("after a wait that succeeded within its shortened phase: busy phase of %d rounds, want %d", got, maxBusyRounds)
	}
}

// Settle places the calling thread on CPU slot%n of its mask and gives the
// whole mask back, when the host's ranks fill its CPUs.
func TestSettlePlacesWithoutBinding(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer hostRanks.Store(hostRanks.Load())
	mask, n, cpus := affinityCPUs(t)
	hostRanks.Store(int32(len(cpus))) // as many ranks as CPUs
	for slot := range 2 * len(cpus) {
		Settle(slot)
		if got, want := currentCPU(t), cpus[slot%len(cpus)]; got != want {
			// The kernel may move the thread right away; it rarely does.
			t.Logf("Settle(%d): on CPU %d, want %d (moved since?)", slot, got, want)
			Settle(slot)
			if got = currentCPU(t); got != want {
				t.Fatalf("Settle(%d) twice: on CPU %d, want %d", slot, got, want)
			}
		}
		var after [128]uint64
		syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(after), uintptr(unsafe.Pointer(&after)))
		if after != mask {
			t.Fatalf("Settle(%d) left the affinity mask %x, want %x back", slot, after[:n/8], mask[:n/8])
		}
	}
}

// Resettle moves a settled thread back to its CPU after it was moved, and
// leaves a thread Settle never placed where it is.
func TestResettleReturnsToTheSettledCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer hostRanks.Store(hostRanks.Load())
	mask, n, cpus := affinityCPUs(t)
	tid := syscall.Gettid()
	settled.Delete(tid)
	defer settled.Delete(tid)
	Resettle() // never settled: nothing to do, nothing recorded
	if _, ok := settled.Load(tid); ok {
		t.Fatal("Resettle recorded a thread Settle never placed")
	}
	hostRanks.Store(int32(len(cpus)))
	Settle(1)
	Settle(0) // the latest placement counts
	var other [128]uint64
	other[cpus[1]/64] = 1 << (cpus[1] % 64)
	for try := 0; ; try++ {
		syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, n, uintptr(unsafe.Pointer(&other)))
		syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, n, uintptr(unsafe.Pointer(&mask)))
		Resettle()
		if got := currentCPU(t); got == cpus[0] {
			break
		} else if try == 3 { // the kernel may move the thread right away; not four times
			t.Fatalf("after Resettle: on CPU %d, want %d (Settle(0)'s)", got, cpus[0])
		}
	}
	var after [128]uint64
	syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(after), uintptr(unsafe.Pointer(&after)))
	if after != mask {
		t.Fatalf("Resettle left the affinity mask %x, want %x back", after[:n/8], mask[:n/8])
	}
}

// affinityCPUs is the calling thread's affinity mask, its size in bytes and
// its CPUs; it skips the test on one CPU (nothing to place).
func affinityCPUs(t *testing.T) (mask [128]uint64, n uintptr, cpus []int) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
	if errno != 0 {
		t.Fatal(errno)
	}
	for i, w := range mask[:n/8] {
		for ; w != 0; w &= w - 1 {
			cpus = append(cpus, i*64+bits.TrailingZeros64(w))
		}
	}
	if len(cpus) < 2 {
		t.Skip("one CPU: nothing to place")
	}
	return mask, n, cpus
}

// currentCPU is the CPU the calling thread last ran on (/proc's field 39).
func currentCPU(t *testing.T) int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])) // after the command name
	cpu, err := strconv.Atoi(f[36])                                // field 39: 3 fields precede f[0]
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

// On a crowded host a wait for another process (Spin) polls up to
// crowdedSpin; one that sleeps anyway halves the next budget (not below
// SpinFor), one that polling ends doubles it back. A wait in one process
// (Await's poll) keeps SpinFor.
func TestCrowdedSpinAdapts(t *testing.T) {
	defer spinFor.Store(spinFor.Load())
	defer hostRanks.Store(hostRanks.Load())
	defer crowdBudget.Store(crowdBudget.Load())
	spinFor.Store(int64(50 * time.Microsecond))
	hostRanks.Store(int32(2 * Cores())) // two ranks per core
	crowdBudget.Store(0)
	if d, crowded := spinAcross(); !crowded || d != crowdedSpin {
		t.Fatalf("crowded budget %v (crowded %t), want %v", d, crowded, crowdedSpin)
	}
	if SpinFor() >= crowdedSpin {
		t.Fatalf("SpinFor %v: in-process waits must keep the scaled budget", SpinFor())
	}
	never := func() bool { return false }
	start := time.Now()
	if Spin(never) {
		t.Fatal("Spin reported success for a condition that never held")
	}
	if el := time.Since(start); el < crowdedSpin/2 {
		t.Fatalf("a crowded Spin gave up after %v, want about %v of polling", el, crowdedSpin)
	}
	for want := crowdedSpin / 2; want > SpinFor(); want /= 2 {
		if d, _ := spinAcross(); d != want {
			t.Fatalf("budget %v after waits that slept, want %v", d, want)
		}
		Spin(never)
	}
	if d, _ := spinAcross(); d != SpinFor() {
		t.Fatalf("budget %v after many waits that slept, want the floor %v", d, SpinFor())
	}
	n := 0
	// Holds after Spin's first bare polls and the policy's first yield,
	// before any clock read (a wait the bare polls end leaves the budget).
	if !Spin(func() bool { n++; return n > quickPolls+1 }) {
		t.Fatal("Spin missed a condition that held after one yield")
	}
	if d, _ := spinAcross(); d != 2*SpinFor() {
		t.Fatalf("budget %v after a wait that polling ended, want %v (doubled)", d, 2*SpinFor())
	}
	hostRanks.Store(1)
	if d, crowded := spinAcross(); crowded || d != SpinFor() {
		t.Fatalf("uncrowded budget %v (crowded %t), want SpinFor %v", d, crowded, SpinFor())
	}
}
