package comm

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/telemetry"
)

// What the status endpoint (runtime/telemetry's ListenStatus, GOCL_STATUS)
// answers: the process's communicators' views. A process that is rank 0 of a
// communicator gathers its other ranks' views over their bootstrap
// listeners (keyed by the communicator's secret), so one question on rank
// 0's host reaches every rank of a job on any host; a rank that does not
// answer within statusAskWait is reported so (stopped, hung or gone).

const askStatus = "status"

// statusAskWait bounds rank 0's question to each of its ranks.
const statusAskWait = time.Second

type statusRequest struct {
	ID    string `json:"id,omitempty"`    // one communicator (empty: every one of the process)
	Peers bool   `json:"peers,omitempty"` // where this process is rank 0: every rank's view too
}

// StatusReply answers a status request.
type StatusReply struct {
	Process ProcessView           `json:"process"`
	Ranks   map[string][]CommView `json:"ranks,omitempty"` // communicator id -> each rank's view, from its rank 0
}

var endpoint struct {
	once     sync.Once
	sampling bool // under registry.mu
}

// startStatus starts the endpoint once per process (on its first
// communicator) and the sampler whenever it is not running.
func startStatus() {
	endpoint.once.Do(func() {
		mode := strings.TrimSpace(config.String("STATUS"))
		if mode == "0" || strings.EqualFold(mode, "off") {
			return
		}
		if err := telemetry.ListenStatus(mode, serveStatus); err != nil {
			debuglog.Warnf(debuglog.Init, -1, "status endpoint off: %v (GOCL_STATUS=0 silences this)", err)
		}
	})
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if !endpoint.sampling && len(registry.comms) > 0 {
		endpoint.sampling = true
		go sampler()
	}
}

// sampler runs while the process has communicators.
func sampler() {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for now := range t.C {
		sample(now)
		registry.mu.Lock()
		if len(registry.comms) == 0 {
			endpoint.sampling = false
			registry.mu.Unlock()
			return
		}
		registry.mu.Unlock()
	}
}

// serveStatus answers a client of the endpoint.
func serveStatus(req bootstrap.Request) any {
	var r statusRequest
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &r); err != nil {
			return map[string]string{"error": "malformed status request: " + err.Error()}
		}
	}
	if req.Kind != askStatus {
		return map[string]string{"error": fmt.Sprintf("unknown request %q (a gocl of another version?)", req.Kind)}
	}
	reply := StatusReply{Process: snapshot(r.ID)}
	if !r.Peers {
		return reply
	}
	registry.mu.Lock()
	var roots []*Comm
	for c := range registry.comms {
		if c.rank == 0 && c.nranks > 1 && (r.ID == "" || commID(c.key) == r.ID) {
			roots = append(roots, c)
		}
	}
	registry.mu.Unlock()
	reply.Ranks = map[string][]CommView{}
	for _, c := range roots {
		reply.Ranks[commID(c.key)] = c.gather()
	}
	return reply
}

// statusAsks bounds the ranks gather asks at once (the connections and
// goroutines it holds, whatever N); ranks that do not answer cost
// statusAskWait per statusAsks of them.
const statusAsks = 256

// gather asks every rank of c for its view, statusAsks at a time; rank 0's
// is its own.
func (c *Comm) gather() []CommView {
	out := make([]CommView, c.nranks)
	var wg sync.WaitGroup
	slots := make(chan struct{}, statusAsks)
	for p := range c.nranks {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() { recover() }()
			if p == c.rank {
				out[p] = c.ownView()
				return
			}
			var v CommView
			err := bootstrap.Ask(c.peers[p].Addr, c.secret, time.Now().Add(statusAskWait), bootstrap.NewRequest(askStatus, nil), &v)
			if err != nil || v.ID == "" {
				why := "no answer within 1 s: its process is stopped, hung or gone"
				if err != nil && !bootstrap.IsTimeout(err) {
					why = fmt.Sprintf("no answer: %v", err)
				}
				no := false
				v = CommView{ID: commID(c.key), Rank: p, Size: c.nranks, Pid: c.peers[p].Pid,
					Host: strings.SplitN(c.peers[p].Host, "/", 2)[0], Addr: hostOf(c.peers[p].Addr), Nodes: c.nnodes,
					Links: []LinkView{}, Error: why, Reachable: &no}
			}
			out[p] = v
		}()
	}
	wg.Wait()
	return out
}

// ownView is c's view, for a peer's rank 0 (askStatus on the bootstrap listener).
func (c *Comm) ownView() CommView {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if s := registry.comms[c]; s != nil {
		return c.view(s, time.Now())
	}
	return CommView{ID: commID(c.key), Rank: c.rank, Size: c.nranks, Pid: os.Getpid(), Host: hostName,
		Links: []LinkView{}, Error: "the communicator was destroyed"}
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
