package comm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/kernels"
	"gocl/runtime/tune"
	"gocl/runtime/wire"
)

// metricLine is what a test reads back of a metrics line.
type metricLine struct {
	Header struct {
		ID     string `json:"id"`
		Rank   int    `json:"rank"`
		NRanks int    `json:"n_ranks"`
		NNodes int    `json:"nnodes"`
	} `json:"header"`
	Metadata struct {
		Version  string `json:"inspector_output_format_version"`
		Dump     int64  `json:"dump_timestamp_us"`
		Hostname string `json:"hostname"`
		Pid      int    `json:"pid"`
	} `json:"metadata"`
	Coll    map[string]any `json:"coll_perf"`
	P2P     map[string]any `json:"p2p_perf"`
	Dropped *uint64        `json:"gocl_metrics_dropped"`
}

// With GOCL_METRICS_FILE set every completed collective and send/receive
// is a line in the Inspector's fields, written by destroy at the latest.
func TestMetricsFile(t *testing.T) {
	dir := t.TempDir()
	setEnv(t, "GOCL_METRICS_FILE", filepath.Join(dir, "m-%r.jsonl"), "GOCL_TIMEOUT", "10")
	comms, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if comms[0].metrics == nil {
		t.Fatal("GOCL_METRICS_FILE set, metrics off")
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if err := allReduce(c, 256); err != nil {
					errs[r] = err
					return
				}
			}
			send, recv := make([]byte, 64), make([]byte, 256)
			if err := c.Run(nil, Op{Coll: wire.AllGather, Send: ptr(send), Recv: ptr(recv), Count: 16, Type: kernels.Float32}); err != nil {
				errs[r] = err
				return
			}
			var g Group
			g.Add(c, nil, Op{Coll: wire.SendRecv, IsSend: true, Send: ptr(send), Count: 16, Type: kernels.Float32, Peer: 1 - r})
			g.Add(c, nil, Op{Coll: wire.SendRecv, Recv: ptr(recv), Count: 16, Type: kernels.Float32, Peer: 1 - r})
			errs[r] = g.Run()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, c := range comms {
		c.Destroy()
	}
	var ids []string
	for r := range comms {
		lines := readJSONLines[metricLine](t, filepath.Join(dir, fmt.Sprintf("m-%d.jsonl", r)))
		var ar, ag, sends, recvs int
		for _, l := range lines {
			if l.Header.Rank != r || l.Header.NRanks != 2 || l.Header.NNodes != 1 || l.Metadata.Version != "v4.0" ||
				l.Metadata.Pid != os.Getpid() || l.Metadata.Dump == 0 {
				t.Errorf("rank %d: header/metadata %+v", r, l)
			}
			ids = append(ids, l.Header.ID)
			if l.Dropped != nil {
				t.Errorf("rank %d: drops reported: %d", r, *l.Dropped)
			}
			if c := l.Coll; c != nil {
				us, alg, bus := c["coll_exec_time_us"].(float64), c["coll_algobw_gbs"].(float64), c["coll_busbw_gbs"].(float64)
				bytes := c["coll_msg_size_bytes"].(float64)
				if us <= 0 || math.Abs(alg-bytes/us/1e3) > 1e-3*alg+1e-6 || c["coll_timing_source"] != "collective_cpu" ||
					c["coll_algo"] == "" || c["coll_proto"] == "" || c["coll_error"] != nil {
					t.Errorf("rank %d: %v", r, c)
				}
				start := int64(c["coll_start_us"].(float64))
				if d := time.Since(time.UnixMicro(start)); d < 0 || d > time.Minute {
					t.Errorf("rank %d: start %d is %v ago", r, start, d)
				}
				switch c["coll"] {
				case "AllReduce":
					if c["coll_count"] == 256.0 {
						ar++
						if bytes != 1024 || c["coll_dtype"] != "float32" || math.Abs(bus-alg) > 1e-6 { // 2(n-1)/n = 1
							t.Errorf("rank %d: allreduce %v", r, c)
						}
					}
				case "AllGather":
					if c["coll_count"] == 16.0 {
						ag++
						if bytes != 128 || math.Abs(bus-alg/2) > 1e-6 { // (n-1)/n
							t.Errorf("rank %d: allgather %v", r, c)
						}
					}
				}
			}
			if p := l.P2P; p != nil {
				if p["p2p_peer"] != float64(1-r) || p["p2p_msg_size_bytes"] != 64.0 || p["p2p_count"] != 16.0 ||
					p["p2p_busbw_gbs"] != p["p2p_algobw_gbs"] || p["p2p_transport"] != "inproc" {
					t.Errorf("rank %d: %v", r, p)
				}
				switch p["p2p"] {
				case "Send":
					sends++
				case "Recv":
					recvs++
				}
			}
		}
		if ar != 3 || ag != 1 || sends != 1 || recvs != 1 {
			t.Errorf("rank %d: %d allreduce, %d allgather, %d send, %d recv lines; want 3, 1, 1, 1 (%d lines)", r, ar, ag, sends, recvs, len(lines))
		}
	}
	for _, id := range ids {
		if id != ids[0] || len(id) != 12 {
			t.Fatalf("communicator ids differ or malformed: %v", ids)
		}
	}
}

