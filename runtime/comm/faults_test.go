package comm

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/config/configtest"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

func allReduce(c *Comm, count int) error {
	buf := make([]byte, 4*max(count, 1))
	return c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: count, Type: abi.Float32})
}

// transports runs a test over inproc links, shared memory and sockets.
func transports(t *testing.T, body func(t *testing.T)) {
	for _, via := range transportEnvs {
		t.Run(via.name, func(t *testing.T) {
			configtest.Setenv(t, append([]string{"GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "2"}, via.env...)...)
			body(t)
		})
	}
}

// transportEnvs make ranks of one process talk over each transport.
var transportEnvs = []struct {
	name string
	env  []string
}{
	{"inproc", []string{"GOCL_P2P_DISABLE", "0", "GOCL_SHM_DISABLE", "0"}},
	{"shm", []string{"GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "0"}},
	{"socket", []string{"GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1"}},
}

// wantErr checks that err has code and mentions every fragment.
func wantErr(t *testing.T, who string, err error, code status.Code, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", who, code)
		return
	}
	if got := status.CodeOf(err); got != code {
		t.Errorf("%s: code %d, want %d (%v)", who, got, code, err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%s: %q does not mention %q", who, err, f)
		}
	}
}

// A rank that never makes the call: the others time out naming it, then the
// communicator stays failed.
func TestTimeoutNamesTheSilentRank(t *testing.T) {
	transports(t, func(t *testing.T) {
		comms, err := InitAll(2, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = allReduce(comms[0], 1000)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("timeout took %v with GOCL_TIMEOUT=2", d)
		}
		wantErr(t, "rank 0", err, status.Timeout, "rank 1", "GOCL_TIMEOUT", "in no call on this communicator",
			"it has made 1 call and this rank is in its call 2: 1 behind") // init made one
		if te := transport.ErrorOf(err); te == nil || te.Peer != 1 || te.Kind != transport.KindStalled {
			t.Errorf("errors.As finds %+v, want rank 1 stalled", te)
		}
		wantErr(t, "rank 0 again", allReduce(comms[0], 10), status.Timeout, "unusable")
		for _, c := range comms {
			c.Abort()
		}
	})
}

// Ranks disagreeing on the call fail with both calls named, on both ranks.
func TestMismatchedCallsFailOnEveryRank(t *testing.T) {
	cases := map[string]func(c *Comm) error{
		"count": func(c *Comm) error { return allReduce(c, 100+c.Rank()) },
		"collective": func(c *Comm) error {
			if c.Rank() == 0 {
				return allReduce(c, 100)
			}
			buf := make([]byte, 400)
			return c.Run(nil, Op{Coll: wire.Broadcast, Send: ptr(buf), Recv: ptr(buf), Count: 100, Type: abi.Float32})
		},
		"dtype": func(c *Comm) error {
			buf := make([]byte, 800)
			return c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(buf), Recv: ptr(buf), Count: 100, Type: []abi.DataType{abi.Float32, abi.Int32}[c.Rank()]})
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			transports(t, func(t *testing.T) {
				comms, err := InitAll(2, nil, Options{})
				if err != nil {
					t.Fatal(err)
				}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i, c := range comms {
					wg.Add(1)
					go func() { defer wg.Done(); errs[i] = call(c) }()
				}
				wg.Wait()
				for i, err := range errs {
					if err == nil {
						t.Errorf("rank %d: mismatched call succeeded", i)
						continue
					}
					if c := status.CodeOf(err); c != status.RemoteError {
						t.Errorf("rank %d: code %d, want RemoteError: %v", i, c, err)
					}
				}
				// At least one rank saw the other's call described.
				if !strings.Contains(errs[0].Error()+errs[1].Error(), "disagree") {
					t.Errorf("no rank explained the mismatch: %v / %v", errs[0], errs[1])
				}
				for _, c := range comms {
					c.Abort()
				}
			})
		})
	}
}

// Abort from another goroutine unblocks a rank stuck waiting for a peer.
func TestAbortUnblocksAWaitingRank(t *testing.T) {
	// Destroy from another thread never waits on peers either: it ends the
	// call in progress as Abort does (torch's shutdown() relies on it).
	for _, end := range []struct {
		name string
		do   func(*Comm)
	}{{"Abort", (*Comm).Abort}, {"Destroy", func(c *Comm) { c.Destroy() }}} {
		t.Run(end.name, func(t *testing.T) { testEndUnblocks(t, end.do) })
	}
}

func testEndUnblocks(t *testing.T, end func(*Comm)) {
	transports(t, func(t *testing.T) {
		configtest.Setenv(t, "GOCL_TIMEOUT", "60")
		comms, err := InitAll(2, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- allReduce(comms[0], 1000) }()
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		end(comms[0])
		select {
		case err := <-done:
			wantErr(t, "aborted rank", err, status.RemoteError, "abort")
		case <-time.After(5 * time.Second):
			t.Fatal("abort did not unblock the waiting allreduce")
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("abort took %v", d)
		}
		// The peer sees the abort too. Its first call may still complete over
		// sockets: rank 0's data was already in flight before the abort.
		err = allReduce(comms[1], 1000)
		if err == nil {
			err = allReduce(comms[1], 1000)
		}
		wantErr(t, "peer", err, status.RemoteError, "rank 0")
		if te := transport.ErrorOf(err); te == nil || te.Peer != 0 {
			t.Errorf("errors.As finds %+v, want rank 0", te)
		}
		comms[1].Abort()
	})
}

// A peer that fails mid-call makes the others fail, naming it, instead of
// waiting for the timeout.
func TestPeerFailurePropagates(t *testing.T) {
	transports(t, func(t *testing.T) {
		configtest.Setenv(t, "GOCL_TIMEOUT", "60")
		comms, err := InitAll(3, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = allReduce(comms[i], 1<<16) }()
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		comms[2].Abort() // rank 2 dies without joining the call
		wg.Wait()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("failure took %v to propagate", d)
		}
		for i := 0; i < 2; i++ {
			wantErr(t, "survivor", errs[i], status.RemoteError, "rank")
		}
		for _, c := range comms[:2] {
			c.Abort()
		}
	})
}

