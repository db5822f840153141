// Package config is gocl's one table of environment variables. Each GOCL_X
// falls back to NCCL_X (so an existing NCCL environment keeps working), then
// to the default. Values come from the process's live environment (env.go),
// read at the moment they apply: each communicator init (unique id, init,
// split) reads its settings and keeps them for its lifetime, so a program
// may set them in code before creating a communicator, and change them
// between two.
package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Var documents one setting. The README's table lists every one.
type Var struct {
	Name    string // without the GOCL_/NCCL_ prefix
	Default string
	Read    string // when gocl reads it (one of the Read* values)
	Doc     string
}

// When a setting is read.
const (
	// ReadInit: by each communicator init, which keeps the value.
	ReadInit = "each init"
	// ReadProcess: by each init, for the whole process (later inits replace it).
	ReadProcess = "each init, process-wide"
	// ReadStartup: once, by the process's first unique id or init.
	ReadStartup = "first init of the process"
	// ReadJaxInit: once, by the process's first gocl.jax world.
	ReadJaxInit = "first gocl.jax.init of the process"
	// ReadExchange: by each unique id exchange (from_env, goclExchangeUniqueId).
	ReadExchange = "each unique id exchange"
	// ReadNever: accepted for NCCL compatibility, not used.
	ReadNever = "never"
)

