package comm

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/telemetry/telemetrytest"
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
	configtest.Setenv(t, "GOCL_METRICS_FILE", filepath.Join(dir, "m-%r.jsonl"), "GOCL_TIMEOUT", "10")
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
			if err := c.Run(nil, Op{Coll: wire.AllGather, Send: ptr(send), Recv: ptr(recv), Count: 16, Type: abi.Float32}); err != nil {
				errs[r] = err
				return
			}
			var g Group
			g.Add(c, nil, Op{Coll: wire.SendRecv, IsSend: true, Send: ptr(send), Count: 16, Type: abi.Float32, Peer: 1 - r})
			g.Add(c, nil, Op{Coll: wire.SendRecv, Recv: ptr(recv), Count: 16, Type: abi.Float32, Peer: 1 - r})
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
		lines := telemetrytest.ReadLines[metricLine](t, filepath.Join(dir, fmt.Sprintf("m-%d.jsonl", r)))
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
	configtest.Setenv(t, "GOCL_METRICS_FILE", path, "GOCL_TIMEOUT", "5")
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
	for _, l := range telemetrytest.ReadLines[metricLine](t, path) {
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

// Off by default: a communicator without GOCL_METRICS_FILE or
// GOCL_METRICS_PORT holds no recorder.
func TestMetricsOffByDefault(t *testing.T) {
	configtest.Setenv(t, "GOCL_METRICS_FILE", "")
	os.Unsetenv("GOCL_METRICS_FILE")
	plain, err := InitAll(1, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plain[0].metrics != nil {
		t.Error("metrics on without GOCL_METRICS_FILE")
	}
	plain[0].Destroy()
}
