package comm

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/telemetry"
)

// A flood past the fd limit (issue 38): a job's process whose
// RLIMIT_NOFILE is 128 has its rank 1 listener flooded by another process
// with three times as many silent connections, so that the process runs
// out of descriptors and its accept loops hit EMFILE. Once the flood is
// gone the job answers `gocl status` (the Unix endpoint, and rank 0's
// question to every rank's listener), all-reduces, and shrinks (the
// survivors' agreement over the listeners and a new communicator's init).
//
// The parent (this test) is the flooder; the job is the test binary run
// again as a child (floodChild), over TCP links on loopback. They talk
// over the child's stdout (ADDR, EXHAUSTED, OK) and stdin (release).

const floodEnv = "GOCL_TEST_FLOOD"

// floodLimit is the child's RLIMIT_NOFILE: well above what 3 ranks and a
// shrink need (about 35), and below what one listener holds of a flood
// (bootstrap's maxHandshakes, 256, connections still handshaking), so the
// flood does run the process out of descriptors.
const floodLimit = 128

func TestFloodPastTheFdLimit(t *testing.T) {
	if os.Getenv(floodEnv) != "" {
		floodChild(t)
		return
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 4*floodLimit {
		t.Skipf("this process may open %d descriptors: too few to flood a child past %d", lim.Cur, floodLimit)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodPastTheFdLimit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), floodEnv+"=1", "GOCL_STATUS_DIR="+filepath.Join(t.TempDir(), "st"),
		"GOCL_SOCKET_IFNAME=lo", "GOCL_SHM_DISABLE=1", "GOCL_P2P_DISABLE=1", "GOCL_TIMEOUT=30",
		"GOCL_DEBUG=", "GOCL_STATUS=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder // the child's whole stdout, for failures
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer cmd.Process.Kill()
	// next waits for the child's line starting with prefix.
	next := func(prefix string, within time.Duration) string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					cmd.Wait()
					t.Fatalf("the child ended before %s:\n%s%s", prefix, out.String(), stderr.String())
				}
				out.WriteString(l + "\n")
				if strings.HasPrefix(l, prefix) {
					return strings.TrimSpace(strings.TrimPrefix(l, prefix))
				}
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("no %s from the child within %s:\n%s%s", prefix, within, out.String(), stderr.String())
			}
		}
	}
	addr := next("ADDR ", 60*time.Second)

	// The flood: silent connections, held, until the child says it is out of
	// descriptors (its accept queue keeps the ones it cannot take yet).
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 3 * floodLimit {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Logf("the flood's dial %d: %v", len(flood), err)
			break
		}
		flood = append(flood, c)
	}
	if len(flood) < 2*floodLimit {
		t.Fatalf("only %d connections to %s: not a flood past %d descriptors", len(flood), addr, floodLimit)
	}
	exhausted := next("EXHAUSTED ", 30*time.Second)
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	fmt.Fprintln(stdin, "release")
	result := next("OK ", 60*time.Second)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child failed: %v\n%s%s", err, out.String(), stderr.String())
	}
	t.Logf("flooded %s with %d connections; the child: %s; after: %s", addr, 3*floodLimit, exhausted, result)
}

