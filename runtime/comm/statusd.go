package comm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
)

// The status endpoint (GOCL_STATUS): every process with a communicator
// answers `gocl status` and `gocl top` on a Unix socket, DIR/PID.sock, DIR
// being GOCL_STATUS_DIR, else $XDG_RUNTIME_DIR/gocl, else /tmp/gocl-UID
// (mode 0700, this user's; a symlink there, another owner or a wider mode
// is refused: openStatusDir). A client proves it may ask with the handshake
// the communicators use (bootstrap's HMAC challenge), keyed by DIR/PID.key,
// which only this user can read; GOCL_STATUS=tcp:HOST:PORT also listens on
// TCP, keyed by GOCL_STATUS_TOKEN. A process that is rank 0 of a
// communicator gathers its other ranks' views over their bootstrap
// listeners (keyed by the communicator's secret), so one question on rank
// 0's host reaches every rank of a job on any host; a rank that does not
// answer within statusAskWait is reported so (stopped, hung or gone).

const askStatus = "status"

// statusAskWait bounds rank 0's question to each of its ranks.
const statusAskWait = time.Second

type statusRequest struct {
	ID    string `json:"id,omitempty"`    // one communicator (empty: every one of the process)
	Peers bool   `json:"peers,omitempty"` // where this process is rank 0: every rank's view too
}

// StatusReply answers a status request.
type StatusReply struct {
	Process ProcessView           `json:"process"`
	Ranks   map[string][]CommView `json:"ranks,omitempty"` // communicator id -> each rank's view, from its rank 0
}

var endpoint struct {
	once     sync.Once
	sampling bool // under registry.mu
}

// startStatus starts the endpoint once per process (on its first
// communicator) and the sampler whenever it is not running.
func startStatus() {
	endpoint.once.Do(func() {
		mode := strings.TrimSpace(config.String("STATUS"))
		if mode == "0" || strings.EqualFold(mode, "off") {
			return
		}
		if err := listenStatus(mode); err != nil {
			debuglog.Warnf(debuglog.Init, -1, "status endpoint off: %v (GOCL_STATUS=0 silences this)", err)
		}
	})
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if !endpoint.sampling && len(registry.comms) > 0 {
		endpoint.sampling = true
		go sampler()
	}
}

// sampler runs while the process has communicators.
func sampler() {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for now := range t.C {
		sample(now)
		registry.mu.Lock()
		if len(registry.comms) == 0 {
			endpoint.sampling = false
			registry.mu.Unlock()
			return
		}
		registry.mu.Unlock()
	}
}

// StatusDir is where the Unix sockets of this user's processes are.
func StatusDir() string {
	if d := strings.TrimSpace(config.String("STATUS_DIR")); d != "" {
		return d
	}
	if d, _ := config.LookupEnv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gocl")
	}
	return filepath.Join(os.TempDir(), "gocl-"+strconv.Itoa(os.Getuid()))
}