var table = []Var{
	{"DEBUG", "", ReadProcess, "log level: VERSION, WARN, INFO or TRACE (unset: only errors returned to the caller)"},
	{"DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV", ReadProcess, "comma list of INIT, BOOTSTRAP, ENV, NET, P2P, COLL, TUNING, CALL, ALL; ^ negates the list"},
	{"DEBUG_FILE", "", ReadProcess, "log to this file instead of stderr; %h is the host name, %p the pid"},
	{"SOCKET_IFNAME", "", ReadInit, "interface prefixes to use (a,b), ^ to exclude, = for an exact name; default: first non-loopback interface that is up, else lo"},
	{"SOCKET_FAMILY", "", ReadInit, "AF_INET or AF_INET6 to force an address family"},
	{"SOCKET_NTHREADS", "1", ReadInit, "with NSOCKS_PERTHREAD: sockets per peer = NTHREADS × NSOCKS_PERTHREAD (at most 64), as in NCCL"},
	{"NSOCKS_PERTHREAD", "2", ReadInit, "sockets per thread; a message of 256 KiB or more is striped over all sockets of a peer"},
	{"SOCKET_ENCRYPT", "0", ReadInit, "1: every TCP link between ranks is encrypted and authenticated (AES-256-GCM, keys of its own per link and direction, derived from the job's secret), for networks you do not trust; every rank must set it alike; shared-memory and in-process links are not affected (docs/SECURITY.md)"},
	{"NET_GBPS", "", ReadInit, "the link between hosts in Gbit/s, as the tuner models it; unset: the slowest speed the ranks' interfaces report, else costs.txt's socket row"},
	{"P2P_DISABLE", "0", ReadInit, "1: ranks of one process talk over shared memory (or sockets, with SHM_DISABLE) instead of reading each other's memory"},
	{"SHM_DISABLE", "0", ReadInit, "1: ranks of one host talk over TCP sockets instead of shared memory (both ends publish it at init, so one rank setting it is enough for its pairs)"},
	{"SHM_CMA", "auto", ReadInit, "auto: an allgather's or a broadcast's frames of 64 KiB or more, in calls of up to 1 MiB, between processes of one host are read from the sender's memory (process_vm_readv: one copy instead of three) where the kernel allows it without a log line (no Yama, or ptrace_scope 0); 1: every frame of 128 KiB or more (reductions too: slower on the 2-core benchmark host); 0: never (bench/SHM.md)"},
	{"RUNTIME_CONNECT", "1", ReadInit, "1: a pair of ranks connects the first time a call's algorithm needs it, not at init (as NCCL_RUNTIME_CONNECT): a job that only all-reduces over a ring holds 2 links per rank instead of N-1, and init is faster; every rank must set it alike; a receive from any source connects to every rank; 0: every pair connects at init (a full mesh)"},
	{"SHM_BUDGET", "0", ReadInit, "MiB of shared-memory segments a process may hold for its pairs (each pair and channel costs about 4.3 MiB); a pair that would pass it talks over TCP instead, on both ends; 0: no cap (pairs map their pages only as they are used, and with RUNTIME_CONNECT=1 only the pairs a job's calls use exist)"},
	{"IB_DISABLE", "1", ReadNever, "accepted for NCCL compatibility; gocl has no InfiniBand transport"},
	{"BUFFSIZE", "1048576", ReadInit, "bytes per pipelined chunk of ring algorithms"},
	{"ALGO", "", ReadInit, "algorithms the tuner may pick, NCCL's syntax (ring, tree, direct, halvingdoubling, hier; ^ excludes; per collective: \"ring;allreduce:tree\"); unset: the cost model picks"},
	{"PROTO", "", ReadInit, "protocols the tuner may pick, syntax as GOCL_ALGO: Simple, LL (only where a transport offers it, e.g. shared memory), LL128 (accepted, never offered on CPUs)"},
	{"MIN_NCHANNELS", "1", ReadInit, "fewest channels a large ring allreduce is split across, when its shared-memory links have that many (ranks that disagree use the smallest)"},
	{"MAX_NCHANNELS", "", ReadInit, "most channels (shared-memory FIFO pairs per peer, a goroutine each) a large ring allreduce is split across; unset: cores per local rank, at most 4"},
	{"TIMEOUT", "600", ReadInit, "seconds an init or an operation may wait on a peer before failing with goclTimeout; a timeout given to the communicator (goclConfig_t.timeout, the torch group's timeout) takes precedence; 0: no limit"},
	{"HEARTBEAT_TIMEOUT", "5", ReadInit, "seconds a process may leave gocl's heartbeats unanswered before its ranks are declared gone: each process is watched by the one before it in rank order, a ring (a probe on gocl's own threads every timeout/5, at most 1 s), and a silent one fails every call on the communicator on every rank, naming it, whatever GOCL_TIMEOUT says (a stopped, frozen or cut-off process: SIGSTOP, a debugger, a lost network); 0: off (then only GOCL_TIMEOUT ends such a wait: set 0 while you hold a rank in a debugger)"},
	{"TRACE_BUFFER", "0", ReadInit, "keep the last N calls per communicator and print them when it fails (a flight recorder for post-mortems; 1000 when only TRACE_FILE is set)"},
	{"STATUS", "1", ReadStartup, "the status endpoint gocl status and gocl top ask: 1: a Unix socket per process in GOCL_STATUS_DIR (only this user can ask); tcp:HOST:PORT: also on TCP, keyed by GOCL_STATUS_TOKEN; 0: none"},
	{"STATUS_DIR", "", ReadStartup, "where the status endpoints' sockets are; unset: $XDG_RUNTIME_DIR/gocl, else /tmp/gocl-UID (made mode 0700; refused when it is a symlink, another user's, or open to others)"},
	{"RENDEZVOUS_SECRET", "", ReadExchange, "the secret every rank of a launcher's world proves before rank 0 hands it the unique id (Communicator.from_env, gocl.jax.init), at least 32 characters (10 different); gocl run sets it; unset: anyone who reaches MASTER_ADDR:MASTER_PORT can fetch the id (docs/SECURITY.md)"},
	{"STATUS_TOKEN", "", ReadStartup, "the secret a TCP status endpoint (GOCL_STATUS=tcp:...) and its clients share, at least 32 characters (10 different): python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"},
	{"TRACE_FILE", "", ReadInit, "append the flight recorder's calls as JSON lines to this file when a communicator fails or goclCommDumpTrace asks; %h is the host name, %p the pid, %r the rank; `gocl trace FILES...` lines the ranks up"},
	{"METRICS_FILE", "", ReadInit, "append one JSON line per completed call here, in NCCL Inspector's fields plus gocl's (README: gocl status and gocl top); %h host, %p pid, %r rank; `gocl trace` summarises them"},
	{"METRICS_PORT", "", ReadStartup, "PORT (on 127.0.0.1 only) or HOST:PORT (0.0.0.0:PORT: every interface): serve per-op counters in Prometheus' text format at /metrics (a port per process)"},
	{"SPIN_US", "50", ReadProcess, "microseconds a waiting rank polls before it sleeps, when a core is free for it (scaled when ranks outnumber cores: runtime/host); 0 sleeps at once"},
	{"DEFAULTS", "1", ReadStartup, "1: on a machine gocl doctor's knowledge base flags, set the safe settings you left unset for the other libraries in the process (e.g. NCCL_P2P_DISABLE=1), logged at INFO; 0: none"},
	{"JAX_MALLOC", "1", ReadJaxInit, "1: gocl.jax and gocl's MPI ABI library (read by its MPI_Init) keep glibc's freed memory for reuse, so XLA's result buffers are resident pages (unless MALLOC_* or GLIBC_TUNABLES tune malloc); 0: leave malloc alone"},
	{"DIRECT_THRESHOLD", "32768", ReadInit, "bytes: largest call (for allgather and reducescatter: largest block) for which the tuner considers the one-shot direct algorithm; GOCL_ALGO=direct forces it at any size"},
}

