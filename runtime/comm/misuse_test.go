package comm

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"gocl/abi"
	"gocl/runtime/algo"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// guarded returns n bytes that end where an inaccessible page begins: the
// first access past them faults.
func guarded(t *testing.T, n int) unsafe.Pointer {
	page := syscall.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(m[page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	return unsafe.Pointer(&m[page-n])
}

// TestCountLargerThanBuffers: a count far larger than the buffers (issue
// 39: all_reduce of 1<<40 floats over 4-float buffers) is undefined
// behaviour, but when it faults the process ends with one line that names
// the call, not with the Go runtime's goroutine dump. The call runs in a
// child process (this test binary again).
func TestCountLargerThanBuffers(t *testing.T) {
	if coll := os.Getenv("GOCL_TEST_OVERCOUNT"); coll != "" {
		clique(t, 2, func(c *Comm) error {
			op := Op{Send: guarded(t, 16), Recv: guarded(t, 16), Count: 1 << 40, Type: abi.Float32}
			switch coll {
			case "allreduce":
				op.Coll = wire.AllReduce
			case "broadcast":
				op.Coll = wire.Broadcast
			case "allgather":
				op.Coll, op.Count = wire.AllGather, 1<<38
			}
			return c.Run(nil, op)
		})
		t.Fatal("the calls returned")
	}
	for _, coll := range []string{"allreduce", "broadcast", "allgather"} {
		t.Run(coll, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCountLargerThanBuffers$", "-test.count=1", "-test.timeout=60s")
			cmd.Env = append(os.Environ(), "GOCL_TEST_OVERCOUNT="+coll, "GOCL_TIMEOUT=30")
			out, err := cmd.CombinedOutput()
			text := strings.TrimSpace(string(out))
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != algo.FaultExit {
				t.Fatalf("want exit status %d, got %v; output:\n%.3000s", algo.FaultExit, err, text)
			}
			lines := strings.Split(text, "\n")
			if len(lines) != 1 || !strings.HasPrefix(text, "gocl: fatal: "+coll+" ") || !strings.Contains(text, "on rank") ||
				!strings.Contains(text, "count is larger than the buffers") || strings.Contains(text, "goroutine") {
				t.Fatalf("want one line naming the %s call, got %d lines:\n%.3000s", coll, len(lines), text)
			}
			t.Log(text)
		})
	}
}

// TestConcurrentCallsOnOneComm: two threads in calls on one communicator at
// once are refused at once, with the rule and the rank (issue 39: they were
// paired with the peers' calls in arrival order, results silently
// swapped); sequential calls from different goroutines still work.
func TestConcurrentCallsOnOneComm(t *testing.T) {
	comms := localComms(t, 2)
	// Rank 0 enters an all-reduce that waits for rank 1, which has not
	// called yet: a second call on rank 0's comm meanwhile must fail.
	a, b := make([]byte, 4), make([]byte, 4)
	first := make(chan error, 1)
	go func() {
		first <- comms[0].Run(nil, Op{Coll: wire.AllReduce, Send: ptr(a), Recv: ptr(a), Count: 1, Type: abi.Float32})
	}()
	for !comms[0].calling.Load() {
		runtimeGosched()
	}
	err := comms[0].Run(nil, Op{Coll: wire.AllReduce, Send: ptr(b), Recv: ptr(b), Count: 1, Type: abi.Float32})
	if err == nil || status.CodeOf(err) != status.InvalidUsage || !strings.Contains(err.Error(), "one call at a time per communicator") ||
		!strings.Contains(err.Error(), "on rank 0") || !strings.Contains(err.Error(), "goclGroupStart") {
		t.Fatalf("a second concurrent call on rank 0: want InvalidUsage naming the rule and the rank, got %v", err)
	}
	t.Log(err)
	// The same through a group and a receive from any rank.
	var g Group
	if err := g.Add(comms[0], nil, Op{Coll: wire.Broadcast, Send: ptr(b), Recv: ptr(b), Count: 1, Type: abi.Float32}); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(); err == nil || !strings.Contains(err.Error(), "one call at a time per communicator") {
		t.Fatalf("a concurrent group on rank 0: want the rule, got %v", err)
	}
	if _, err := comms[0].RecvAny(ptr(b), 1, abi.Float32); err == nil || !strings.Contains(err.Error(), "one call at a time per communicator") {
		t.Fatalf("a concurrent recv from any rank on rank 0: want the rule, got %v", err)
	}
	// Rank 1 joins; the first call completes, and the comm is still usable:
	// sequential calls from different goroutines work.
	c := make([]byte, 4) // rank 1's own buffer: inproc ranks share the address space
	if err := comms[1].Run(nil, Op{Coll: wire.AllReduce, Send: ptr(c), Recv: ptr(c), Count: 1, Type: abi.Float32}); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range 2 {
			wg.Add(1)
			go func() { // a new goroutine (thread) per call
				defer wg.Done()
				x := make([]byte, 4)
				errs[r] = comms[r].Run(nil, Op{Coll: wire.AllReduce, Send: ptr(x), Recv: ptr(x), Count: 1, Type: abi.Float32})
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("sequential call %d on rank %d: %v", i, r, err)
			}
		}
	}
}

func runtimeGosched() { runtime.Gosched() }
