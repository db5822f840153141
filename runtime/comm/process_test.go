package comm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Real processes on loopback: the test binary re-runs itself as N ranks
// (TestChildRank), the parent serves the rendezvous and collects exit codes.

const childEnv = "GOCL_TEST_CHILD"

// spawn starts n ranks running mode and returns each one's output and error.
func spawn(t *testing.T, n int, mode string, extraEnv ...string) ([]string, []error) {
	t.Helper()
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildRank$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, "GOCL_TEST_ID="+hex.EncodeToString(id[:]),
			fmt.Sprintf("GOCL_TEST_RANK=%d", r), fmt.Sprintf("GOCL_TEST_NRANKS=%d", n))
		cmd.Env = append(cmd.Env, extraEnv...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	return outs, errs
}

// TestProcessesMatrix runs every collective × dtype × op on 1..8 processes
// over shared memory, and on a few counts over sockets and over a mix (ranks
// of equal parity on shm, the other pairs on TCP); each rank checks it got
// the transports it should. With channels, allreduce runs the ring split
// across 2 or 3 shared-memory channels (a communicator with any TCP link
// must agree on one).
func TestProcessesMatrix(t *testing.T) {
	sizes := []int{0, 1, 7, 4097}
	type tc struct {
		n        int
		via      string
		channels int // GOCL_MAX_NCHANNELS=3: the channels every link must offer (checked)
	}
	var cases []tc
	for n := 1; n <= 8; n++ {
		cases = append(cases, tc{n: n, via: "shm"})
	}
	cases = append(cases, tc{n: 3, via: "socket"}, tc{n: 4, via: "mixed"}, tc{n: 5, via: "mixed"},
		tc{n: 3, via: "shm", channels: 3}, tc{n: 4, via: "mixed", channels: 1})
	if testing.Short() { // the -race run
		cases = []tc{{n: 3, via: "shm"}, {n: 3, via: "mixed"}, {n: 2, via: "shm", channels: 3}}
	}
	for _, k := range cases {
		name := fmt.Sprintf("%s/n=%d", k.via, k.n)
		if k.channels > 0 {
			name += fmt.Sprintf("/channels=%d", k.channels)
		}
		t.Run(name, func(t *testing.T) {
			env := []string{"GOCL_BUFFSIZE=4096", "GOCL_TEST_SIZES=" + strings.Trim(fmt.Sprint(sizes), "[]"), "GOCL_TEST_VIA=" + k.via}
			if k.via == "socket" {
				env = append(env, "GOCL_SHM_DISABLE=1")
			}
			if k.channels > 0 { // every size splits: at least 2 channels, at most 3
				env = append(env, "GOCL_MIN_NCHANNELS=2", "GOCL_MAX_NCHANNELS=3", "GOCL_ALGO=allreduce:ring",
					fmt.Sprintf("GOCL_TEST_CHANNELS=%d", k.channels))
			}
			outs, errs := spawn(t, k.n, "matrix", env...)
			for r := range outs {
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
		})
	}
}

// Frames larger than the shm data ring (8 MiB chunks) are cut into pieces;
// 20 MiB over 3 processes, and a mixed set of transports; and the same
// frames read from the sender's memory (shm+cma: GOCL_SHM_CMA=1).
func TestProcessesLargeAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 20 MiB per rank")
	}
	for _, via := range []string{"shm", "shm+cma", "mixed"} {
		t.Run(via, func(t *testing.T) {
			cma := "GOCL_SHM_CMA=0"
			if via == "shm+cma" {
				via, cma = "shm", "GOCL_SHM_CMA=1"
			}
			outs, errs := spawn(t, 3, "large", "GOCL_BUFFSIZE=8388608", "GOCL_TEST_VIA="+via, cma)
			for r := range outs {
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
		})
	}
}

