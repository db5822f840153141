package comm

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gocl/abi"
	"gocl/runtime/transport"
	"gocl/runtime/tune"
	"gocl/runtime/version"
	"gocl/runtime/wire"
)

// The live view (gocl status, gocl top): what each communicator of this
// process is doing now. The call path pays three atomic stores per call
// (liveCall) and nothing else: no clock read. When a call started, and
// the rates of the links, come from a sampler that looks every
// sampleEvery while the status endpoint is on (statusd.go).

// liveCall is the call a communicator is in, or made last, in one word so
// that a call pays one atomic store for it: coll (4 bits), dtype (4), algo
// (4), proto (2), flags (2), peer+1 (16; 0: none or too large), bytes (32,
// saturating).
type liveCall struct{ what atomic.Uint64 }

const (
	liveP2P  = 1 << 0
	liveSend = 1 << 1
	liveMaxB = 1<<32 - 1
)

func (l *liveCall) set(coll wire.Coll, dtype abi.DataType, ch tune.Choice, flags, peer int, bytes int) {
	p := uint64(0)
	if peer >= 0 && peer < 0xffff {
		p = uint64(peer + 1)
	}
	l.what.Store(uint64(coll&0xf)<<60 | uint64(dtype&0xf)<<56 | uint64(ch.Algo&0xf)<<52 | uint64(ch.Proto&3)<<50 |
		uint64(flags&3)<<48 | p<<32 | uint64(min(bytes, liveMaxB)))
}

// CallView is a call in a status snapshot.
type CallView struct {
	Op        string  `json:"op"`  // allreduce, ..., send, recv
	Seq       uint64  `json:"seq"` // which operation of the communicator (1: its first), the same on every rank
	Dtype     string  `json:"dtype"`
	Bytes     uint64  `json:"bytes"` // 4294967295: that or more
	Algorithm string  `json:"algorithm,omitempty"`
	Protocol  string  `json:"protocol,omitempty"`
	Peer      *int    `json:"peer,omitempty"`
	Seconds   float64 `json:"seconds"` // in it so far (current), or since it ended (last), to the sampler's resolution
}

func (l *liveCall) view(seq uint64) *CallView {
	w := l.what.Load()
	if w == 0 {
		return nil
	}
	v := &CallView{Seq: seq, Bytes: w & liveMaxB, Dtype: abi.DataType(w >> 56 & 0xf).String()}
	coll, flags, peer := wire.Coll(w>>60), int(w>>48&3), int(w>>32&0xffff)-1
	switch {
	case flags&liveP2P != 0 && flags&liveSend != 0:
		v.Op = "send"
	case flags&liveP2P != 0:
		v.Op = "recv"
	default:
		v.Op = coll.String()
		ch := tune.Choice{Algo: tune.Algo(w >> 52 & 0xf), Proto: tune.Proto(w >> 50 & 3)}
		v.Algorithm, v.Protocol = ch.Algo.String(), ch.Proto.String()
	}
	if peer >= 0 {
		v.Peer = &peer
	}
	return v
}

// commID names a communicator the same on every rank (and in trace files).
func commID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// The process's communicators, for the status endpoint.
var registry struct {
	mu      sync.Mutex
	comms   map[*Comm]*sampled
	ratesAt time.Time // the links' last sample
}

// sampled is what the sampler saw of a communicator.
type sampled struct {
	edges     uint64    // c.prog.edges at the last change
	changed   time.Time // when it changed: the call's start (odd) or end (even)
	links     []linkRate
	lastError string
}

// linkRate is a link's byte counters at two samples about a second apart.
type linkRate struct {
	at          [2]time.Time
	sent, recvd [2]uint64
}

func register(c *Comm) {
	registry.mu.Lock()
	if registry.comms == nil {
		registry.comms = map[*Comm]*sampled{}
	}
	registry.comms[c] = &sampled{edges: c.prog.edges.Load(), changed: time.Now(), links: make([]linkRate, c.nranks)}
	registry.mu.Unlock()
	startStatus()
}

func unregister(c *Comm) {
	registry.mu.Lock()
	delete(registry.comms, c)
	registry.mu.Unlock()
}

// sampleEvery is the sampler's period: the resolution of "in this call for".
const sampleEvery = 100 * time.Millisecond

// sample notes, for every communicator, whether its call changed since the
// last look, and every link's counters once a second: the walk over the
// links (N per communicator, N² for N in-process ranks) runs at one tick in
// ten, not at every tick.
func sample(now time.Time) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	rates := now.Sub(registry.ratesAt) >= time.Second-sampleEvery/2
	if rates {
		registry.ratesAt = now
	}
	for c, s := range registry.comms {
		if e := c.prog.edges.Load(); e != s.edges {
			s.edges, s.changed = e, now
		}
		if !rates {
			continue
		}
		for p, l := range c.linksNow() {
			cl, ok := l.(transport.Counted)
			if !ok {
				continue
			}
			r := &s.links[p]
			sent, recvd := transport.Totals(cl.Stats())
			r.at[0], r.sent[0], r.recvd[0] = r.at[1], r.sent[1], r.recvd[1]
			r.at[1], r.sent[1], r.recvd[1] = now, sent, recvd
		}
	}
}

