package telemetry

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/transport"
	"gocl/runtime/tune"
	"gocl/runtime/version"
	"gocl/runtime/wire"
)

// Per-call metrics (GOCL_METRICS_FILE, GOCL_METRICS_PORT): one JSON line per
// completed collective and send or receive, for dashboards and after-the-
// fact analysis of a whole run (the flight recorder keeps only the last
// calls, for post-mortems).
//
// The call path pays two monotonic clock reads, a lock and a copy of a
// small struct into a bounded buffer; a background goroutine per
// communicator formats and writes the lines every metricsEvery and when the
// communicator is destroyed or aborted. A call that finds the buffer full
// drops its record rather than wait. The writer does not flush early when
// the buffer fills: that bounds its work to metricsBuffer lines per
// metricsEvery (65536 calls a second per communicator), which at a million
// 8-byte calls a second took a core from the ranks on a 2-core machine
// (bench/METRICS_OVERHEAD.md). The drops are counted, and
// the file says how many in a line of its own after each flush that had
// some (the last such line holds the total), as does a warning at close.
// With metrics off the communicator holds a nil *Metrics and its call path
// pays one branch.
//
// The line format is that of NCCL's Inspector profiler plugin (its JSON
// output, format v4.0: every line carries its own header and metadata),
// so that tools written for Inspector output read ours. Where a field
// means the same it has the Inspector's name:
//
//	header.id             communicator id (gocl's, as gocl status and gocl trace show it)
//	header.rank           rank in the communicator
//	header.n_ranks        ranks in the communicator
//	header.nnodes         hosts the communicator spans
//	metadata.inspector_output_format_version  "v4.0"
//	metadata.git_rev      "gocl VERSION"
//	metadata.rec_mechanism  "gocl_metrics" (Inspector: "nccl_profiler_interface")
//	metadata.dump_timestamp_us  when the line was written (unix µs)
//	metadata.hostname, metadata.pid
//	coll_perf.coll        AllReduce, AllGather, Broadcast, Reduce, ReduceScatter (NCCL's names); AlltoAll, Gather, Scatter
//	coll_perf.coll_sn     the call's sequence number on the communicator
//	coll_perf.coll_msg_size_bytes  bytes: the larger of the send and receive buffers (nccl-tests' size)
//	coll_perf.coll_exec_time_us    duration in µs, from entering the algorithm to its return (a float: µs matter at 8 B)
//	coll_perf.coll_timing_source   "collective_cpu" (host wall clock around the whole call)
//	coll_perf.coll_algobw_gbs      bytes / duration, GB/s (1e9 B)
//	coll_perf.coll_busbw_gbs       algbw × nccl-tests' bus factor (as gocl perf)
//	coll_perf.coll_algo, coll_proto  the algorithm and protocol the tuner picked (gocl's names, as GOCL_ALGO spells them)
//	p2p_perf.p2p          Send or Recv; p2p_sn, p2p_peer, p2p_msg_size_bytes, p2p_exec_time_us,
//	                      p2p_timing_source, p2p_algobw_gbs, p2p_busbw_gbs as for collectives (bus factor 1)
//
// gocl's own fields, which the Inspector does not write, keep its prefix:
// coll_dtype / p2p_dtype (float32, ...), coll_count / p2p_count (the count
// argument), coll_start_us / p2p_start_us (unix µs), coll_error /
// p2p_error (only on a call that failed), p2p_transport. A line with
// "gocl_metrics_dropped" instead of coll_perf or p2p_perf counts dropped
// records (Inspector readers skip lines without coll_perf/p2p_perf).

// metricsEvery is how often the writer flushes what the calls recorded.
const metricsEvery = 500 * time.Millisecond

// metricsBuffer is how many records a communicator holds between flushes
// (2.5 MiB; twice, the writer's batch and the calls').
const metricsBuffer = 32768