func TestBadArguments(t *testing.T) {
	configtest.Setenv(t)
	comms := localComms(t, 2)
	c := comms[0]
	buf := make([]byte, 64)
	p := ptr(buf)
	cases := []struct {
		name  string
		op    Op
		code  status.Code
		words []string
	}{
		{"dtype", Op{Coll: wire.AllReduce, Send: p, Recv: p, Count: 4, Type: 42}, status.InvalidArgument, []string{"datatype 42", "rank 0"}},
		{"op", Op{Coll: wire.AllReduce, Send: p, Recv: p, Count: 4, Type: abi.Float32, RedOp: 42}, status.InvalidArgument, []string{"op 42"}},
		{"root", Op{Coll: wire.Broadcast, Send: p, Recv: p, Count: 4, Type: abi.Float32, Root: 2}, status.InvalidArgument, []string{"root 2", "[0, 1]"}},
		{"negative root", Op{Coll: wire.Reduce, Send: p, Recv: p, Count: 4, Type: abi.Float32, Root: -1}, status.InvalidArgument, []string{"root -1"}},
		{"peer", Op{Coll: wire.SendRecv, IsSend: true, Send: p, Count: 4, Type: abi.Float32, Peer: 5}, status.InvalidArgument, []string{"peer 5"}},
		{"null send", Op{Coll: wire.AllReduce, Recv: p, Count: 4, Type: abi.Float32}, status.InvalidArgument, []string{"sendbuff is NULL"}},
		{"null recv", Op{Coll: wire.AllGather, Send: p, Count: 4, Type: abi.Float32}, status.InvalidArgument, []string{"recvbuff is NULL"}},
		{"overflow", Op{Coll: wire.AllReduce, Send: p, Recv: p, Count: 1 << 62, Type: abi.Float64}, status.InvalidArgument, []string{"overflows"}},
		{"alltoall in place", Op{Coll: wire.AlltoAll, Send: p, Recv: p, Count: 4, Type: abi.Float32}, status.InvalidArgument, []string{"in place"}},
		{"premulsum of another type", Op{Coll: wire.AllReduce, Send: p, Recv: p, Count: 4, Type: abi.Float64, RedOp: mustPreMul(t, c)}, status.InvalidArgument, []string{"created for float32"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, c.Run(nil, tc.op), tc.code, tc.words...)
		})
	}
	// Rejected arguments do not break the communicator.
	clique2 := make(chan error, 2)
	for _, c := range comms {
		go func() { clique2 <- allReduce(c, 4) }()
	}
	for range comms {
		if err := <-clique2; err != nil {
			t.Errorf("allreduce after rejected calls: %v", err)
		}
	}
}

