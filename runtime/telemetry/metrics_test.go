package telemetry

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/telemetry/telemetrytest"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// metricLine is what a test reads back of a metrics line.
type metricLine struct {
	Coll    map[string]any `json:"coll_perf"`
	Dropped *uint64        `json:"gocl_metrics_dropped"`
}

// A full buffer drops (and the file says how many) rather than block; a
// panic in the writer loses its batch, not the process; a nil recorder (the
// setting off) is a no-op.
func TestMetricsDropsAndPanics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.jsonl")
	m := &Metrics{buf: make([]record, 0, 2), spare: make([]record, 0, 2), file: path, rank: 3, nranks: 4, transports: make([]string, 4),
		stop: make(chan struct{}), done: make(chan struct{}),
		head: []byte(`{"header":{"id":"x","rank":3,"n_ranks":4,"nnodes":1},"metadata":{"dump_timestamp_us":`), tail: []byte(`},`)}
	for coll := range m.busFactorColl {
		m.busFactorColl[coll] = wire.Coll(coll).Desc().BusFactor(4)
	}
	h := wire.Header{Coll: wire.AllReduce, Seq: 7, Count: 2, Dtype: uint8(abi.Float64)}
	for range 5 {
		m.Coll(&h, m.busFactorChoice(), 16, time.Now().Add(-time.Millisecond), nil)
	}
	m.P2P(&h, true, 5, 16, time.Now(), errors.New(`bad "quote"`)) // dropped too: no range check needed
	m.flush()
	m.Coll(&h, m.busFactorChoice(), 16, time.Now(), errors.New("boom\n"))
	formatHook = func(*record) { panic("test") }
	m.flush() // lost, recovered
	formatHook = nil
	m.Coll(&h, m.busFactorChoice(), 16, time.Now(), errors.New(`bad "quote"`))
	m.flush()
	m.finish()
	lines := telemetrytest.ReadLines[metricLine](t, path)
	if len(lines) != 4 || lines[2].Dropped == nil || *lines[2].Dropped != 4 {
		t.Fatalf("want 2 records, a drop line of 4, then 1 record; got %+v", lines)
	}
	c := lines[0].Coll
	if c["coll"] != "AllReduce" || c["coll_sn"] != 7.0 || c["coll_dtype"] != "float64" ||
		math.Abs(c["coll_busbw_gbs"].(float64)-1.5*c["coll_algobw_gbs"].(float64)) > 1e-5 { // 2(n-1)/n at 4 ranks
		t.Errorf("first line %v", c)
	}
	if lines[3].Coll["coll_error"] != `bad "quote"` || m.lost != 1 {
		t.Errorf("last line %v, lost %d", lines[3].Coll, m.lost)
	}
	var off *Metrics // metrics off: every method is a no-op
	off.Coll(&h, tune.Choice{}, 16, time.Now(), nil)
	off.P2P(&h, true, 1, 16, time.Now(), nil)
	off.Close()
}

// busFactorChoice is any choice, for records made by hand.
func (m *Metrics) busFactorChoice() (ch tune.Choice) { return }

