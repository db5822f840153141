package comm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/transport/inproc"
	"gocl/runtime/transport/shm"
	"gocl/runtime/transport/socket"
)

// A connector is one transport's part in link set-up. Transports are tried
// in order (inproc, shm, socket); the first whose can holds for a pair
// connects it. can sees only what both ranks published in the bootstrap,
// never this rank's own environment, so both ends of a pair choose alike.
type connector struct {
	name string
	can  func(a, b *bootstrap.PeerInfo) bool
	// tcp: the transport needs the pair's TCP connections from the mesh.
	tcp bool
	// fallible: connect may return errFallback, so the pair may need the
	// next candidate's connections too.
	fallible bool
	// connect makes this rank's end. An error wrapping errFallback (both
	// ends get it) passes the pair to the next transport that can take it.
	connect func(c *Comm, peer int, conns []net.Conn, deadline time.Time) (transport.Link, error)
}

var errFallback = shm.ErrUnavailable

// populateMaxLocal is the most ranks on a host whose shared-memory pairs
// map their slots in at connect; above it, a pair's slots fault in as it
// is used (a ring uses 2 of a rank's N-1 pairs; populating all of them
// held 0.5 MiB per pair: 1 GiB at 64 ranks, 17 GiB at 256).
const populateMaxLocal = 16

// cmaMode is GOCL_SHM_CMA as shm's mode: auto moves data by single copy
// only where the kernel allows it without logging a refusal.
func cmaMode() shm.CMAMode {
	switch config.SHMCMA() {
	case "all":
		return shm.CMAAll
	case "off":
		return shm.CMAOff
	}
	if shm.PtraceOpen() {
		return shm.CMAMove
	}
	return shm.CMAOff
}

var connectors = []connector{
	{name: "inproc", can: func(a, b *bootstrap.PeerInfo) bool { return a.Proc == b.Proc && !a.NoP2P && !b.NoP2P },
		connect: func(c *Comm, p int, _ []net.Conn, _ time.Time) (transport.Link, error) {
			return inproc.Connect(c.key, c.rank, p), nil
		}},
	{name: "shm", tcp: true, fallible: true, can: func(a, b *bootstrap.PeerInfo) bool { return a.Shm != "" && a.Shm == b.Shm },
		connect: func(c *Comm, p int, conns []net.Conn, deadline time.Time) (transport.Link, error) {
			l, err := shm.Connect(conns[0], c.rank, p, c.peers[p].Pid,
				shm.Options{Channels: c.maxChannels(), CMA: cmaMode(), Populate: c.localRanks <= populateMaxLocal,
					Budget: int64(config.IntOr("SHM_BUDGET", 0)) << 20}, deadline)
			if err == nil {
				for _, x := range conns[1:] { // the first one stays, as the link's control channel
					x.Close()
				}
			}
			return l, err
		}},
	{name: "socket", tcp: true, can: func(a, b *bootstrap.PeerInfo) bool { return true },
		connect: func(c *Comm, p int, conns []net.Conn, deadline time.Time) (transport.Link, error) {
			return socket.Connect(conns, c.rank, p, socket.Options{Encrypt: config.Bool("SOCKET_ENCRYPT"), Secret: c.secret}, deadline)
		}},
}

// candidates are the connectors that can join self and peer, in order.
func candidates(a, b *bootstrap.PeerInfo) []*connector {
	var out []*connector
	for i := range connectors {
		if connectors[i].can(a, b) {
			out = append(out, &connectors[i])
		}
	}
	return out
}

// firstConnector is candidates(a, b)[0] without building the list: what a
// pair not yet connected will use (walked over every peer at init).
func firstConnector(a, b *bootstrap.PeerInfo) *connector {
	for i := range connectors {
		if connectors[i].can(a, b) {
			return &connectors[i]
		}
	}
	return nil // socket's can is always true
}