// record is one completed call, as the call path hands it over.
type record struct {
	start int64 // unix ns
	took  int64 // ns
	bytes int64
	count uint64
	seq   uint64
	err   error
	peer  int32
	coll  wire.Coll
	dtype uint8
	ch    tune.Choice
	p2p   bool
	send  bool
}

// Metrics takes a communicator's records and writes them.
type Metrics struct {
	mu      sync.Mutex
	buf     []record // filled by the calls
	closed  bool
	dropped uint64 // records the full buffer turned away, in all

	stop chan struct{}
	done chan struct{}

	// the writer goroutine's own
	spare    []record
	file     string // "" with only the Prometheus endpoint
	out      *os.File
	failed   bool   // the file could not be opened or written: stop trying
	reported uint64 // drops already said in the file
	lost     uint64 // records formatted but not written (write errors, a panic)
	line     []byte
	head     []byte // `{"header":{...},"metadata":{...,"dump_timestamp_us":`
	tail     []byte // `,"hostname":...,"pid":N},`
	prom     *promComm

	// fixed
	comm          string
	rank, nranks  int
	transports    []string // per peer, JSON-quoted, for p2p lines
	busFactorColl [wire.SendRecv + 1]float64
}

// NewMetrics returns the recorder GOCL_METRICS_FILE or GOCL_METRICS_PORT
// asks for, or nil. links names each peer's transport ("" for none yet); it
// is called only when the recorder is on (it walks every peer).
func NewMetrics(id Identity, links func() []string) *Metrics {
	file := strings.TrimSpace(config.String("METRICS_FILE"))
	prom := startMetricsEndpoint()
	if file == "" && !prom {
		return nil
	}
	host, _ := os.Hostname()
	m := &Metrics{
		buf: make([]record, 0, metricsBuffer), spare: make([]record, 0, metricsBuffer),
		stop: make(chan struct{}), done: make(chan struct{}),
		file: expandFile(file, id.Rank), comm: id.Comm, rank: id.Rank, nranks: id.NRanks, transports: make([]string, id.NRanks),
	}
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for p, name := range links() {
		if p != id.Rank && name != "" {
			m.transports[p] = str(name)
		}
	}
	for coll := range m.busFactorColl {
		m.busFactorColl[coll] = wire.Coll(coll).Desc().BusFactor(id.NRanks)
	}
	m.head = []byte(`{"header":{"id":` + str(m.comm) + `,"rank":` + strconv.Itoa(id.Rank) + `,"n_ranks":` + strconv.Itoa(id.NRanks) +
		`,"nnodes":` + strconv.Itoa(id.NNodes) + `},"metadata":{"inspector_output_format_version":"v4.0","git_rev":` +
		str("gocl "+version.String) + `,"rec_mechanism":"gocl_metrics","dump_timestamp_us":`)
	m.tail = []byte(`,"hostname":` + str(host) + `,"pid":` + strconv.Itoa(os.Getpid()) + `},`)
	if prom {
		m.prom = promRegister(m.comm, id.Rank, id.NRanks)
	}
	go m.run()
	return m
}

// add hands a completed call to the writer; it never waits for it.
func (m *Metrics) add(r *record) {
	m.mu.Lock()
	if len(m.buf) < cap(m.buf) && !m.closed {
		m.buf = append(m.buf, *r)
	} else {
		m.dropped++
	}
	m.mu.Unlock()
}

// Coll records a collective that started at start.
func (m *Metrics) Coll(hdr *wire.Header, ch tune.Choice, bytes int, start time.Time, err error) {
	if m == nil {
		return
	}
	r := record{start: start.UnixNano(), took: int64(transport.Now().Sub(start)), bytes: int64(bytes), count: hdr.Count,
		seq: hdr.Seq, err: err, peer: -1, coll: hdr.Coll, dtype: hdr.Dtype, ch: ch}
	m.add(&r)
}