// GOCL_METRICS_PORT serves every recorder's counters in Prometheus' text
// format (the communicator feeds its recorder: runtime/comm's TestMetricsFile).
func TestMetricsPrometheus(t *testing.T) {
	promState.once = sync.Once{}
	configtest.Setenv(t, "GOCL_METRICS_PORT", "127.0.0.1:0", "GOCL_METRICS_FILE", "")
	t.Cleanup(func() {
		promState.mu.Lock()
		promState.ln.Close()
		promState.once, promState.on = sync.Once{}, false
		promState.mu.Unlock()
	})
	var ms []*Metrics
	for r := range 2 {
		m := NewMetrics(Identity{Comm: "abc", Rank: r, NRanks: 2, NNodes: 1}, func() []string { return []string{"inproc", "inproc"} })
		if m == nil || !promState.on {
			t.Fatal("endpoint off")
		}
		defer m.Close()
		ms = append(ms, m)
	}
	h := wire.Header{Coll: wire.AllReduce, Count: 256, Dtype: uint8(abi.Float32)}
	for range 5 {
		for _, m := range ms {
			m.Coll(&h, tune.Choice{}, 1024, time.Now(), nil)
		}
	}
	url := "http://" + promState.ln.Addr().String() + "/metrics"
	want := `gocl_calls_total{comm="abc",rank="1",nranks="2",op="AllReduce"} `
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(body)
		if strings.Contains(text, want) {
			var calls, bytes int
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, want) {
					fmt.Sscan(strings.TrimPrefix(line, want), &calls)
				}
				if p := strings.Replace(want, "calls", "bytes", 1); strings.HasPrefix(line, p) {
					fmt.Sscan(strings.TrimPrefix(line, p), &bytes)
				}
			}
			if calls != 5 || bytes != 5*1024 || !strings.Contains(text, "# TYPE gocl_seconds_total counter") ||
				!strings.Contains(text, "gocl_metrics_dropped_total{") {
				t.Errorf("calls %d bytes %d:\n%s", calls, bytes, text)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A bare GOCL_METRICS_PORT serves on loopback only: the endpoint answers on
// 127.0.0.1 and refuses on the host's other addresses. HOST:PORT binds as
// given (0.0.0.0:PORT opens it on purpose).
func TestMetricsBarePortIsLoopbackOnly(t *testing.T) {
	for v, want := range map[string]string{"9400": "127.0.0.1:9400", "0.0.0.0:9400": "0.0.0.0:9400", "10.1.2.3:9400": "10.1.2.3:9400"} {
		if got := metricsAddr(v); got != want {
			t.Errorf("GOCL_METRICS_PORT=%s listens on %s, want %s", v, got, want)
		}
	}
	var outside net.IP // a non-loopback address of this host
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && ifc.Flags&net.FlagUp != 0 {
				outside = n.IP
			}
		}
	}
	if outside == nil {
		t.Skip("this host has no non-loopback IPv4 address to try")
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	promState.once = sync.Once{}
	configtest.Setenv(t, "GOCL_METRICS_PORT", fmt.Sprint(port))
	t.Cleanup(func() {
		promState.mu.Lock()
		if promState.ln != nil {
			promState.ln.Close()
		}
		promState.once, promState.on = sync.Once{}, false
		promState.mu.Unlock()
	})
	if !startMetricsEndpoint() {
		t.Fatalf("GOCL_METRICS_PORT=%d: endpoint off", port)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatalf("the endpoint does not answer on loopback: %v", err)
	}
	resp.Body.Close()
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(outside.String(), fmt.Sprint(port)), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("GOCL_METRICS_PORT=%d answers on %s, not only on loopback", port, outside)
	}
}

// The endpoint answers GET and HEAD of /metrics (and /), 404 elsewhere, 405
// to other methods, and lets go of a client that sends nothing.
func TestMetricsEndpointAnswers(t *testing.T) {
	promState.once = sync.Once{}
	configtest.Setenv(t, "GOCL_METRICS_PORT", "127.0.0.1:0")
	t.Cleanup(func() {
		promState.mu.Lock()
		promState.ln.Close()
		promState.once, promState.on = sync.Once{}, false
		promState.mu.Unlock()
	})
	if !startMetricsEndpoint() {
		t.Fatal("endpoint off")
	}
	base := "http://" + promState.ln.Addr().String()
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/metrics", 200, "# TYPE gocl_calls_total counter"},
		{"GET", "/", 200, "# TYPE gocl_calls_total counter"},
		{"HEAD", "/metrics", 200, ""},
		{"GET", "/other", 404, "the counters are at /metrics"},
		{"POST", "/metrics", 405, "only GET"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.body) || c.method == "HEAD" && len(body) != 0 {
			t.Errorf("%s %s: %d %q, want %d with %q", c.method, c.path, resp.StatusCode, body, c.code, c.body)
		}
		if c.code == 200 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, resp.Header.Get("Content-Type"))
		}
	}
	// A silent client is cut off (ReadHeaderTimeout), not held forever.
	conn, err := net.Dial("tcp", promState.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Errorf("a silent client was not let go: %v", err)
	}
}