// CommView is one communicator in a status snapshot.
type CommView struct {
	ID        string     `json:"id"`
	Rank      int        `json:"rank"`
	Size      int        `json:"size"`
	Node      int        `json:"node"`
	Nodes     int        `json:"nodes"`
	Host      string     `json:"host"` // host name
	Addr      string     `json:"addr"` // the address its peers reach it at (GOCL_SOCKET_IFNAME's)
	Pid       int        `json:"pid"`
	Calls     uint64     `json:"calls"`
	InCall    bool       `json:"in_call"`
	Current   *CallView  `json:"current,omitempty"`
	Last      *CallView  `json:"last,omitempty"`
	Waiting   *WaitView  `json:"waiting,omitempty"`    // the longest wait of its links now
	Links     []LinkView `json:"links"`                // every link, or above statusAllLinks ranks the busy ones
	IdleLinks int        `json:"idle_links,omitempty"` // links left out of Links: no bytes in the last second, nobody waiting
	// Peers it has no link to yet (GOCL_RUNTIME_CONNECT: connected on first use).
	Unconnected int     `json:"unconnected_links,omitempty"`
	SendBps     float64 `json:"send_Bps"` // all links, over the last second
	RecvBps     float64 `json:"recv_Bps"`
	Error       string  `json:"error,omitempty"`
	Timeout     float64 `json:"timeout_s"`
	Reachable   *bool   `json:"reachable,omitempty"` // filled by rank 0 for the ranks it asked
}

// WaitView is a wait on a peer.
type WaitView struct {
	Peer    int     `json:"peer"`
	For     string  `json:"for"` // recv: the peer's data; send: room the peer has not freed
	Seconds float64 `json:"seconds"`
}

// LinkView is one link in a status snapshot.
type LinkView struct {
	Peer      int       `json:"peer"`
	Transport string    `json:"transport"`
	Sent      uint64    `json:"sent"`
	Received  uint64    `json:"received"`
	SendBps   float64   `json:"send_Bps"`
	RecvBps   float64   `json:"recv_Bps"`
	Waiting   *WaitView `json:"waiting,omitempty"`
}

// ProcessView is a status snapshot of this process.
type ProcessView struct {
	Pid     int        `json:"pid"`
	Host    string     `json:"host"`
	Version string     `json:"version"`
	Time    float64    `json:"time"` // unix seconds
	Comms   []CommView `json:"comms"`
}

var hostName = func() string { h, _ := os.Hostname(); return h }()

// snapshot describes every communicator of this process (only those with
// id, when id is not empty).
func snapshot(id string) ProcessView {
	now := time.Now()
	pv := ProcessView{Pid: os.Getpid(), Host: hostName, Version: version.String, Time: float64(now.UnixNano()) / 1e9}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for c, s := range registry.comms {
		if id != "" && commID(c.key) != id {
			continue
		}
		pv.Comms = append(pv.Comms, c.view(s, now))
	}
	return pv
}

// statusAllLinks is the most ranks whose views list every link. A larger
// communicator's view lists the links that moved bytes in the last second
// or are waited on and counts the rest, so a view grows with the links in
// use (a ring's 2), not with N, and rank 0's gather of every rank's view
// with N, not N².
const statusAllLinks = 64

// view is c's part of a snapshot; s is what the sampler saw of it.
func (c *Comm) view(s *sampled, now time.Time) CommView {
	edges := c.prog.edges.Load()
	v := CommView{ID: commID(c.key), Rank: c.rank, Size: c.nranks, Node: c.node, Nodes: c.nnodes, Host: hostName,
		Addr: hostOf(c.peers[c.rank].Addr),
		Pid:  os.Getpid(), Calls: (edges + 1) / 2, InCall: edges%2 == 1, Timeout: c.timeout.Seconds(), Links: []LinkView{}}
	since := 0.0
	if edges == s.edges {
		since = now.Sub(s.changed).Seconds()
	}
	if call := c.live.view((edges + 1) / 2); call != nil {
		call.Seconds = since
		if v.InCall {
			v.Current = call
		} else {
			v.Last = call
		}
	}
	if err := c.AsyncError(); err != nil {
		v.Error = err.Error()
	}
	for p, l := range c.linksNow() {
		if l == nil {
			if p != c.rank {
				v.Unconnected++
			}
			continue
		}
		lv := LinkView{Peer: p, Transport: l.Name()}
		if cl, ok := l.(transport.Counted); ok {
			st := cl.Stats()
			lv.Sent, lv.Received = transport.Totals(st)
			if r := s.links[p]; !r.at[0].IsZero() {
				dt := r.at[1].Sub(r.at[0]).Seconds()
				lv.SendBps, lv.RecvBps = float64(r.sent[1]-r.sent[0])/dt, float64(r.recvd[1]-r.recvd[0])/dt
			}
			if k, at, ok := transport.Longest(st); ok {
				lv.Waiting = &WaitView{Peer: p, For: k.String(), Seconds: now.Sub(at).Seconds()}
				if v.Waiting == nil || lv.Waiting.Seconds > v.Waiting.Seconds {
					v.Waiting = lv.Waiting
				}
			}
		}
		v.SendBps += lv.SendBps
		v.RecvBps += lv.RecvBps
		if c.nranks > statusAllLinks && lv.SendBps == 0 && lv.RecvBps == 0 && lv.Waiting == nil {
			v.IdleLinks++
			continue
		}
		v.Links = append(v.Links, lv)
	}
	return v
}
