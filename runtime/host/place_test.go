package host

import (
	"bytes"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// PlaceThread places the calling thread on CPU slot%n of its mask and gives
// the whole mask back, when the host's ranks fill its CPUs.
func TestPlaceThreadPlacesWithoutBinding(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer ranks.Store(ranks.Load())
	defer home.Store(home.Load())
	mask, n, cpus := affinityCPUs(t)
	ranks.Store(int32(len(cpus))) // as many ranks as CPUs
	for slot := range 2 * len(cpus) {
		home.Store(0)
		PlaceThread(slot, len(cpus))
		if got, want := currentCPU(t), cpus[slot%len(cpus)]; got != want {
			// The kernel may move the thread right away; it rarely does.
			t.Logf("PlaceThread(%d): on CPU %d, want %d (moved since?)", slot, got, want)
			PlaceThread(slot, len(cpus))
			if got = currentCPU(t); got != want {
				t.Fatalf("PlaceThread(%d) twice: on CPU %d, want %d", slot, got, want)
			}
		}
		var after [128]uint64
		syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(after), uintptr(unsafe.Pointer(&after)))
		if after != mask {
			t.Fatalf("PlaceThread(%d) left the affinity mask %x, want %x back", slot, after[:n/8], mask[:n/8])
		}
	}
}

// RestoreThread moves a placed thread back to its CPU after it was moved,
// and leaves a thread PlaceThread never placed where it is when the process
// has no home slot.
func TestRestoreThreadReturnsToItsCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer ranks.Store(ranks.Load())
	defer home.Store(home.Load())
	mask, n, cpus := affinityCPUs(t)
	tid := syscall.Gettid()
	placed.Delete(tid)
	defer placed.Delete(tid)
	home.Store(0)
	ranks.Store(int32(len(cpus)))
	RestoreThread() // never placed, no home: nothing to do, nothing recorded
	if _, ok := placed.Load(tid); ok {
		t.Fatal("RestoreThread recorded a thread PlaceThread never placed")
	}
	PlaceThread(1, len(cpus))
	PlaceThread(0, len(cpus)) // the latest placement counts (two slots at one size: no home)
	var other [128]uint64
	other[cpus[1]/64] = 1 << (cpus[1] % 64)
	for try := 0; ; try++ {
		syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, n, uintptr(unsafe.Pointer(&other)))
		syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, n, uintptr(unsafe.Pointer(&mask)))
		RestoreThread()
		if got := currentCPU(t); got == cpus[0] {
			break
		} else if try == 3 { // the kernel may move the thread right away; not four times
			t.Fatalf("after RestoreThread: on CPU %d, want %d (PlaceThread(0)'s)", got, cpus[0])
		}
	}
	var after [128]uint64
	syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(after), uintptr(unsafe.Pointer(&after)))
	if after != mask {
		t.Fatalf("RestoreThread left the affinity mask %x, want %x back", after[:n/8], mask[:n/8])
	}
}

// A thread that calls collectives but did not make the communicator (XLA's
// workers, a framework's thread) is placed on the process's home slot the
// first time RestoreThread runs on it; a smaller communicator's thread goes
// home too; in-process ranks (one size, several slots) have no home.
func TestUnplacedCallersGoHome(t *testing.T) {
	defer ranks.Store(ranks.Load())
	defer home.Store(home.Load())
	_, _, cpus := affinityCPUs(t)
	ranks.Store(int32(2 * len(cpus)))   // ranks fill the cores: placement applies
	onThread := func(f func(tid int)) { // a fresh OS thread, as a C caller's
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			tid := syscall.Gettid()
			defer placed.Delete(tid)
			f(tid)
		}()
		<-done
	}
	wantOn := func(tid, cpu int, what string) {
		t.Helper()
		p, ok := placed.Load(tid)
		if !ok {
			t.Fatalf("%s: not placed", what)
		}
		one := p.(*placement).one
		if one[cpu/64] != 1<<(cpu%64) {
			t.Fatalf("%s: placed on %x, want CPU %d", what, one[:2], cpu)
		}
	}

	home.Store(0)
	onThread(func(int) { PlaceThread(1, 4) }) // the world communicator's own thread: local rank 1 of 4
	if s, of, ok := homeSlot(); !ok || s != 1 || of != 4 {
		t.Fatalf("home slot %d (%v) of %d, want 1 of 4", s, ok, of)
	}
	onThread(func(tid int) {
		RestoreThread()
		wantOn(tid, cpus[1], "a worker thread after RestoreThread")
	})
	onThread(func(tid int) {
		PlaceThread(0, 2) // a split: local rank 0 of 2
		wantOn(tid, cpus[1], "a smaller communicator's thread")
	})
	onThread(func(tid int) {
		PlaceThread(0, 1) // a 1-rank communicator places nothing
		if _, ok := placed.Load(tid); ok {
			t.Fatal("a 1-rank communicator's thread was placed")
		}
	})

	home.Store(0)
	onThread(func(int) { PlaceThread(0, 2) })
	onThread(func(int) { PlaceThread(1, 2) }) // Communicator.local: two slots, one size
	if s, _, ok := homeSlot(); ok {
		t.Fatalf("home slot %d with two ranks of one size in this process, want none", s)
	}
	onThread(func(tid int) {
		RestoreThread()
		if _, ok := placed.Load(tid); ok {
			t.Fatal("a worker thread was placed with no home slot")
		}
	})
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
