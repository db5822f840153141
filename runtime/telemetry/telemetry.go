// Package telemetry records what a communicator's calls did, for people and
// tools outside the call path: per-call metrics (a JSON-lines file in NCCL
// Inspector's format and a Prometheus endpoint) and the flight recorder (the
// last calls, printed and written when a communicator fails). A communicator
// holds a nil recorder when its setting is off, and every method of a nil
// recorder is a no-op, so the call path pays one branch.
package telemetry

import (
	"os"
	"strconv"
	"strings"

	"gocl/runtime/debuglog"
)

// Identity is what every record says of its communicator.
type Identity struct {
	Comm         string // the communicator's id, equal on every rank
	Rank, NRanks int
	NNodes       int // hosts the communicator spans
}

// expandFile expands a file setting's %h and %p (debuglog's) and %r (the
// rank); "" stays "".
func expandFile(file string, rank int) string {
	if file == "" {
		return ""
	}
	host, _ := os.Hostname()
	return strings.ReplaceAll(debuglog.ExpandFileName(strings.ReplaceAll(file, "%r", "\x00"), host, os.Getpid()), "\x00", strconv.Itoa(rank))
}