// offer fills in what this rank publishes for connection choices.
func offer(me *bootstrap.PeerInfo) {
	me.NoP2P = config.Bool("P2P_DISABLE")
	me.Lazy = config.Bool("RUNTIME_CONNECT")
	if !config.Bool("SHM_DISABLE") {
		me.Shm = shmDomain()
	}
	if testShmDomain != nil {
		me.Shm = testShmDomain(me.Rank, me.Shm)
	}
	if testOffer != nil {
		me.Lazy = testOffer(me.Rank, me.Lazy)
	}
	fakeHost(me)
}

// testShmDomain lets tests change a rank's published shm domain, to force
// some pairs of one host onto sockets.
var testShmDomain func(rank int, domain string) string

// testOffer lets tests change whether a rank connects on first use.
var testOffer func(rank int, lazy bool) bool

// hostID tells machines apart: ranks with the same hostID share a host (a
// node, for topology). The network namespace is part of it: containers or
// `ip netns` "hosts" on one kernel share the hostname and boot id, yet
// reach each other only over their own interfaces, as real hosts do.
func hostID() string {
	h, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := h + "/" + strings.TrimSpace(string(boot))
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err == nil {
		id += fmt.Sprintf("/net:%d", st.Ino)
	}
	return id
}

// shmDomain names where this process can map a peer's segment: the same
// host (boot and network namespace: ranks in other network namespaces are
// other hosts, even on this kernel), IPC and pid namespaces (the peer's segment is opened through
// /proc/PID/fd) and user. Empty when a namespace cannot be read.
func shmDomain() string {
	var ids []uint64
	for _, ns := range []string{"/proc/self/ns/ipc", "/proc/self/ns/pid"} {
		var st syscall.Stat_t
		if err := syscall.Stat(ns, &st); err != nil {
			return ""
		}
		ids = append(ids, st.Ino)
	}
	return fmt.Sprintf("%s/ipc:%d/pid:%d/uid:%d", hostID(), ids[0], ids[1], os.Getuid())
}

// connect builds every link of c: the TCP mesh for the pairs whose
// transports need it, then each pair's link, falling back along the
// candidates when a transport finds at connect time that it cannot serve.
// A communicator that connects on first use (lazy.go) builds none here.
func (c *Comm) connect(ln net.Listener, secret []byte, deadline time.Time) error {
	if _, _, err := c.channelSettings(); err != nil {
		return err
	}
	if c.lazy {
		return nil
	}
	cands := make([][]*connector, c.nranks)
	for p := range c.peers {
		if p != c.rank {
			cands[p] = c.candidatesTo(p)
		}
	}
	conns, err := bootstrap.Mesh(c.rank, c.peers, ln, secret, func(p int) int { return socks(cands[p]) }, deadline)
	if err != nil {
		return err
	}
	// Pairs connect concurrently: a handshake waits on its peer, which may
	// be busy with another pair.
	err = status.Parallel(c.nranks, func(p int) error {
		if p == c.rank {
			return nil
		}
		l, err := c.linkPair(p, cands[p], conns[p], deadline)
		c.links[p] = l
		return err
	})
	if err != nil {
		for p, l := range c.links {
			if l != nil {
				l.Close()
				c.links[p] = nil
			}
			for _, x := range conns[p] { // a pair that never got to linkPair
				if x != nil {
					x.Close()
				}
			}
		}
		return err
	}
	for p := range c.peers {
		if p != c.rank {
			debuglog.Infof(debuglog.Init, c.rank, "channel to rank %d (pid %d, %s) via %s", p, c.peers[p].Pid, c.peers[p].Addr, c.links[p].Name())
		}
	}
	return nil
}

// candidatesTo are the connectors that can join this rank and peer p.
func (c *Comm) candidatesTo(p int) []*connector {
	return candidates(&c.peers[c.rank], &c.peers[p])
}

// socks is how many TCP connections a pair with these candidates needs;
// both ends count alike, candidates being symmetric. Only a transport it
// may end up on that needs them counts (in-process pairs never fall back
// from inproc). A pair that will most likely be on shared memory needs one
// connection (its control channel), not a socket link's stripes: half the
// handshakes of a host's init. Should shm turn out unavailable, the socket
// fallback runs on that one connection.
func socks(cands []*connector) int {
	tcp := false
	for _, k := range cands {
		if k.tcp {
			tcp = true
			break
		}
		if !k.fallible {
			break
		}
	}
	switch {
	case !tcp:
		return 0
	case cands[0].name == "shm":
		return 1
	}
	n := config.IntOr("SOCKET_NTHREADS", 1) * config.IntOr("NSOCKS_PERTHREAD", 2)
	return max(1, min(n, 64))
}