func mustPreMul(t *testing.T, c *Comm) int32 {
	h, err := c.CreatePreMulSum(abi.Float32, []byte{0, 0, 0, 64})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestInitArguments(t *testing.T) {
	configtest.Setenv(t, "GOCL_TIMEOUT", "2")
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	_, err = InitRank(id, 0, 0, -1, Options{})
	wantErr(t, "nranks 0", err, status.InvalidArgument, "nranks is 0")
	_, err = InitRank(id, 2, 2, -1, Options{})
	wantErr(t, "rank 2 of 2", err, status.InvalidArgument, "rank is 2")
	_, err = InitRank(bootstrap.ID{}, 2, 0, -1, Options{})
	wantErr(t, "zero id", err, status.InvalidArgument, "not a gocl id")
}

// Ranks that disagree on nranks all fail at init with the reason.
func TestRendezvousDisagreement(t *testing.T) {
	configtest.Setenv(t, "GOCL_TIMEOUT", "5")
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, n := range []int{2, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *Comm
			c, errs[i] = InitRank(id, n, i, -1, Options{})
			if c != nil {
				c.Abort()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		wantErr(t, "rank", err, status.InvalidUsage, "nranks")
	}
}

// A stranger connecting to the root (a port scan, another job) is dropped
// and the real ranks still meet.
func TestStrangerIsDropped(t *testing.T) {
	configtest.Setenv(t, "GOCL_TIMEOUT", "10", "GOCL_SOCKET_IFNAME", "lo")
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := id.Root()
	stranger, err := net.Dial("tcp", root.String())
	if err != nil {
		t.Fatal(err)
	}
	stranger.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *Comm
			if c, errs[i] = InitRank(id, 2, i, -1, Options{}); c == nil {
				return
			}
			errs[i] = errors.Join(allReduce(c, 10))
			c.Destroy()
		}()
	}
	wg.Wait()
	stranger.Close()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

// A communicator's own timeout (goclConfig_t.timeout) wins over
// GOCL_TIMEOUT, and a split keeps its parent's unless it is given one.
func TestTimeoutOption(t *testing.T) {
	configtest.Setenv(t, "GOCL_TIMEOUT", "60")
	comms, err := InitAll(2, nil, Options{Timeout: time.Second, HasTimeout: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := comms[0].Timeout(); got != time.Second {
		t.Fatalf("Timeout() = %v, want 1s", got)
	}
	subs := make([]*Comm, 2)
	subs3 := make([]*Comm, 2)
	errs := make(chan error, 2)
	for r := range comms {
		go func() {
			var err error
			if subs[r], err = comms[r].Split(0, r, Options{}); err == nil {
				subs3[r], err = comms[r].Split(0, r, Options{Timeout: 3 * time.Second, HasTimeout: true})
			}
			errs <- err
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if subs[0].Timeout() != time.Second || subs3[0].Timeout() != 3*time.Second {
		t.Errorf("split timeouts %v and %v, want 1s (inherited) and 3s", subs[0].Timeout(), subs3[0].Timeout())
	}
	start := time.Now()
	err = allReduce(comms[0], 1000)
	if d := time.Since(start); d < 900*time.Millisecond || d > 10*time.Second {
		t.Errorf("timed out after %v, want about 1s (GOCL_TIMEOUT=60 must not apply)", d)
	}
	wantErr(t, "rank 0", err, status.Timeout, "timed out", "rank 1")
	for _, c := range append(append(comms, subs...), subs3...) {
		c.Abort()
	}
}

// Settings come from the environment as it is at each init: a change between
// two inits applies to the second communicator only.
func TestSettingsReadAtEachInit(t *testing.T) {
	configtest.Setenv(t, "GOCL_TIMEOUT", "7")
	a, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOCL_TIMEOUT", "9")
	b, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a[0].Timeout() != 7*time.Second || b[0].Timeout() != 9*time.Second {
		t.Errorf("timeouts %v then %v, want 7s then 9s", a[0].Timeout(), b[0].Timeout())
	}
	for _, c := range append(a, b...) {
		c.Abort()
	}
}

// A rank that destroyed its communicator instead of making the call: the
// waiting rank says so (its probe port refuses), naming it.
func TestTimeoutNamesARankThatLeft(t *testing.T) {
	configtest.Setenv(t, "GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "1")
	comms, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	comms[1].ln.Close() // as a destroyed communicator's, without closing the links
	err = allReduce(comms[0], 1000)
	wantErr(t, "rank 0", err, status.Timeout, "rank 1", "communicator is gone")
	for _, c := range comms {
		c.Abort()
	}
}