// Table lists every setting with its default and meaning.
func Table() []Var { return append([]Var(nil), table...) }

// READMERow is v's row in the README's settings table (checked by a test).
func READMERow(v Var) string {
	def := v.Default
	if def == "" {
		def = "unset"
	}
	return fmt.Sprintf("| `GOCL_%s` | %s | %s | %s |", v.Name, def, v.Read, v.Doc)
}

func lookup(name string) string {
	v, _ := Source(name)
	return v
}

// Source returns the value of setting name and the variable it came from
// ("GOCL_X", "NCCL_X" or "default").
func Source(name string) (string, string) {
	if v, ok := LookupEnv("GOCL_" + name); ok {
		return v, "GOCL_" + name
	}
	if v, ok := LookupEnv("NCCL_" + name); ok && !SetByGocl("NCCL_"+name) {
		return v, "NCCL_" + name
	}
	for _, t := range table {
		if t.Name == name {
			return t.Default, "default"
		}
	}
	panic("config: unknown setting " + name) // a programming error, caught in tests
}

// Shown is a setting's value as logs and reports may show it: secrets
// (the rendezvous secret, the status token) only as "(hidden)".
func Shown(name, value string) string {
	if strings.HasSuffix(name, "SECRET") || strings.HasSuffix(name, "TOKEN") {
		return "(hidden)"
	}
	return value
}

// Process-wide settings (ReadProcess: the log level, the spin time) are
// held by the packages that use them; each registers a reload function,
// which Reload runs at every communicator init.
var (
	hooksMu sync.Mutex
	hooks   []func()
)

// OnReload registers f to run now and at every Reload.
func OnReload(f func()) {
	hooksMu.Lock()
	hooks = append(hooks, f)
	hooksMu.Unlock()
	f()
}

// Reload re-reads the process-wide settings from the environment; every
// communicator init (unique id, init, split) calls it first.
func Reload() {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// String returns the setting's value.
func String(name string) string { return lookup(name) }

// Int returns the setting as an integer; a malformed value is an error that
// names the variable.
func Int(name string) (int, error) {
	v := strings.TrimSpace(lookup(name))
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("GOCL_%s=%q is not an integer", name, v)
	}
	return n, nil
}

// IntOr is Int with a fallback for malformed values (which are logged by the
// caller's init via Check).
func IntOr(name string, def int) int {
	n, err := Int(name)
	if err != nil {
		return def
	}
	return n
}

