package comm

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/wire"
)

// listeningPorts are the TCP ports this process listens on (IPv4).
func listeningPorts(t *testing.T) map[int]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	f, err := os.Open("/proc/self/net/tcp")
	if err != nil {
		t.Skipf("cannot read /proc/self/net/tcp: %v", err)
	}
	defer f.Close()
	ports := map[int]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] { // 0A: LISTEN
			continue
		}
		var port int
		fmt.Sscanf(fs[1][strings.LastIndex(fs[1], ":")+1:], "%X", &port)
		ports[port] = true
	}
	return ports
}

// strangers connect to addr and misbehave in every way a scanner, another
// job or a confused client can: silence, garbage, a wrong-secret handshake.
func strangers(t *testing.T, addr string) []net.Conn {
	t.Helper()
	nonce := make([]byte, 32)
	rand.Read(nonce)
	var out []net.Conn
	for _, send := range [][]byte{
		nil, // connects and says nothing
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		append([]byte("GOCLAUTH"), nonce...), // the right magic, then no proof
		append(append([]byte("GOCLAUTH"), nonce...), make([]byte, 32)...), // a wrong proof
		make([]byte, 1<<16), // a flood of zeros
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("stranger cannot connect to %s: %v", addr, err)
		}
		c.Write(send)
		out = append(out, c)
	}
	return out
}

// Every port gocl listens on during init (the rendezvous root, each rank's
// listener, whose connections become the socket links and the shm control
// channels, and the one a rank takes the rank table on) drops connections that do not prove the unique id's
// secret, logs them, and is not held up by them (a silent stranger would
// hold an accept loop for 10 s); the communicator then works, and once init
// is done only the ranks' probe listeners are left, refusing strangers too.
func TestStrangersOnEveryPort(t *testing.T) {
	for _, via := range transportEnvs[1:] { // shm and socket: the transports with TCP connections
		t.Run(via.name, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "gocl.log")
			// The mesh's: connecting on first use there is none, and the
			// listener's Serve drops strangers at authTimeout as after init.
			configtest.Setenv(t, append([]string{"GOCL_SOCKET_IFNAME", "lo", "GOCL_TIMEOUT", "20", "GOCL_RUNTIME_CONNECT", "0",
				"GOCL_DEBUG", "WARN", "GOCL_DEBUG_FILE", logFile}, via.env...)...)
			before, attacked := listeningPorts(t), map[int]bool{}
			var held []net.Conn // the strangers' connections
			id, err := NewUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			const n = 3
			const ports = 1 + (n - 1) + 1 // the root; each waiting rank's listener; the rank table's, one per process (bootstrap/shared.go)
			comms := make([]*Comm, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				if r == n-1 {
					// Ranks 0..n-2 wait in the rendezvous for the last: attack the root
					// and their listeners now (the last rank's accepts nobody).
					var fresh []int
					for t0 := time.Now(); len(fresh) < ports && time.Since(t0) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
						fresh = fresh[:0]
						for p := range listeningPorts(t) {
							if !before[p] {
								fresh = append(fresh, p)
							}
						}
					}
					for _, p := range fresh {
						for _, c := range strangers(t, fmt.Sprintf("127.0.0.1:%d", p)) {
							defer c.Close()
							held = append(held, c)
						}
						attacked[p] = true
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					comms[r], errs[r] = InitRank(id, n, r, -1, Options{})
				}()
			}
			wg.Wait()
			if took := time.Since(start); took > 5*time.Second {
				l, _ := os.ReadFile(logFile)
				t.Errorf("init took %s: strangers held it up\n%s", took, l)
			}
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// gocl lets go of every stranger once init is done (not at the 10 s
			// handshake limit): each one reads end of file or a reset.
			for i, c := range held {
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, err := io.Copy(io.Discard, c)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("stranger %d (%s -> %s) is still held open after init", i, c.LocalAddr(), c.RemoteAddr())
				}
			}
			if len(attacked) != ports {
				t.Errorf("attacked %d ports, want %d (the root, the listeners of ranks 0..%d and this process's rank table listener)", len(attacked), ports, n-2)
			}
			// After init the root's port is closed; each rank's listener stays
			// open to answer its peers' liveness probes (culprit.go), and drops
			// strangers there too while the collectives below run.
			root, err := id.Root()
			if err != nil {
				t.Fatal(err)
			}
			for p := range listeningPorts(t) {
				if p == root.Port {
					t.Errorf("the rendezvous root's port %d still listens after init", p)
				} else if attacked[p] {
					for _, c := range strangers(t, fmt.Sprintf("127.0.0.1:%d", p)) {
						defer c.Close()
					}
				}
			}
			var run sync.WaitGroup
			for r, c := range comms {
				run.Add(1)
				go func() {
					defer run.Done()
					const count = 1000
					b := make([]byte, 4*count)
					for i := 0; i < count; i++ {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r+i)))
					}
					errs[r] = c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(b), Recv: ptr(b), Count: count, Type: abi.Float32})
					for i := 0; i < count && errs[r] == nil; i++ {
						if v, want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])), float32(n*i+n*(n-1)/2); v != want {
							errs[r] = fmt.Errorf("element %d is %v, want %v", i, v, want)
						}
					}
				}()
			}
			run.Wait()
			for _, c := range comms {
				c.Destroy()
			}
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d after strangers: %v", r, err)
				}
			}
			log, _ := os.ReadFile(logFile)
			// At least the flood and the wrong proof, at the root and at the two listeners that accept (rank 2 dials only).
			if got := strings.Count(string(log), "dropped connection"); got < 2*3 {
				t.Errorf("%d dropped connections logged, want at least 6:\n%s", got, log)
			}
		})
	}
}