// P2P records a send or a receive.
func (m *Metrics) P2P(hdr *wire.Header, send bool, peer, bytes int, start time.Time, err error) {
	if m == nil {
		return
	}
	r := record{start: start.UnixNano(), took: int64(transport.Now().Sub(start)), bytes: int64(bytes), count: hdr.Count,
		seq: hdr.Seq, err: err, peer: int32(peer), coll: wire.SendRecv, dtype: hdr.Dtype, p2p: true, send: send}
	m.add(&r)
}

// Close flushes what is left and stops the writer; the communicator's
// destroy and abort call it. It waits for the writer at most a few seconds
// (a file on a stuck network mount must not hang destroy).
func (m *Metrics) Close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		debuglog.Warnf(debuglog.Init, m.rank, "metrics: the writer of %s did not finish in 5 s; its last records may be missing", m.file)
	}
}

// run is the writer goroutine.
func (m *Metrics) run() {
	defer close(m.done)
	t := time.NewTicker(metricsEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-m.stop:
			m.flush()
			m.finish()
			return
		}
		m.flush()
	}
}

// flush writes the records taken since the last flush. A panic here (a bug)
// loses the batch, never the process: the writer goroutine is ours, and a
// panic in it would kill the program that called through the C API.
func (m *Metrics) flush() {
	m.mu.Lock()
	batch := m.buf
	m.buf, m.spare = m.spare[:0], nil
	dropped := m.dropped
	m.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			m.lost += uint64(len(batch))
			debuglog.Warnf(debuglog.Init, m.rank, "metrics: writer panic (%v); %d records lost", r, len(batch))
		}
		m.spare = batch[:0]
	}()
	if m.prom != nil {
		m.prom.count(batch)
		m.prom.dropped.Store(dropped)
	}
	if m.file == "" || m.failed || (len(batch) == 0 && dropped == m.reported) {
		return
	}
	now := time.Now().UnixMicro()
	b := m.line[:0]
	for i := range batch {
		b = m.format(b, &batch[i], now)
	}
	if dropped != m.reported {
		b = m.dropLine(b, dropped, now)
	}
	m.line = b
	if err := m.write(b); err != nil {
		m.lost += uint64(len(batch))
		m.failed = true
		debuglog.Warnf(debuglog.Init, m.rank, "metrics: %v; no more records will be written", err)
		return
	}
	m.reported = dropped
	if cap(m.line) > 4<<20 {
		m.line = nil // do not keep a burst's buffer
	}
}

