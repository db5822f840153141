package telemetry

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/status"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// Flight keeps the last operations of a communicator
// (GOCL_TRACE_BUFFER of them, or 1000 when only GOCL_TRACE_FILE is set):
// the calls each rank made just before a hang or a mismatch are what a
// post-mortem needs. When the communicator fails it prints them and, with
// GOCL_TRACE_FILE, appends them to a file as JSON lines, which `gocl trace`
// lines up across ranks; goclCommDumpTrace writes them on request. Entries
// hold values, not text: recording a call costs two clock reads and a lock.
type Flight struct {
	mu   sync.Mutex
	ring []Entry
	next uint64

	// fixed for the communicator's lifetime
	comm       string // the communicator's id, equal on every rank
	rank, size int
	transports string // the transports of this rank's links
	file       string // GOCL_TRACE_FILE with %r expanded ("": none)
}

// Entry is one call, as the call path describes it.
type Entry struct {
	Hdr    wire.Header // the call: kind, collective, dtype, op, root, seq, count
	Send   bool        // point-to-point: a send (else a receive)
	Peer   int         // point-to-point: the peer
	Bytes  int
	Choice tune.Choice // collectives: algorithm and protocol
	Via    string      // point-to-point: the link's transport

	start time.Time
	took  time.Duration
	err   error
	done  bool
}

// traceRecord is one line of a trace file (python/gocl/trace.py reads it).
type traceRecord struct {
	Comm      string  `json:"comm"`
	Rank      int     `json:"rank"`
	NRanks    int     `json:"nranks"`
	Pid       int     `json:"pid"`
	ID        uint64  `json:"id"` // record number on this rank's communicator
	Op        string  `json:"op"` // allreduce, ..., send, recv
	Seq       uint64  `json:"seq"`
	Count     uint64  `json:"count"`
	Dtype     string  `json:"dtype"`
	RedOp     string  `json:"redop,omitempty"`
	Root      *int    `json:"root,omitempty"`
	Peer      *int    `json:"peer,omitempty"`
	Bytes     int     `json:"bytes"`
	Algorithm string  `json:"algorithm,omitempty"`
	Transport string  `json:"transport"`
	State     string  `json:"state"` // started, completed, failed
	StartUs   int64   `json:"start_us"`
	Duration  float64 `json:"duration_us"` // so far, for a call still running
	Error     string  `json:"error,omitempty"`
	Reason    string  `json:"dump_reason"` // why the file was written
}

// NewFlight returns the recorder GOCL_TRACE_BUFFER or GOCL_TRACE_FILE asks
// for, or nil. transports names the transports of the rank's links; it is
// called only when the recorder is on.
func NewFlight(id Identity, transports func() []string) *Flight {
	n := config.IntOr("TRACE_BUFFER", 0)
	file := strings.TrimSpace(config.String("TRACE_FILE"))
	if n <= 0 && file != "" {
		n = 1000
	}
	if n <= 0 {
		return nil
	}
	return &Flight{ring: make([]Entry, n), comm: id.Comm, rank: id.Rank, size: id.NRanks,
		transports: strings.Join(transports(), "+"), file: expandFile(file, id.Rank)}
}

// Begin records a call and returns its slot for End.
func (f *Flight) Begin(e Entry) uint64 {
	if f == nil {
		return 0
	}
	e.start = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.next
	f.ring[k%uint64(len(f.ring))] = e
	f.next++
	return k
}

func (f *Flight) End(k uint64, err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next-k > uint64(len(f.ring)) {
		return // evicted already (a ring smaller than one group)
	}
	e := &f.ring[k%uint64(len(f.ring))]
	e.took, e.err, e.done = time.Since(e.start), err, true
}