func listenStatus(mode string) error {
	tcp, isTCP := strings.CutPrefix(mode, "tcp:")
	token := strings.TrimSpace(config.String("STATUS_TOKEN"))
	switch {
	case isTCP:
		if err := checkStatusToken(token, mode); err != nil {
			return err
		}
	case mode != "" && mode != "1" && !strings.EqualFold(mode, "on"):
		return fmt.Errorf("GOCL_STATUS=%q: give 1 (a Unix socket, the default), tcp:HOST:PORT (also TCP), or 0 (off)", mode)
	}
	dir := StatusDir()
	fd, st, err := openStatusDir(dir)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	sweepStatusDir(dir)
	key := make([]byte, 32)
	rand.Read(key)
	name := strconv.Itoa(os.Getpid())
	base := filepath.Join(dir, name)
	os.Remove(base + ".sock") // a process that had this pid before
	// The key is written through the checked directory's descriptor, so a
	// path swapped since the check cannot redirect it.
	if err := writeKeyAt(fd, name+".key", []byte(hex.EncodeToString(key))); err != nil {
		return fmt.Errorf("status directory %s: writing %s.key: %v", dir, name, err)
	}
	ln, err := net.Listen("unix", base+".sock")
	if err != nil {
		return err
	}
	// bind(2) takes a path: make sure it still leads to the directory checked.
	var now syscall.Stat_t
	if err := syscall.Lstat(dir, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		ln.Close()
		return fmt.Errorf("status directory %s was replaced while the endpoint started: remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir)
	}
	go bootstrap.ServeUnsealed(ln, -1, key, serveStatus)
	if isTCP {
		tl, err := net.Listen("tcp", tcp)
		if err != nil {
			return fmt.Errorf("GOCL_STATUS=%s: %v", mode, err)
		}
		go bootstrap.ServeUnsealed(tl, -1, []byte(token), serveStatus)
	}
	return nil
}

// openStatusDir makes dir (mode 0700) if it is not there and opens it
// without following a symlink: another user who planted a symlink (or a
// directory of their own) at /tmp/gocl-UID must not get the keys. It
// refuses unless dir is a directory this user owns that nobody else may
// enter. It returns the open directory and what it is.
func openStatusDir(dir string) (int, syscall.Stat_t, error) {
	var st syscall.Stat_t
	if parent := filepath.Dir(dir); parent != dir {
		os.MkdirAll(parent, 0o700) // GOCL_STATUS_DIR may name a new tree; the last component is what is checked
	}
	if err := syscall.Mkdir(dir, 0o700); err != nil && err != syscall.EEXIST {
		return -1, st, fmt.Errorf("status directory %s: cannot make it: %v (set GOCL_STATUS_DIR to a directory only you can read)", dir, err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		why := err.Error()
		var lst syscall.Stat_t
		if syscall.Lstat(dir, &lst) == nil {
			switch lst.Mode & syscall.S_IFMT {
			case syscall.S_IFLNK:
				why = "it is a symlink (someone may have planted it to read your status keys)"
			case syscall.S_IFDIR:
			default:
				why = "it is not a directory"
			}
		}
		return -1, st, fmt.Errorf("status directory %s refused: %s: remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir, why)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, st, fmt.Errorf("status directory %s: %v", dir, err)
	}
	var why string
	switch {
	case int(st.Uid) != os.Getuid():
		why = fmt.Sprintf("it is owned by uid %d, not by you (uid %d)", st.Uid, os.Getuid())
	case st.Mode&0o077 != 0:
		why = fmt.Sprintf("it has mode %04o, so others may enter it: chmod 700 %s", st.Mode&0o7777, dir)
	}
	if why != "" {
		syscall.Close(fd)
		return -1, st, fmt.Errorf("status directory %s refused: %s, remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir, why)
	}
	return fd, st, nil
}

// writeKeyAt writes a key file in the directory open as dirfd, mode 0600,
// replacing one a process of the same pid left, never through a symlink.
func writeKeyAt(dirfd int, name string, b []byte) error {
	syscall.Unlinkat(dirfd, name)
	fd, err := syscall.Openat(dirfd, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkStatusToken says why token cannot key GOCL_STATUS=mode, or nil.
func checkStatusToken(token, mode string) error {
	if token == "" {
		return fmt.Errorf("GOCL_STATUS=%s asks for TCP but GOCL_STATUS_TOKEN is not set: set it to a secret the clients share (gocl status --connect HOST:PORT reads it from the same variable); %s makes one", mode, bootstrap.MakeSecret)
	}
	if n, distinct, ok := bootstrap.SecretStrength(token); !ok {
		return fmt.Errorf("GOCL_STATUS_TOKEN is too weak for GOCL_STATUS=%s (%d characters, %d different; it needs at least %d, %d different, as 128 random bits give): one seen handshake lets it be guessed offline; %s makes a good one",
			mode, n, distinct, bootstrap.MinSecretLen, bootstrap.MinSecretDistinct, bootstrap.MakeSecret)
	}
	return nil
}

// sweepStatusDir removes the sockets and keys of processes that are gone.
func sweepStatusDir(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	for _, n := range names {
		pid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(n), ".sock"))
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.Remove(n)
			os.Remove(strings.TrimSuffix(n, ".sock") + ".key")
		}
	}
}

// serveStatus answers a client of the endpoint.
func serveStatus(req bootstrap.Request) any {
	var r statusRequest
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &r); err != nil {
			return map[string]string{"error": "malformed status request: " + err.Error()}
		}
	}
	if req.Kind != askStatus {
		return map[string]string{"error": fmt.Sprintf("unknown request %q (a gocl of another version?)", req.Kind)}
	}
	reply := StatusReply{Process: snapshot(r.ID)}
	if !r.Peers {
		return reply
	}
	registry.mu.Lock()
	var roots []*Comm
	for c := range registry.comms {
		if c.rank == 0 && c.nranks > 1 && (r.ID == "" || commID(c.key) == r.ID) {
			roots = append(roots, c)
		}
	}
	registry.mu.Unlock()
	reply.Ranks = map[string][]CommView{}
	for _, c := range roots {
		reply.Ranks[commID(c.key)] = c.gather()
	}
	return reply
}

// statusAsks bounds the ranks gather asks at once (the connections and
// goroutines it holds, whatever N); ranks that do not answer cost
// statusAskWait per statusAsks of them.
const statusAsks = 256

// gather asks every rank of c for its view, statusAsks at a time; rank 0's
// is its own.
func (c *Comm) gather() []CommView {
	out := make([]CommView, c.nranks)
	var wg sync.WaitGroup
	slots := make(chan struct{}, statusAsks)
	for p := range c.nranks {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() { recover() }()
			if p == c.rank {
				out[p] = c.ownView()
				return
			}
			var v CommView
			err := bootstrap.Ask(c.peers[p].Addr, c.secret, time.Now().Add(statusAskWait), bootstrap.NewRequest(askStatus, nil), &v)
			if err != nil || v.ID == "" {
				why := "no answer within 1 s: its process is stopped, hung or gone"
				if err != nil && !bootstrap.IsTimeout(err) {
					why = fmt.Sprintf("no answer: %v", err)
				}
				no := false
				v = CommView{ID: commID(c.key), Rank: p, Size: c.nranks, Pid: c.peers[p].Pid,
					Host: strings.SplitN(c.peers[p].Host, "/", 2)[0], Addr: hostOf(c.peers[p].Addr), Nodes: c.nnodes,
					Links: []LinkView{}, Error: why, Reachable: &no}
			}
			out[p] = v
		}()
	}
	wg.Wait()
	return out
}

// ownView is c's view, for a peer's rank 0 (askStatus on the bootstrap listener).
func (c *Comm) ownView() CommView {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if s := registry.comms[c]; s != nil {
		return c.view(s, time.Now())
	}
	return CommView{ID: commID(c.key), Rank: c.rank, Size: c.nranks, Pid: os.Getpid(), Host: hostName,
		Links: []LinkView{}, Error: "the communicator was destroyed"}
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
