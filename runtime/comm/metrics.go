package comm

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// With metrics off, c.metrics is nil and the call path pays one branch.
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

// metricRec is one completed call, as the call path hands it over.
type metricRec struct {
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

// metricsRecorder takes a communicator's records and writes them.
type metricsRecorder struct {
	mu      sync.Mutex
	buf     []metricRec // filled by the calls
	closed  bool
	dropped uint64 // records the full buffer turned away, in all

	stop chan struct{}
	done chan struct{}

	// the writer goroutine's own
	spare    []metricRec
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

// newMetricsRecorder returns the recorder GOCL_METRICS_FILE or
// GOCL_METRICS_PORT asks for, or nil.
func newMetricsRecorder(c *Comm) *metricsRecorder {
	file := strings.TrimSpace(config.String("METRICS_FILE"))
	prom := startMetricsEndpoint()
	if file == "" && !prom {
		return nil
	}
	host, _ := os.Hostname()
	if file != "" {
		file = strings.ReplaceAll(debuglog.ExpandFileName(strings.ReplaceAll(file, "%r", "\x00"), host, os.Getpid()), "\x00", strconv.Itoa(c.rank))
	}
	m := &metricsRecorder{
		buf: make([]metricRec, 0, metricsBuffer), spare: make([]metricRec, 0, metricsBuffer),
		stop: make(chan struct{}), done: make(chan struct{}),
		file: file, comm: commID(c.key), rank: c.rank, nranks: c.nranks, transports: make([]string, c.nranks),
	}
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for p, name := range c.linkNames() {
		if p != c.rank && name != "" {
			m.transports[p] = str(name)
		}
	}
	for coll := range m.busFactorColl {
		m.busFactorColl[coll] = wire.Coll(coll).Desc().BusFactor(c.nranks)
	}
	m.head = []byte(`{"header":{"id":` + str(m.comm) + `,"rank":` + strconv.Itoa(c.rank) + `,"n_ranks":` + strconv.Itoa(c.nranks) +
		`,"nnodes":` + strconv.Itoa(c.nnodes) + `},"metadata":{"inspector_output_format_version":"v4.0","git_rev":` +
		str("gocl "+version.String) + `,"rec_mechanism":"gocl_metrics","dump_timestamp_us":`)
	m.tail = []byte(`,"hostname":` + str(host) + `,"pid":` + strconv.Itoa(os.Getpid()) + `},`)
	if prom {
		m.prom = promRegister(m.comm, c.rank, c.nranks)
	}
	go m.run()
	return m
}

// add hands a completed call to the writer; it never waits for it.
func (m *metricsRecorder) add(r *metricRec) {
	m.mu.Lock()
	if len(m.buf) < cap(m.buf) && !m.closed {
		m.buf = append(m.buf, *r)
	} else {
		m.dropped++
	}
	m.mu.Unlock()
}

// coll records a collective that started at start.
func (m *metricsRecorder) coll(hdr *wire.Header, ch tune.Choice, bytes int, start time.Time, err error) {
	r := metricRec{start: start.UnixNano(), took: int64(transport.Now().Sub(start)), bytes: int64(bytes), count: hdr.Count,
		seq: hdr.Seq, err: err, peer: -1, coll: hdr.Coll, dtype: hdr.Dtype, ch: ch}
	m.add(&r)
}

// p2p records a send or a receive.
func (m *metricsRecorder) p2p(hdr *wire.Header, send bool, peer, bytes int, start time.Time, err error) {
	r := metricRec{start: start.UnixNano(), took: int64(transport.Now().Sub(start)), bytes: int64(bytes), count: hdr.Count,
		seq: hdr.Seq, err: err, peer: int32(peer), coll: wire.SendRecv, dtype: hdr.Dtype, p2p: true, send: send}
	m.add(&r)
}

// close flushes what is left and stops the writer; the communicator's
// destroy and abort call it. It waits for the writer at most a few seconds
// (a file on a stuck network mount must not hang destroy).
func (m *metricsRecorder) close() {
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
func (m *metricsRecorder) run() {
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
func (m *metricsRecorder) flush() {
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
func (m *metricsRecorder) write(b []byte) error {
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
func (m *metricsRecorder) finish() {
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

func (m *metricsRecorder) prefix(b []byte, now int64) []byte {
	b = append(b, m.head...)
	b = strconv.AppendInt(b, now, 10)
	return append(b, m.tail...)
}

// dropLine says how many records were dropped so far.
func (m *metricsRecorder) dropLine(b []byte, dropped uint64, now int64) []byte {
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

// metricsFormatHook, when set (tests), runs before each line is formatted.
var metricsFormatHook func(*metricRec)

// format appends r's line.
func (m *metricsRecorder) format(b []byte, r *metricRec, now int64) []byte {
	if metricsFormatHook != nil {
		metricsFormatHook(r)
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

// The Prometheus endpoint (GOCL_METRICS_PORT): the process's counters per
// communicator and op, in Prometheus' text exposition format at /metrics.
// The writer goroutines add to them at each flush, so serving costs the
// calls nothing.
var promState struct {
	once  sync.Once
	on    bool
	ln    net.Listener // tests close it
	mu    sync.Mutex
	comms map[*promComm]bool
}

// promComm is one communicator's counters.
type promComm struct {
	comm         string
	rank, nranks int
	mu           sync.Mutex
	ops          map[string]*promOp
	dropped      atomic.Uint64
}

type promOp struct {
	calls, bytes, errors uint64
	seconds              float64
}

// startMetricsEndpoint starts the endpoint once per process, if
// GOCL_METRICS_PORT asks for it, and says whether it runs.
func startMetricsEndpoint() bool {
	promState.once.Do(func() {
		addr := strings.TrimSpace(config.String("METRICS_PORT"))
		if addr == "" || addr == "0" {
			return
		}
		addr = metricsAddr(addr)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			debuglog.Warnf(debuglog.Init, -1, "metrics endpoint off: %v (GOCL_METRICS_PORT=%s)", err, addr)
			return
		}
		promState.on, promState.ln = true, ln
		promState.comms = map[*promComm]bool{}
		go serveMetrics(ln)
		debuglog.Infof(debuglog.Init, -1, "metrics endpoint on http://%s/metrics", ln.Addr())
	})
	return promState.on
}

// metricsAddr is where GOCL_METRICS_PORT=v listens: a bare port on
// loopback only (the counters name the job's communicators and hosts, no
// business of the network's); HOST:PORT as given, so 0.0.0.0:PORT opens it
// to every interface on purpose.
func metricsAddr(v string) string {
	if !strings.Contains(v, ":") {
		return net.JoinHostPort("127.0.0.1", v)
	}
	return v
}

func promRegister(comm string, rank, nranks int) *promComm {
	p := &promComm{comm: comm, rank: rank, nranks: nranks, ops: map[string]*promOp{}}
	promState.mu.Lock()
	promState.comms[p] = true
	promState.mu.Unlock()
	return p
}

// promUnregister drops a destroyed communicator's counters.
func promUnregister(p *promComm) {
	promState.mu.Lock()
	delete(promState.comms, p)
	promState.mu.Unlock()
}

// count adds a batch of records to the counters.
func (p *promComm) count(batch []metricRec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		name := "Recv"
		switch {
		case r.p2p && r.send:
			name = "Send"
		case !r.p2p && int(r.coll) < len(inspectorColl) && inspectorColl[r.coll] != "":
			name = inspectorColl[r.coll]
		}
		o := p.ops[name]
		if o == nil {
			o = &promOp{}
			p.ops[name] = o
		}
		o.calls++
		o.bytes += uint64(r.bytes)
		o.seconds += float64(r.took) / 1e9
		if r.err != nil {
			o.errors++
		}
	}
}

// serveMetrics answers the endpoint with net/http: GET (or HEAD) /metrics
// or / gives the counters, other paths 404 and other methods 405. Bounded in
// time, so a slow or silent client holds a connection for 5 s at most;
// temporary accept errors (a flood past the fd limit) back off in net/http.
func serveMetrics(ln net.Listener) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path != "/metrics" && r.URL.Path != "/" {
			http.Error(w, "the counters are at /metrics", http.StatusNotFound)
			return
		}
		body := prometheusText()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodGet {
			io.WriteString(w, body)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10,
		ErrorLog: log.New(io.Discard, "", 0)}
	srv.Serve(ln)
}

// prometheusText is the counters in Prometheus' text exposition format.
func prometheusText() string {
	promState.mu.Lock()
	comms := make([]*promComm, 0, len(promState.comms))
	for p := range promState.comms {
		comms = append(comms, p)
	}
	promState.mu.Unlock()
	sort.Slice(comms, func(i, j int) bool {
		if comms[i].comm != comms[j].comm {
			return comms[i].comm < comms[j].comm
		}
		return comms[i].rank < comms[j].rank
	})
	type row struct {
		labels string
		o      promOp
	}
	var rows []row
	var drops []string
	for _, p := range comms {
		base := fmt.Sprintf(`comm="%s",rank="%d",nranks="%d"`, p.comm, p.rank, p.nranks)
		p.mu.Lock()
		ops := make([]string, 0, len(p.ops))
		for op := range p.ops {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			rows = append(rows, row{base + `,op="` + op + `"`, *p.ops[op]})
		}
		p.mu.Unlock()
		drops = append(drops, fmt.Sprintf("gocl_metrics_dropped_total{%s} %d\n", base, p.dropped.Load()))
	}
	var b strings.Builder
	metric := func(name, help string, v func(o *promOp) string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		for i := range rows {
			fmt.Fprintf(&b, "%s{%s} %s\n", name, rows[i].labels, v(&rows[i].o))
		}
	}
	metric("gocl_calls_total", "Completed calls (collectives, sends, receives) per communicator and op.",
		func(o *promOp) string { return strconv.FormatUint(o.calls, 10) })
	metric("gocl_bytes_total", "Bytes of the completed calls (the larger of send and receive buffer, as nccl-tests' size).",
		func(o *promOp) string { return strconv.FormatUint(o.bytes, 10) })
	metric("gocl_seconds_total", "Seconds spent in the completed calls.",
		func(o *promOp) string { return strconv.FormatFloat(o.seconds, 'g', -1, 64) })
	metric("gocl_errors_total", "Calls that failed.",
		func(o *promOp) string { return strconv.FormatUint(o.errors, 10) })
	b.WriteString("# HELP gocl_metrics_dropped_total Records the metrics buffer turned away (not in the other counters).\n# TYPE gocl_metrics_dropped_total counter\n")
	for _, d := range drops {
		b.WriteString(d)
	}
	return b.String()
}
