// Package debuglog writes NCCL-style log lines:
//
//	host:pid:tid [rank] GOCL INFO message
//
// so that people's grep patterns and habits carry over. The level, the
// subsystems and the file come from GOCL_DEBUG, GOCL_DEBUG_SUBSYS and
// GOCL_DEBUG_FILE (NCCL_* fallbacks), read once.
package debuglog

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
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
	level  Level
	subsys Subsys
	out    io.Writer
	host   string
	pid    int
	mu     sync.Mutex
}

var (
	setup sync.Once
	lg    logger
)

func get() *logger {
	setup.Do(func() {
		lg.host, _ = os.Hostname()
		lg.pid = os.Getpid()
		lg.level = ParseLevel(config.String("DEBUG"))
		lg.subsys = ParseSubsys(config.String("DEBUG_SUBSYS"))
		lg.out = os.Stderr
		if f := config.String("DEBUG_FILE"); f != "" && lg.level > None {
			name := ExpandFileName(f, lg.host, lg.pid)
			if w, err := os.Create(name); err == nil {
				lg.out = w
			} else {
				fmt.Fprintf(os.Stderr, "%s:%d GOCL WARN cannot open GOCL_DEBUG_FILE %q: %v; logging to stderr\n", lg.host, lg.pid, name, err)
			}
		}
	})
	return &lg
}

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
	g := get()
	if l > g.level {
		return false
	}
	return l <= Warn || g.subsys&s != 0
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