// write appends b to the file in one write, so that ranks and communicators
// sharing a file do not interleave their lines.
func (m *Metrics) write(b []byte) error {
	if m.out == nil {
		f, err := os.OpenFile(m.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		m.out = f
	}
	_, err := m.out.Write(b)
	return err
}

// finish closes the file, and warns if records were dropped or lost.
func (m *Metrics) finish() {
	if m.out != nil {
		m.out.Close()
	}
	if m.prom != nil {
		promUnregister(m.prom)
	}
	m.mu.Lock()
	dropped := m.dropped
	m.mu.Unlock()
	if dropped > 0 || m.lost > 0 {
		debuglog.Warnf(debuglog.Init, m.rank, "metrics: %d records dropped (the writer fell behind the calls) and %d lost to write errors; %s is missing them",
			dropped, m.lost, m.file)
	}
}

func (m *Metrics) prefix(b []byte, now int64) []byte {
	b = append(b, m.head...)
	b = strconv.AppendInt(b, now, 10)
	return append(b, m.tail...)
}

// dropLine says how many records were dropped so far.
func (m *Metrics) dropLine(b []byte, dropped uint64, now int64) []byte {
	b = m.prefix(b, now)
	b = append(b, `"gocl_metrics_dropped":`...)
	b = strconv.AppendUint(b, dropped, 10)
	return append(b, "}\n"...)
}

// Names of the collectives in the Inspector's spelling (NCCL's ncclFunc
// names; gocl's alltoall, gather and scatter after NCCL 2.28's API names).
var inspectorColl = [...]string{wire.AllReduce: "AllReduce", wire.Broadcast: "Broadcast", wire.Reduce: "Reduce",
	wire.AllGather: "AllGather", wire.ReduceScatter: "ReduceScatter", wire.AlltoAll: "AlltoAll",
	wire.Gather: "Gather", wire.Scatter: "Scatter", wire.SendRecv: "SendRecv"}

// formatHook, when set (tests), runs before each line is formatted.
var formatHook func(*record)

// format appends r's line.
func (m *Metrics) format(b []byte, r *record, now int64) []byte {
	if formatHook != nil {
		formatHook(r)
	}
	b = m.prefix(b, now)
	us := float64(r.took) / 1e3
	var algbw float64
	if r.took > 0 {
		algbw = float64(r.bytes) / float64(r.took) // B/ns = GB/s
	}
	busbw := algbw
	p := "coll_" // every key after the first is p + its name
	if r.p2p {
		p = "p2p_"
		dir := "Recv"
		if r.send {
			dir = "Send"
		}
		b = append(b, `"p2p_perf":{"p2p":`...)
		b = jsonQuoted(b, dir)
		b = jsonKey(b, p, "sn")
		b = strconv.AppendUint(b, r.seq, 10)
		b = jsonKey(b, p, "peer")
		b = strconv.AppendInt(b, int64(r.peer), 10)
	} else {
		name := "?"
		if int(r.coll) < len(inspectorColl) && inspectorColl[r.coll] != "" {
			name = inspectorColl[r.coll]
			busbw *= m.busFactorColl[r.coll]
		}
		b = append(b, `"coll_perf":{"coll":`...)
		b = jsonQuoted(b, name)
		b = jsonKey(b, p, "sn")
		b = strconv.AppendUint(b, r.seq, 10)
	}
	b = jsonKey(b, p, "msg_size_bytes")
	b = strconv.AppendInt(b, r.bytes, 10)
	b = jsonKey(b, p, "exec_time_us")
	b = strconv.AppendFloat(b, us, 'f', 3, 64)
	b = jsonKey(b, p, "timing_source")
	b = jsonQuoted(b, "collective_cpu")
	b = jsonKey(b, p, "algobw_gbs")
	b = strconv.AppendFloat(b, algbw, 'f', 6, 64)
	b = jsonKey(b, p, "busbw_gbs")
	b = strconv.AppendFloat(b, busbw, 'f', 6, 64)
	if r.p2p {
		b = jsonKey(b, p, "transport")
		if int(r.peer) < len(m.transports) && r.peer >= 0 && m.transports[r.peer] != "" {
			b = append(b, m.transports[r.peer]...) // JSON-quoted already
		} else {
			b = jsonQuoted(b, "self")
		}
	} else {
		b = jsonKey(b, p, "algo")
		b = jsonQuoted(b, r.ch.Algo.String())
		b = jsonKey(b, p, "proto")
		b = jsonQuoted(b, r.ch.Proto.String())
	}
	b = jsonKey(b, p, "dtype")
	b = jsonQuoted(b, wire.DtypeName(r.dtype))
	b = jsonKey(b, p, "count")
	b = strconv.AppendUint(b, r.count, 10)
	b = jsonKey(b, p, "start_us")
	b = strconv.AppendInt(b, r.start/1e3, 10)
	if r.err != nil {
		msg, _ := json.Marshal(r.err.Error())
		b = jsonKey(b, p, "error")
		b = append(b, msg...)
	}
	return append(b, "}}\n"...)
}

// jsonKey appends `,"<prefix><name>":`.
func jsonKey(b []byte, prefix, name string) []byte {
	b = append(b, `,"`...)
	b = append(b, prefix...)
	b = append(b, name...)
	return append(b, `":`...)
}

// jsonQuoted appends s in quotes: names that need no JSON escaping.
func jsonQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