// A call that fails is a line with its error; abort flushes.
func TestMetricsFailedCall(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.jsonl") // both ranks in one file
	setEnv(t, "GOCL_METRICS_FILE", path, "GOCL_TIMEOUT", "5")
	comms, err := InitAll(2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allReduce(c, 100+i) // counts differ: both fail
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Abort()
	}
	failed := map[int]bool{}
	for _, l := range readJSONLines[metricLine](t, path) {
		if l.Coll != nil && l.Coll["coll_error"] != nil {
			failed[l.Header.Rank] = true
			if !strings.Contains(l.Coll["coll_error"].(string), "failed on rank") {
				t.Errorf("error %v", l.Coll["coll_error"])
			}
		}
	}
	if !failed[0] || !failed[1] {
		t.Errorf("failed calls recorded on ranks %v, want 0 and 1", failed)
	}
}

// Off by default; a full buffer drops (and the file says how many) rather
// than block; a panic in the writer loses its batch, not the process.
func TestMetricsOffDropsAndPanics(t *testing.T) {
	setEnv(t, "GOCL_METRICS_FILE", "")
	t.Setenv("GOCL_METRICS_FILE", "")
	os.Unsetenv("GOCL_METRICS_FILE")
	plain, err := InitAll(1, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plain[0].metrics != nil {
		t.Error("metrics on without GOCL_METRICS_FILE")
	}
	plain[0].Destroy()

	path := filepath.Join(t.TempDir(), "m.jsonl")
	m := &metricsRecorder{buf: make([]metricRec, 0, 2), spare: make([]metricRec, 0, 2), file: path, rank: 3, nranks: 4, transports: make([]string, 4),
		stop: make(chan struct{}), done: make(chan struct{}),
		head: []byte(`{"header":{"id":"x","rank":3,"n_ranks":4,"nnodes":1},"metadata":{"dump_timestamp_us":`), tail: []byte(`},`)}
	for coll := range m.busFactorColl {
		m.busFactorColl[coll] = wire.Coll(coll).Desc().BusFactor(4)
	}
	h := wire.Header{Coll: wire.AllReduce, Seq: 7, Count: 2, Dtype: uint8(kernels.Float64)}
	for range 5 {
		m.coll(&h, m.busFactorChoice(), 16, time.Now().Add(-time.Millisecond), nil)
	}
	m.p2p(&h, true, 5, 16, time.Now(), errors.New(`bad "quote"`)) // dropped too: no range check needed
	m.flush()
	m.coll(&h, m.busFactorChoice(), 16, time.Now(), errors.New("boom\n"))
	metricsFormatHook = func(*metricRec) { panic("test") }
	m.flush() // lost, recovered
	metricsFormatHook = nil
	m.coll(&h, m.busFactorChoice(), 16, time.Now(), errors.New(`bad "quote"`))
	m.flush()
	m.finish()
	lines := readJSONLines[metricLine](t, path)
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
	var off *metricsRecorder
	off.close()
}

// busFactorChoice is any choice, for records made by hand.
func (m *metricsRecorder) busFactorChoice() (ch tune.Choice) { return }

// GOCL_METRICS_PORT serves the counters in Prometheus' text format.
func TestMetricsPrometheus(t *testing.T) {
	promState.once = sync.Once{}
	setEnv(t, "GOCL_METRICS_PORT", "127.0.0.1:0", "GOCL_METRICS_FILE", "")
	t.Cleanup(func() {
		promState.mu.Lock()
		promState.ln.Close()
		promState.once, promState.on = sync.Once{}, false
		promState.mu.Unlock()
	})
	comms := localComms(t, 2)
	if !promState.on || comms[0].metrics == nil {
		t.Fatal("endpoint off")
	}
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				allReduce(c, 256)
			}
		}()
	}
	wg.Wait()
	url := "http://" + promState.ln.Addr().String() + "/metrics"
	id := commID(comms[0].key)
	want := fmt.Sprintf(`gocl_calls_total{comm="%s",rank="1",nranks="2",op="AllReduce"} `, id)
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
			if calls < 5 || bytes < 5*1024 || !strings.Contains(text, "# TYPE gocl_seconds_total counter") ||
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
	setEnv(t, "GOCL_METRICS_PORT", fmt.Sprint(port))
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
	setEnv(t, "GOCL_METRICS_PORT", "127.0.0.1:0")
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