// A rank SIGKILLed in the middle of 64 MiB shm allreduces: every survivor
// gets an error naming it within 5 s, and /dev/shm holds nothing of gocl's.
func TestProcessKilledMidAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB per rank per call")
	}
	const n, victim = 4, 1
	dir := t.TempDir()
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildRank$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=loop", "GOCL_TEST_ID="+hex.EncodeToString(id[:]),
			fmt.Sprintf("GOCL_TEST_RANK=%d", r), fmt.Sprintf("GOCL_TEST_NRANKS=%d", n),
			"GOCL_TEST_DIR="+dir, "GOCL_TIMEOUT=60", "GOCL_TEST_VIA=shm")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	exited := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Wait()
			exited[r] = time.Now()
		}()
	}
	// Every rank has finished one call: they are all inside the loop now.
	if !waitReady(dir, n, 60*time.Second) {
		for _, c := range cmds {
			c.Process.Kill()
		}
		wg.Wait()
		t.Fatalf("ranks did not start looping within 60 s:\n%s\n%s", outs[0].String(), outs[1].String())
	}
	time.Sleep(30 * time.Millisecond)
	killed := time.Now()
	cmds[victim].Process.Signal(syscall.SIGKILL)
	wg.Wait()
	for r := range n {
		if r == victim {
			continue
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r].String())
		}
		d := exited[r].Sub(killed)
		if d > 5*time.Second {
			t.Errorf("rank %d noticed the killed rank %d only after %v", r, victim, d)
		}
		for _, line := range strings.Split(outs[r].String(), "\n") {
			if strings.Contains(line, ", call ") {
				t.Logf("rank %d exited %v after the kill: %s", r, d.Round(time.Millisecond), strings.TrimSpace(line))
			}
		}
	}
	entries, _ := os.ReadDir("/dev/shm")
	for _, e := range entries {
		if strings.Contains(strings.ToLower(e.Name()), "gocl") {
			t.Errorf("/dev/shm/%s is left behind", e.Name())
		}
	}
}

// One rank of three is stopped (SIGSTOP) or killed in a loop of ring
// allreduces: every survivor's error names it, with errors.As finding the
// rank, even the rank whose neighbour was itself only waiting (the root of
// the wait chain, not the neighbour).
//
// With heartbeats, the stopped rank is named within the heartbeat timeout
// though the communicator's timeout is long (GOCL_TIMEOUT=600): in a call,
// and between calls (the survivors' next call fails at once).
func TestProcessCulpritIsNamedEverywhere(t *testing.T) {
	const n, victim = 3, 2
	cases := []struct{ via, signal, when string }{{"shm", "stop", ""}, {"socket", "stop", ""}, {"socket", "kill", ""},
		{"shm", "stop", "heartbeat"}, {"socket", "stop", "heartbeat"}, {"shm", "stop", "heartbeat-idle"}}
	if testing.Short() {
		cases = []struct{ via, signal, when string }{cases[1], cases[3], cases[5]}
	}
	for _, k := range cases {
		t.Run(k.via+"/"+k.signal+"/"+k.when, func(t *testing.T) {
			dir := t.TempDir()
			id, err := NewUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			env := []string{childEnv + "=culprit", "GOCL_TEST_ID=" + hex.EncodeToString(id[:]), "GOCL_TEST_DIR=" + dir,
				"GOCL_ALGO=ring", fmt.Sprintf("GOCL_TEST_NRANKS=%d", n), fmt.Sprintf("GOCL_TEST_CULPRIT=%d", victim)}
			limit := 6 * time.Second
			if k.when == "" {
				env = append(env, "GOCL_TIMEOUT=2")
			} else { // only the heartbeats can find it in time
				env = append(env, "GOCL_TIMEOUT=600", "GOCL_HEARTBEAT_TIMEOUT=1.5", "GOCL_TEST_HEARTBEAT="+k.when)
				limit = 8 * time.Second
			}
			if k.via == "socket" {
				env = append(env, "GOCL_SHM_DISABLE=1")
			}
			cmds := make([]*exec.Cmd, n)
			outs := make([]strings.Builder, n)
			errs := make([]error, n)
			exited := make([]time.Time, n)
			done := make([]chan struct{}, n)
			var wg sync.WaitGroup
			for r := range cmds {
				cmd := exec.Command(os.Args[0], "-test.run=^TestChildRank$", "-test.count=1")
				cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("GOCL_TEST_RANK=%d", r), "GOCL_TEST_VIA="+k.via)
				cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
				done[r] = make(chan struct{})
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = cmd.Wait(); exited[r] = time.Now(); close(done[r]) }()
			}
			defer func() {
				cmds[victim].Process.Kill()
				wg.Wait()
			}()
			if !waitReady(dir, n, 30*time.Second) {
				for _, c := range cmds {
					c.Process.Kill()
				}
				t.Fatal("ranks did not start looping within 30 s")
			}
			hit := time.Now()
			if k.signal == "stop" {
				cmds[victim].Process.Signal(syscall.SIGSTOP)
			} else {
				cmds[victim].Process.Signal(syscall.SIGKILL)
			}
			for r := range n {
				if r == victim {
					continue
				}
				select {
				case <-done[r]:
				case <-time.After(20 * time.Second):
					t.Errorf("rank %d still running 20 s after the %s", r, k.signal)
					continue
				}
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r].String())
					continue
				}
				if d := exited[r].Sub(hit); d > limit {
					t.Errorf("rank %d failed %v after the %s, more than %v", r, d, k.signal, limit)
				}
				for _, line := range strings.Split(outs[r].String(), "\n") {
					if strings.Contains(line, ", call ") {
						t.Logf("rank %d after %v: %s", r, exited[r].Sub(hit).Round(time.Millisecond), strings.TrimSpace(line))
					}
				}
			}
		})
	}
}

