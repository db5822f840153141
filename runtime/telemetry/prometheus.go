package telemetry

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
)

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
func (p *promComm) count(batch []record) {
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