// records renders the kept calls, oldest first.
func (f *Flight) records(reason string) []traceRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(f.next, uint64(len(f.ring)))
	out := make([]traceRecord, 0, n)
	now := time.Now()
	for k := f.next - n; k < f.next; k++ {
		e := f.ring[k%uint64(len(f.ring))]
		r := traceRecord{Comm: f.comm, Rank: f.rank, NRanks: f.size, Pid: os.Getpid(), ID: k, Seq: e.Hdr.Seq,
			Count: e.Hdr.Count, Dtype: wire.DtypeName(e.Hdr.Dtype), Bytes: e.Bytes, Transport: f.transports,
			State: "started", StartUs: e.start.UnixMicro(), Duration: float64(now.Sub(e.start).Nanoseconds()) / 1e3, Reason: reason}
		if e.Hdr.Kind == wire.KindP2P {
			r.Op, r.Peer, r.Transport = "recv", &e.Peer, e.Via
			if e.Send {
				r.Op = "send"
			}
		} else {
			r.Op, r.Algorithm = e.Hdr.Coll.String(), e.Choice.String()
			d := e.Hdr.Coll.Desc()
			if d.Reduces {
				r.RedOp = wire.OpName(e.Hdr.Op)
			}
			if d.Rooted {
				root := int(e.Hdr.Root)
				r.Root = &root
			}
		}
		if e.done {
			r.State, r.Duration = "completed", float64(e.took.Nanoseconds())/1e3
			if e.err != nil {
				r.State, r.Error = "failed", e.err.Error()
			}
		}
		out = append(out, r)
	}
	return out
}

// describe is one record in words, for the log.
func (r *traceRecord) describe() string {
	s := fmt.Sprintf("%s #%d (count %d, %s", r.Op, r.Seq, r.Count, r.Dtype)
	if r.RedOp != "" {
		s += ", " + r.RedOp
	}
	if r.Root != nil {
		s += fmt.Sprintf(", root %d", *r.Root)
	}
	if r.Peer != nil {
		s += fmt.Sprintf(", rank %d", *r.Peer)
	}
	s += ")"
	if r.Algorithm != "" {
		s += " via " + r.Algorithm
	}
	return s + " over " + r.Transport
}

// report lists the recorded calls, oldest first.
func (f *Flight) report(cause error) []string {
	recs := f.records("")
	lines := []string{fmt.Sprintf("flight recorder: last %d calls before: %v", len(recs), cause)}
	for _, r := range recs {
		state := "in progress"
		if r.State != "started" {
			state = fmt.Sprintf("took %v", time.Duration(r.Duration*1e3).Round(time.Microsecond))
			if r.State == "failed" {
				state += ", failed"
			}
		}
		lines = append(lines, fmt.Sprintf("  %s  %s  (%s)", time.UnixMicro(r.StartUs).Format("15:04:05.000000"), r.describe(), state))
	}
	return lines
}

// Dump prints the report whatever GOCL_DEBUG says, and appends the records
// to the trace file if there is one.
func (f *Flight) Dump(cause error) {
	if f == nil {
		return
	}
	debuglog.Dump(f.rank, f.report(cause))
	if f.file != "" {
		if err := f.Write(f.file, "failure: "+cause.Error()); err != nil {
			debuglog.Warnf(debuglog.Init, f.rank, "flight recorder: %v", err)
		}
	}
}

// Write appends the records to path as JSON lines, in one write so that
// ranks sharing a file do not interleave their lines.
func (f *Flight) Write(path, reason string) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, r := range f.records(reason) {
		enc.Encode(r)
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return status.Errorf(status.SystemError, "rank %d: cannot write the trace file (GOCL_TRACE_FILE): %v", f.rank, err)
	}
	defer out.Close()
	if _, err := out.Write([]byte(b.String())); err != nil {
		return status.Errorf(status.SystemError, "rank %d: writing the trace file %s failed: %v", f.rank, path, err)
	}
	return nil
}

// File is the trace file GOCL_TRACE_FILE names, with %r expanded ("": none).
func (f *Flight) File() string { return f.file }