// floodChild is the job: 3 ranks in one process of floodLimit descriptors.
func floodChild(t *testing.T) {
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	lim := syscall.Rlimit{Cur: floodLimit, Max: floodLimit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	comms, err := InitAll(3, nil, Options{})
	if err != nil {
		t.Fatalf("init under a limit of %d descriptors: %v", floodLimit, err)
	}
	for _, c := range comms {
		if c.links[(c.rank+1)%3].Name() != "socket" {
			t.Fatalf("rank %d: link is %s, want socket", c.rank, c.links[(c.rank+1)%3].Name())
		}
	}
	if err := everyRank(comms, func(c *Comm) error { return allReduce(c, 1024) }); err != nil {
		t.Fatal(err)
	}
	say("ADDR %s", comms[1].ln.Addr())

	// Out of descriptors: the flood filled the table (the listener took
	// what it could, then Accept failed with EMFILE and backed off).
	start := time.Now()
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == nil {
			syscall.Close(fd)
		} else if errors.Is(err, syscall.EMFILE) {
			break
		}
		if time.Since(start) > 25*time.Second {
			t.Fatalf("the flood never ran this process out of descriptors (open: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	say("EXHAUSTED all %d descriptors taken %v after the flood began (open: EMFILE)", floodLimit, time.Since(start).Round(time.Millisecond))
	var line string
	fmt.Scanln(&line) // the flooder closed its connections

	// The status endpoint (`gocl status`'s Unix socket) answers, with every
	// rank's view gathered from their listeners: retried for a while, as
	// the listeners drain what is left of the flood.
	released := time.Now()
	var rep StatusReply
	for {
		rep, err = askStatusEndpoint()
		if err == nil {
			views := rep.Ranks[commID(comms[0].key)]
			ok := len(views) == 3
			for _, v := range views {
				ok = ok && v.Error == "" && (v.Reachable == nil || *v.Reachable)
			}
			if ok {
				break
			}
			err = fmt.Errorf("views %+v", views)
		}
		if time.Since(released) > 20*time.Second {
			t.Fatalf("status after the flood: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	answered := time.Since(released)

	// A liveness probe straight to the flooded listener.
	var v CommView
	if err := bootstrap.Ask(comms[1].ln.Addr().String(), comms[0].secret, time.Now().Add(5*time.Second),
		bootstrap.NewRequest(askStatus, nil), &v); err != nil || v.Rank != 1 {
		t.Fatalf("rank 1's listener after the flood: %+v, %v", v, err)
	}
	if err := everyRank(comms, func(c *Comm) error { return allReduce(c, 1<<16) }); err != nil {
		t.Fatalf("all-reduce after the flood: %v", err)
	}

	// Shrink without rank 2: ranks 0 and 1 agree over their listeners and
	// start a new communicator (a rendezvous, listeners, links: descriptors
	// again).
	subs := make([]*Comm, 2)
	if err := everyRank(comms[:2], func(c *Comm) error {
		s, err := c.Shrink([]int{2}, false, ShrinkDefault, Options{})
		subs[c.rank] = s
		return err
	}); err != nil {
		t.Fatalf("shrink after the flood: %v", err)
	}
	if err := everyRank(subs, func(c *Comm) error {
		if c.nranks != 2 {
			return fmt.Errorf("the shrunk communicator has %d ranks, want 2", c.nranks)
		}
		return allReduce(c, 1<<16)
	}); err != nil {
		t.Fatalf("the shrunk communicator: %v", err)
	}
	for _, c := range append(subs, comms...) {
		c.Destroy()
	}
	say("OK status answered %v after the flood (3 ranks' views); rank 1's listener, an all-reduce and a shrink to 2 ranks worked",
		answered.Round(time.Millisecond))
}

// everyRank runs body on each communicator at once and joins their errors.
func everyRank(comms []*Comm, body func(c *Comm) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = body(c); errs[i] != nil {
				errs[i] = fmt.Errorf("rank %d: %w", c.rank, errs[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// askStatusEndpoint asks this process's status endpoint what `gocl status`
// asks (python/gocl/status.py's ask, here in Go): the handshake keyed by
// DIR/PID.key, then one plain request.
func askStatusEndpoint() (StatusReply, error) {
	var rep StatusReply
	base := filepath.Join(telemetry.StatusDir(), strconv.Itoa(os.Getpid()))
	hexKey, err := os.ReadFile(base + ".key")
	if err != nil {
		return rep, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(hexKey)))
	if err != nil {
		return rep, err
	}
	c, err := net.DialTimeout("unix", base+".sock", 2*time.Second)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	mac := func(role string, a, b []byte) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(role))
		m.Write(a)
		m.Write(b)
		return m.Sum(nil)
	}
	nd := make([]byte, 32)
	rand.Read(nd)
	if _, err := c.Write(append([]byte("GOCLAUTH"), nd...)); err != nil {
		return rep, err
	}
	reply := make([]byte, 64)
	if _, err := io.ReadFull(c, reply); err != nil {
		return rep, err
	}
	nl := reply[:32]
	if !hmac.Equal(reply[32:], mac("L", nd, nl)) {
		return rep, errors.New("the status endpoint failed authentication")
	}
	req, _ := json.Marshal(bootstrap.NewRequest(askStatus, statusRequest{Peers: true}))
	msg := binary.LittleEndian.AppendUint32(mac("D", nd, nl), uint32(len(req)))
	if _, err := c.Write(append(msg, req...)); err != nil {
		return rep, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return rep, err
	}
	body := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(body, &rep)
}
