// Package debuglog writes NCCL-style log lines:
//
//	host:pid:tid [rank] GOCL INFO message
//
// so that people's grep patterns and habits carry over. The level, the
// subsystems and the file come from GOCL_DEBUG, GOCL_DEBUG_SUBSYS and
// GOCL_DEBUG_FILE (NCCL_* fallbacks), read again at every communicator init
// (config.Reload), so a program may set them in code.
package debuglog

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"gocl/runtime/config"
)

// Level orders the verbosity.
type Level int

const (
	None Level = iota
	Version
	Warn
	Info
	Trace
)

// Subsys is a bit set of log subsystems.
type Subsys uint32

const (
	Init Subsys = 1 << iota
	Bootstrap
	Env
	Net
	P2P
	Coll
	Tuning
	Call
	All Subsys = 1<<iota - 1
)

var subsysNames = map[string]Subsys{
	"INIT": Init, "BOOTSTRAP": Bootstrap, "ENV": Env, "NET": Net, "P2P": P2P,
	"COLL": Coll, "TUNING": Tuning, "CALL": Call, "ALL": All,
}

type logger struct {
	level  atomic.Int32  // Level
	subsys atomic.Uint32 // Subsys
	host   string
	pid    int

	mu       sync.Mutex // guards the writer and the file it may own
	out      io.Writer
	file     *os.File // the GOCL_DEBUG_FILE gocl opened, if any
	fileName string
}

var lg logger

func init() {
	lg.host, _ = os.Hostname()
	lg.pid = os.Getpid()
	lg.out = os.Stderr
	config.OnReload(reload)
}

// reload reads the level, the subsystems and the file from the environment.
// A file stays open (and is appended to, not truncated) while its name is
// unchanged.
func reload() {
	level := ParseLevel(config.String("DEBUG"))
	lg.subsys.Store(uint32(ParseSubsys(config.String("DEBUG_SUBSYS"))))
	name := ""
	if f := config.String("DEBUG_FILE"); f != "" && level > None {
		name = ExpandFileName(f, lg.host, lg.pid)
	}
	lg.mu.Lock()
	if name != lg.fileName {
		if lg.file != nil {
			lg.file.Close()
			lg.file = nil
		}
		lg.out, lg.fileName = os.Stderr, name
		if name != "" {
			if w, err := os.Create(name); err == nil {
				lg.out, lg.file = w, w
			} else {
				fmt.Fprintf(os.Stderr, "%s:%d GOCL WARN cannot open GOCL_DEBUG_FILE %q: %v; logging to stderr\n", lg.host, lg.pid, name, err)
			}
		}
	}
	lg.mu.Unlock()
	lg.level.Store(int32(level))
}

func get() *logger { return &lg }

// ParseLevel maps GOCL_DEBUG's value to a Level (unknown → None).
func ParseLevel(s string) Level {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "VERSION":
		return Version
	case "WARN":
		return Warn
	case "INFO":
		return Info
	case "TRACE":
		return Trace
	}
	return None
}

// ParseSubsys reads "INIT,NET" or "^COLL" (everything but COLL).
func ParseSubsys(s string) Subsys {
	s = strings.TrimSpace(s)
	invert := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	var set Subsys
	for _, name := range strings.Split(s, ",") {
		set |= subsysNames[strings.ToUpper(strings.TrimSpace(name))]
	}
	if invert {
		return All &^ set
	}
	return set
}

// ExpandFileName replaces %h with the host name and %p with the pid.
func ExpandFileName(pattern, host string, pid int) string {
	r := strings.NewReplacer("%h", host, "%p", fmt.Sprint(pid), "%%", "%")
	return r.Replace(pattern)
}

// Enabled reports whether a line at level l for subsystem s would be written;
// callers use it to skip building expensive messages.
func Enabled(l Level, s Subsys) bool {
	if int32(l) > lg.level.Load() {
		return false
	}
	return l <= Warn || Subsys(lg.subsys.Load())&s != 0
}

// Logf writes one line for rank (-1 when there is none yet).
func Logf(l Level, s Subsys, rank int, format string, args ...any) {
	if !Enabled(l, s) {
		return
	}
	g := get()
	name := [...]string{"", "VERSION", "WARN", "INFO", "TRACE"}[l]
	r := ""
	if rank >= 0 {
		r = fmt.Sprintf(" [%d]", rank)
	}
	line := fmt.Sprintf("%s:%d:%d%s GOCL %s %s\n", g.host, g.pid, syscall.Gettid(), r, name, fmt.Sprintf(format, args...))
	g.mu.Lock()
	io.WriteString(g.out, line)
	g.mu.Unlock()
}

// Warnf, Infof and Tracef are Logf at a fixed level.
func Warnf(s Subsys, rank int, format string, args ...any) { Logf(Warn, s, rank, format, args...) }
func Infof(s Subsys, rank int, format string, args ...any) { Logf(Info, s, rank, format, args...) }
func Tracef(s Subsys, rank int, format string, args ...any) {
	Logf(Trace, s, rank, format, args...)
}

// Dump writes lines at WARN whatever the level is set to: for reports the
// user asked for by other means (GOCL_TRACE_BUFFER).
func Dump(rank int, lines []string) {
	g := get()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range lines {
		fmt.Fprintf(g.out, "%s:%d:%d [%d] GOCL WARN %s\n", g.host, g.pid, syscall.Gettid(), rank, l)
	}
}