// linkPair makes this rank's end of its link to p over conns (the pair's
// TCP connections, if any), trying the candidates in order. On error the
// connections are closed.
func (c *Comm) linkPair(p int, cands []*connector, conns []net.Conn, deadline time.Time) (transport.Link, error) {
	closeConns := func() {
		for _, x := range conns {
			if x != nil {
				x.Close()
			}
		}
	}
	for _, k := range cands {
		l, err := k.connect(c, p, conns, deadline)
		if err == nil {
			if !k.tcp { // connections a fallback would have used
				closeConns()
			}
			return l, nil
		}
		if !errors.Is(err, errFallback) {
			closeConns()
			return nil, status.Errorf(status.RemoteError, "rank %d: connecting to rank %d via %s failed: %v", c.rank, p, k.name, err)
		}
		debuglog.Infof(debuglog.Init, c.rank, "rank %d: %s unavailable (%v), trying the next transport", p, k.name, err)
	}
	closeConns()
	return nil, status.Errorf(status.InternalError, "rank %d: no transport can connect rank %d", c.rank, p)
}

// channelSettings reads GOCL_MIN_NCHANNELS and GOCL_MAX_NCHANNELS (NCCL_
// names as fallbacks). Unset, the most is one channel per core this host
// has for each of its ranks (at most 4): a channel is run by its own
// goroutine, which only pays where it gets a core of its own.
func (c *Comm) channelSettings() (lo, hi int, err error) {
	hi = max(1, min(runtime.NumCPU()/max(c.localRanks, 1), 4))
	if v, src := config.Source("MAX_NCHANNELS"); strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return 0, 0, status.Errorf(status.InvalidArgument, "rank %d: %s=%q: give the most channels a call may be split across, 1 or more (at most %d are used)", c.rank, src, v, shm.MaxChannels)
		}
		hi = min(n, shm.MaxChannels)
	}
	v, src := config.Source("MIN_NCHANNELS")
	lo, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil || lo < 1 {
		return 0, 0, status.Errorf(status.InvalidArgument, "rank %d: %s=%q: give the fewest channels a large call is split across, 1 or more", c.rank, src, v)
	}
	return lo, hi, nil
}

// maxChannels is the channels this rank offers each shm pair.
func (c *Comm) maxChannels() int {
	_, hi, _ := c.channelSettings() // checked at the start of connect
	return max(hi, 1)
}

// channelOffer is what this rank brings to the init exchange (tuning.go):
// the most channels all its links have (1 if any link is a single FIFO,
// inproc or socket) and GOCL_MIN_NCHANNELS.
func (c *Comm) channelOffer() (have, lo int) {
	lo, have, _ = c.channelSettings() // checked at the start of connect
	if c.lazy {                       // the links to be: shared memory offers channels, the others one
		for name := range c.facts.firstConnectors(c.rank) {
			if name != "shm" {
				have = 1
			}
		}
		return have, lo
	}
	for _, l := range c.links {
		if l == nil {
			continue
		}
		if ch, ok := l.(transport.Channeled); ok {
			have = min(have, ch.NumChannels())
		} else {
			have = 1
		}
	}
	return have, lo
}

// useChannels applies the agreed counts (the fewest any rank offered), so
// that all ranks split a call alike.
func (c *Comm) useChannels(have, lo int) {
	c.linkMu.Lock() // links made on first use take them too (adopt)
	defer c.linkMu.Unlock()
	c.chHave, c.chLo = have, lo
	for _, l := range c.links {
		if ch, ok := l.(transport.Channeled); ok {
			ch.UseChannels(lo, have)
		}
	}
	if have > 1 {
		debuglog.Infof(debuglog.Init, c.rank, "large calls split across up to %d channels (at least %d)", have, min(lo, have))
	}
}