// Bool is true for 1/true/yes/on.
func Bool(name string) bool {
	switch strings.ToLower(strings.TrimSpace(lookup(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// SHMCMA is GOCL_SHM_CMA: "auto" (unset too), "all" (1/true/yes/on) or
// "off" (0/false/no/off); Check refuses anything else.
func SHMCMA() string {
	mode, _ := shmCMA()
	return mode
}

// shmCMA reads GOCL_SHM_CMA; ok is false for a value it does not know
// (then "auto").
func shmCMA() (mode string, ok bool) {
	switch strings.ToLower(strings.TrimSpace(lookup("SHM_CMA"))) {
	case "", "auto":
		return "auto", true
	case "1", "true", "yes", "on":
		return "all", true
	case "0", "false", "no", "off":
		return "off", true
	}
	return "auto", false
}

// Timeout is GOCL_TIMEOUT as a duration; 0 or negative means no deadline.
func Timeout() time.Duration { return seconds("TIMEOUT", 1) } // a tiny positive timeout is not "no limit"

// HeartbeatTimeout is GOCL_HEARTBEAT_TIMEOUT as a duration; 0: heartbeats off.
func HeartbeatTimeout() time.Duration { return seconds("HEARTBEAT_TIMEOUT", time.Millisecond) }

// seconds is setting name (seconds) as a duration of at least least; 0 or
// negative is 0 (off), and a value that does not parse (Check refuses it
// at init) is the table's default.
func seconds(name string, least time.Duration) time.Duration {
	f, err := parseSeconds(lookup(name))
	if err != nil {
		for _, t := range table {
			if t.Name == name {
				f, _ = parseSeconds(t.Default)
			}
		}
	}
	if f <= 0 {
		return 0
	}
	return max(time.Duration(f*float64(time.Second)), least)
}

// maxSeconds bounds GOCL_TIMEOUT well inside time.Duration (292 years).
const maxSeconds = 1e9

// parseSeconds reads a number of seconds: finite, at most maxSeconds.
func parseSeconds(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > maxSeconds {
		return 0, strconv.ErrRange
	}
	return f, nil
}

// intRanges are the integer settings' bounds, checked at init.
var intRanges = []struct {
	name   string
	lo, hi int
	unit   string
}{
	{"SOCKET_NTHREADS", 1, math.MaxInt, "threads per socket link"},
	{"NSOCKS_PERTHREAD", 1, math.MaxInt, "sockets per thread"},
	{"BUFFSIZE", 1, math.MaxInt, "bytes"},
	{"DIRECT_THRESHOLD", 0, math.MaxInt, "bytes; 0: never direct"},
	{"SHM_BUDGET", 0, 1 << 30, "MiB; 0: no cap"},
}

// Check validates the numeric settings so a typo fails init with a clear
// message instead of silently using a default.
func Check() error {
	for _, r := range intRanges {
		n, err := Int(r.name)
		if err != nil {
			return err
		}
		if n < r.lo || n > r.hi {
			return fmt.Errorf("GOCL_%s=%d is out of range: give %d to %d (%s)", r.name, n, r.lo, r.hi, r.unit)
		}
	}
	if s := strings.TrimSpace(lookup("NET_GBPS")); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err != nil || !(f > 0 && f < 1e6) {
			return fmt.Errorf("GOCL_NET_GBPS=%q is not a link rate in Gbit/s (a number above 0, e.g. 1, 10, 25)", s)
		}
	}
	if _, ok := shmCMA(); !ok {
		return fmt.Errorf("GOCL_SHM_CMA=%q is not auto, 1 or 0 (auto: single-copy reads for an allgather's or a broadcast's frames where the kernel allows them; 1: for every large frame; 0: never)", strings.TrimSpace(lookup("SHM_CMA")))
	}
	for _, v := range []struct{ name, zero string }{{"TIMEOUT", "no limit"}, {"HEARTBEAT_TIMEOUT", "heartbeats off"}} {
		if s := strings.TrimSpace(lookup(v.name)); s != "" {
			if _, err := parseSeconds(s); err != nil {
				return fmt.Errorf("GOCL_%s=%q is not a number of seconds up to %g (0: %s)", v.name, s, float64(maxSeconds), v.zero)
			}
		}
	}
	return nil
}

// gocl's own entries in the environment (doctor/defaults): NCCL_ variables
// set for NCCL in the same process, which gocl's settings must not fall back
// to, or a safety setting meant for GPU peer access would move gocl's
// in-process ranks onto sockets.
var (
	ownMu sync.Mutex
	own   = map[string]bool{}
)

// MarkSetByGocl records that gocl itself set environment variable env.
func MarkSetByGocl(env string) {
	ownMu.Lock()
	own[env] = true
	ownMu.Unlock()
}

// SetByGocl reports whether gocl itself set environment variable env.
func SetByGocl(env string) bool {
	ownMu.Lock()
	defer ownMu.Unlock()
	return own[env]
}