// A rank that exits right after init: every survivor's next call fails
// quickly with an error naming it, well before GOCL_TIMEOUT.
func TestProcessDeathIsReported(t *testing.T) {
	start := time.Now()
	outs, errs := spawn(t, 3, "die", "GOCL_TIMEOUT=60")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v: survivors waited instead of noticing the dead rank", d)
	}
	for r := range outs {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}

// TestChildRank is one rank of the tests above; it does nothing unless run
// by spawn.
func TestChildRank(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only runs as a child of the multi-process tests")
	}
	raw, _ := hex.DecodeString(os.Getenv("GOCL_TEST_ID"))
	var id bootstrap.ID
	copy(id[:], raw)
	rank, _ := strconv.Atoi(os.Getenv("GOCL_TEST_RANK"))
	n, _ := strconv.Atoi(os.Getenv("GOCL_TEST_NRANKS"))
	via := os.Getenv("GOCL_TEST_VIA")
	if via == "mixed" { // ranks of other parity publish another shm domain
		testShmDomain = func(rank int, d string) string { return fmt.Sprintf("%s/parity:%d", d, rank%2) }
	}
	c, err := InitRank(id, n, rank, -1, Options{})
	if err != nil {
		t.Fatalf("rank %d init: %v", rank, err)
	}
	for p, l := range c.links {
		want := via
		if via == "mixed" {
			want = map[bool]string{true: "shm", false: "socket"}[p%2 == rank%2]
		}
		if l != nil && via != "" && l.Name() != want {
			t.Fatalf("rank %d: link to rank %d is %s, want %s", rank, p, l.Name(), want)
		}
		if want, _ := strconv.Atoi(os.Getenv("GOCL_TEST_CHANNELS")); want > 0 && l != nil {
			got := 1
			if ch, ok := l.(interface {
				Channels() ([]transport.Link, int)
			}); ok {
				links, _ := ch.Channels()
				got = len(links)
			}
			if got != want {
				t.Fatalf("rank %d: link to rank %d (%s) offers %d channels, want %d", rank, p, l.Name(), got, want)
			}
		}
	}
	switch mode {
	case "matrix":
		var sizes []int
		for _, f := range strings.Fields(os.Getenv("GOCL_TEST_SIZES")) {
			v, _ := strconv.Atoi(f)
			sizes = append(sizes, v)
		}
		if err := matrix(c, allTypes, sizes); err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		c.Destroy()
	case "large":
		const count = 5<<20 + 3 // float32: 20 MiB, frames of ~7 MiB
		var k checker
		send := fill(abi.Float32, abi.Sum, rank, count)
		recv := make([]byte, len(send))
		if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: abi.Float32}); err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		for i := 0; i < count; i += 997 {
			k.expect("allreduce 20MiB", abi.Float32, recv, i, reference(abi.Float32, abi.Sum, 0, n, i))
		}
		k.expect("allreduce 20MiB", abi.Float32, recv, count-1, reference(abi.Float32, abi.Sum, 0, n, count-1))
		if err := k.err(); err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		c.Destroy()
	case "loop":
		const count = 16 << 20 // float32: 64 MiB
		buf := make([]byte, 4*count)
		for i := 0; ; i++ {
			err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: count, Type: abi.Float32})
			if err != nil {
				fmt.Fprintf(os.Stderr, "rank %d, call %d: %v\n", rank, i, err)
				if status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "rank 1") {
					t.Fatalf("rank %d: want a remote error naming rank 1, got %v", rank, err)
				}
				c.Abort()
				return
			}
			if i == 0 {
				os.WriteFile(fmt.Sprintf("%s/ready-%d", os.Getenv("GOCL_TEST_DIR"), rank), nil, 0o644)
			}
		}
	case "culprit":
		culprit, _ := strconv.Atoi(os.Getenv("GOCL_TEST_CULPRIT"))
		heartbeat := os.Getenv("GOCL_TEST_HEARTBEAT")
		buf := make([]byte, 4*4096)
		for i := 0; ; i++ {
			err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: 4096, Type: abi.Float32})
			if err != nil {
				fmt.Fprintf(os.Stderr, "rank %d, call %d: %v\n", rank, i, err)
				var te *transport.Error
				if !errors.As(err, &te) || te.Peer != culprit || strings.Count(err.Error(), fmt.Sprintf("rank %d", rank)) != 1 {
					t.Fatalf("rank %d: want an error blaming rank %d (found by errors.As) that names rank %d once, got %v", rank, culprit, rank, err)
				}
				if heartbeat != "" && (te.Kind != transport.KindStalled || !strings.Contains(err.Error(), "stopped answering gocl's heartbeats")) {
					t.Fatalf("rank %d: want the heartbeat's verdict on rank %d, got %v", rank, culprit, err)
				}
				c.Abort()
				return
			}
			if i == 0 {
				os.WriteFile(fmt.Sprintf("%s/ready-%d", os.Getenv("GOCL_TEST_DIR"), rank), nil, 0o644)
				if heartbeat == "heartbeat-idle" && rank != culprit {
					// Idle while the victim is stopped, until the verdict came.
					for c.AsyncError() == nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			}
		}
	case "die":
		if rank == 1 {
			os.Exit(0) // no destroy, no goodbye: like a crash
		}
		err := allReduce(c, 1<<16)
		if err == nil {
			err = allReduce(c, 1<<16)
		}
		if err == nil || status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("rank %d: want a remote error naming rank 1, got %v", rank, err)
		}
		c.Abort()
	}
}

// waitReady waits until each of the n child ranks has written its ready-R
// file in dir (it finished one call and is looping), or until timeout.
func waitReady(dir string, n int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ready := 0
		for r := range n {
			if _, err := os.Stat(fmt.Sprintf("%s/ready-%d", dir, r)); err == nil {
				ready++
			}
		}
		if ready == n {
			return true
		}
	}
	return false
}
