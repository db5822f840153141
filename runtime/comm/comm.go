// Package comm is the communicator: init (from a unique id, all-in-process,
// or by splitting), the call path from an operation to an algorithm, groups,
// and the failure rules: an error on one rank fails the communicator and
// closes its links, so every peer sees it too instead of waiting.
package comm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/agree/agreenet"
	"gocl/runtime/algo"
	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
	"gocl/runtime/heartbeat"
	"gocl/runtime/host"
	"gocl/runtime/status"
	"gocl/runtime/telemetry"
	"gocl/runtime/transport"
	"gocl/runtime/transport/inproc"
	"gocl/runtime/tune"
	"gocl/runtime/version"
)

// Version is reported by goclGetVersion (MAJOR*10000 + MINOR*100 + PATCH);
// it comes from runtime/version's VERSION file, gocl's one version source.
var Version = version.Code

// Comm is one rank's communicator.
type Comm struct {
	rank, nranks          int
	localRank, localRanks int
	node, nnodes          int
	ifc                   bootstrap.Iface // the interface this rank listens and connects on
	hosts                 [][]int         // ranks of each host (hosts.go); nil when hosts differ in size
	device                int
	peers                 []bootstrap.PeerInfo
	links                 []transport.Link // nil where not connected (yet: lazy); written under linkMu after init
	key                   string
	plan                  *tune.Plan // nil until init's exchange: every call is direct
	chunk                 int
	timeout               time.Duration      // bound on every wait for a peer; 0: none
	deadline              transport.Deadline // the running call's, shared with the links that take it
	eager                 []transport.Link   // links that are not transport.DeadlineSharers: SetDeadline at every call

	// Connect on first use (lazy.go): the calls' shapes whose peers are
	// connected, the connections higher ranks made for pairs not yet
	// connected, and the channel counts agreed at init for the links to be.
	lazy         bool
	ready        map[lazyKey]bool // the call's goroutine's alone
	lastReady    lazyKey          // the last shape found ready (zero: none; no call has Coll 0)
	in           inbox
	linkMu       sync.Mutex         // links written after init (adopt), pairs, chHave, chLo
	pairs        map[int]*pairState // by peer, when lazy: the pairs touched (pair)
	facts        *tableFacts        // derived from peers, shared with the table's other ranks here
	chHave, chLo int

	opMu    sync.Mutex  // one operation at a time; held for the whole call
	calling atomic.Bool // a thread is in a blocking call on the comm (claim)
	seq     uint64      // collective calls so far
	sendSeq []uint64    // point-to-point sends to each peer so far
	recvSeq []uint64
	anyNext int // where RecvAny starts looking (the peer after its last match)
	scratch []byte
	x       algo.Ctx // the running call's (see ctx)
	// method values made once, for x
	scratchFn func(int) []byte
	failFn    func(error)

	stateMu sync.Mutex
	cond    *sync.Cond
	broken  error // first fatal error; the comm is unusable after it
	freed   bool
	// Read without stateMu on every call (two lock pairs were a tenth of an
	// 8-byte call); written under it.
	unusable atomic.Bool  // broken != nil || freed
	inflight atomic.Int64 // operations queued on streams and not finished

	redMu   sync.Mutex
	redops  map[int32]preMulSum
	builtin [abi.NumTypes][abi.NumOps]atomic.Pointer[kernels.Reducer] // built on first use
	nextOp  int32

	flight  *telemetry.Flight  // nil unless GOCL_TRACE_BUFFER or GOCL_TRACE_FILE is set
	metrics *telemetry.Metrics // nil unless GOCL_METRICS_FILE or GOCL_METRICS_PORT is set
	live    liveCall           // the call it is in, or made last (live.go)

	// Liveness probes (culprit.go): the bootstrap listener stays open and
	// answers them until release.
	ln      net.Listener
	secret  []byte
	prog    progress
	blameMu sync.Mutex
	verdict error // the first diagnosis of a failure, kept for its echoes

	beats     *heartbeat.Watcher // nil: no heartbeat (heartbeat.go)
	agreement *agreenet.Node     // the survivors' agreement of its shrinks (shrink.go, listener.go)
	growID    *bootstrap.ID      // the id GetUniqueID made for a grow (grow.go)
}

// processID tells ranks of one process apart from ranks of other processes.
var processID = func() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

// Options are a communicator's own settings, given at init (goclConfig_t);
// what they leave unset comes from the environment.
type Options struct {
	// Timeout bounds every wait on a peer (init and operations); 0 means
	// none. Used when HasTimeout, else GOCL_TIMEOUT.
	Timeout    time.Duration
	HasTimeout bool

	iface *bootstrap.Iface // InitAll's ranks: the interface chosen once for all of them
}

func (o Options) timeout() time.Duration {
	if o.HasTimeout {
		return max(o.Timeout, 0)
	}
	return config.Timeout()
}

// NewUniqueID starts a rendezvous root in this process and returns its id.
func NewUniqueID() (bootstrap.ID, error) {
	config.Reload()
	return newUniqueID(config.Timeout())
}

// NewUniqueIDAt is NewUniqueID with the rendezvous on the interface of
// host (MASTER_ADDR) when host is an address of this machine: with a
// loopback host the job stays on loopback (ChooseIfaceFor). Unless
// GOCL_SOCKET_IFNAME names the interface.
func NewUniqueIDAt(host string) (bootstrap.ID, error) {
	config.Reload()
	if err := config.Check(); err != nil {
		return bootstrap.ID{}, status.Errorf(status.InvalidArgument, "%w", err)
	}
	if host == "" || config.String("SOCKET_IFNAME") != "" {
		return newUniqueID(config.Timeout())
	}
	ifc, ok, err := bootstrap.LocalIface(host)
	if err != nil || !ok {
		return newUniqueID(config.Timeout())
	}
	return bootstrap.StartRootOn(ifc, config.Timeout())
}

// ExchangeUniqueID runs from_env's id exchange (bootstrap/exchange.go):
// rank 0 makes the id on MASTER_ADDR's interface and serves it, the other
// ranks fetch it.
func ExchangeUniqueID(x bootstrap.Exchange) (bootstrap.ID, error) {
	if x.NRanks < 1 || x.Rank < 0 || x.Rank >= x.NRanks {
		return bootstrap.ID{}, status.Errorf(status.InvalidArgument,
			"unique id exchange: rank is %d but nRanks is %d: pass a rank in [0, nRanks)", x.Rank, x.NRanks)
	}
	if x.Port <= 0 || x.Port > 65535 || x.Host == "" {
		return bootstrap.ID{}, status.Errorf(status.InvalidArgument,
			"unique id exchange on rank %d: rank 0's address is %q port %d: set MASTER_ADDR to rank 0's host and MASTER_PORT to a port in 1..65535", x.Rank, x.Host, x.Port)
	}
	if err := bootstrap.CheckSecret(x.Secret); err != nil {
		return bootstrap.ID{}, err
	}
	if x.NRanks == 1 {
		return NewUniqueIDAt(x.Host)
	}
	if x.Rank > 0 {
		return bootstrap.FetchID(x)
	}
	ln, _, _, err := bootstrap.ListenExchange(x.Host, x.Port)
	if err != nil {
		return bootstrap.ID{}, err
	}
	id, err := NewUniqueIDAt(x.Host)
	if err != nil {
		ln.Close()
		return bootstrap.ID{}, err
	}
	if err := bootstrap.ServeID(ln, x, id); err != nil {
		bootstrap.StopRoot(id)
		return bootstrap.ID{}, err
	}
	return id, nil
}

// newUniqueID starts a rendezvous that ends after timeout: the init
// timeout of the ranks that will join it, so that a rank that never comes
// holds the others' connections no longer than they wait.
func newUniqueID(timeout time.Duration) (bootstrap.ID, error) {
	if err := config.Check(); err != nil {
		return bootstrap.ID{}, status.Errorf(status.InvalidArgument, "%w", err)
	}
	return bootstrap.StartRoot(timeout)
}

// newUniqueID is the id of a communicator made from c (a split, shrink or
// grow): its root listens where c's ranks do, so a job on loopback stays
// there.
func (c *Comm) newUniqueID(timeout time.Duration) (bootstrap.ID, error) {
	if c.ifc.IP == nil {
		return newUniqueID(timeout)
	}
	return bootstrap.StartRootOn(c.ifc, timeout)
}

// InitRank joins rank of nranks to the communicator named by id. It blocks
// until all ranks have joined and connected, or the timeout passes. A
// negative device means "the local rank". Settings are read from the
// environment now and kept for the communicator's lifetime.
func InitRank(id bootstrap.ID, nranks, rank, device int, opts Options) (*Comm, error) {
	config.Reload()
	if err := config.Check(); err != nil {
		return nil, status.Errorf(status.InvalidArgument, "%w", err)
	}
	settings, err := tune.FromConfig()
	if err != nil {
		return nil, status.Errorf(status.InvalidArgument, "%w", err)
	}
	if nranks <= 0 {
		return nil, status.Errorf(status.InvalidArgument, "nranks is %d: a communicator needs at least one rank", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, status.Errorf(status.InvalidArgument, "rank is %d but nranks is %d: pass a rank in [0, %d]", rank, nranks, nranks-1)
	}
	root, err := id.Root()
	if err != nil {
		return nil, err
	}
	timeout := opts.timeout()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	var ifc bootstrap.Iface
	if opts.iface != nil {
		ifc = *opts.iface
	} else if ifc, err = bootstrap.ChooseIfaceFor(root.IP); err != nil {
		return nil, err
	}
	ln, err := ifc.Listen()
	if err != nil {
		return nil, err
	}
	serving := false
	defer func() {
		if !serving {
			ln.Close()
		}
	}()
	me := bootstrap.PeerInfo{Rank: rank, NRanks: nranks, Addr: ln.Addr().String(), Host: hostID(),
		Proc: processID, Pid: os.Getpid(), Device: device}
	offer(&me)
	debuglog.Infof(debuglog.Init, rank, "gocl version %s, joining %d ranks at %s, using %s",
		version.String, nranks, id.String(), ifc)
	if debuglog.Enabled(debuglog.Info, debuglog.Env) {
		for _, v := range config.Table() {
			if val, src := config.Source(v.Name); src != "default" {
				debuglog.Infof(debuglog.Env, rank, "%s set by environment to %q", src, config.Shown(v.Name, val))
			}
		}
	}
	peers, err := bootstrap.Join(&id, me, deadline)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		if p.Lazy != me.Lazy {
			return nil, status.Errorf(status.InvalidUsage, "rank %d runs with GOCL_RUNTIME_CONNECT=%d and rank %d with GOCL_RUNTIME_CONNECT=%d: ranks connect on first use only when every rank sets it alike; set GOCL_RUNTIME_CONNECT the same on every rank",
				p.Rank, b2i(p.Lazy), rank, b2i(me.Lazy))
		}
	}
	c := &Comm{rank: rank, nranks: nranks, device: device, peers: peers, key: id.Key(),
		chunk: config.IntOr("BUFFSIZE", 1<<20), timeout: timeout,
		links: make([]transport.Link, nranks), sendSeq: make([]uint64, nranks), recvSeq: make([]uint64, nranks),
		redops: map[int32]preMulSum{}, nextOp: 5, ln: ln, secret: id.Secret(), lazy: me.Lazy}
	c.ifc = ifc
	c.agreement = agreenet.New((*agreeMember)(c))
	if c.lazy {
		c.pairs = map[int]*pairState{}
	}
	c.prog.waitsOn.Store(-1)
	c.cond = sync.NewCond(&c.stateMu)
	c.topology()
	// Waiters poll less when this host's ranks outnumber its cores.
	host.NoteRanks(c.localRanks)
	if device < 0 { // no device given: one per local rank, as launchers assign GPUs
		c.device = c.localRank
	}
	if err := c.connect(ln, id.Secret(), deadline); err != nil {
		inproc.Forget(c.key)
		return nil, err
	}
	for _, l := range c.links {
		if s, ok := l.(transport.DeadlineSharer); ok {
			s.ShareDeadline(&c.deadline)
		} else if l != nil {
			c.eager = append(c.eager, l)
		}
	}
	who := telemetry.Identity{Comm: commID(c.key), Rank: c.rank, NRanks: c.nranks, NNodes: c.nnodes}
	c.flight = telemetry.NewFlight(who, func() []string { return sortedKeys(c.transportsSeen()) }) // links made on first use: the transports they will have
	c.metrics = telemetry.NewMetrics(who, c.linkNames)
	serving = true // release closes it from now on
	go bootstrap.Serve(ln, rank, c.secret, c.serve)
	if err := c.setupTuner(settings); err != nil {
		c.fail(err)
		c.release()
		return nil, err
	}
	host.PlaceThread(c.localRank, c.localRanks)
	register(c)
	c.startHeartbeat()
	debuglog.Infof(debuglog.Init, rank, "init done: rank %d/%d, node %d/%d, local rank %d/%d, chunk %d B, %s, direct up to %d B, timeout %s",
		rank, nranks, c.node, c.nnodes, c.localRank, c.localRanks, c.chunk, settings, settings.DirectMax, timeoutString(timeout))
	return c, nil
}

// topology derives node and local ranks from the host identities.
func (c *Comm) topology() {
	f := factsOf(c.peers)
	c.facts = f
	c.nnodes = len(f.groups)
	c.node = int(f.nodeOf[c.rank])
	local := f.groups[c.node]
	c.localRanks = len(local)
	c.localRank, _ = slices.BinarySearch(local, c.rank)
	c.hosts = f.even()
}

func timeoutString(t time.Duration) string {
	if t <= 0 {
		return "none"
	}
	return t.String()
}

// InitAll creates ndev communicators of one clique inside this process.
func InitAll(ndev int, devices []int, opts Options) ([]*Comm, error) {
	if ndev <= 0 {
		return nil, status.Errorf(status.InvalidArgument, "ndev is %d: need at least one device", ndev)
	}
	id, err := newUniqueID(opts.timeout())
	if err != nil {
		return nil, err
	}
	root, err := id.Root()
	if err != nil {
		return nil, err
	}
	ifc, err := bootstrap.ChooseIfaceFor(root.IP)
	if err != nil {
		return nil, err
	}
	opts.iface = &ifc
	comms := make([]*Comm, ndev)
	err = status.Parallel(ndev, func(i int) (err error) {
		dev := i
		if devices != nil {
			dev = devices[i]
		}
		comms[i], err = InitRank(id, ndev, i, dev, opts)
		if err != nil {
			err = fmt.Errorf("rank %d of %d: %w", i, ndev, err)
		}
		return err
	})
	if err != nil {
		for _, c := range comms {
			if c != nil {
				c.Abort()
			}
		}
		return nil, err
	}
	return comms, nil
}

// Accessors.
func (c *Comm) Rank() int       { return c.rank }
func (c *Comm) NRanks() int     { return c.nranks }
func (c *Comm) LocalRank() int  { return c.localRank }
func (c *Comm) LocalRanks() int { return c.localRanks }
func (c *Comm) Node() int       { return c.node }
func (c *Comm) NNodes() int     { return c.nnodes }
func (c *Comm) Device() int     { return c.device }

// Timeout is the bound on every wait for a peer (0: none).
func (c *Comm) Timeout() time.Duration { return c.timeout }

// fail records the first fatal error and closes every link, which makes
// blocked calls here and on the peers return instead of waiting.
func (c *Comm) fail(err error) {
	c.stateMu.Lock()
	first := c.broken == nil
	if first {
		c.broken = err
		c.unusable.Store(true)
		debuglog.Warnf(debuglog.Init, c.rank, "communicator failed: %v", err)
	}
	reason := transport.AbortReason(c.rank, c.broken)
	c.stateMu.Unlock()
	if first {
		c.flight.Dump(err)
	}
	for _, l := range c.linkList() {
		l.Abort(reason)
	}
}

// linkList is the links this rank has, safe off the call's goroutine.
func (c *Comm) linkList() []transport.Link {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	out := make([]transport.Link, 0, len(c.links))
	for _, l := range c.links {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// linksNow is a copy of links by peer, safe off the call's goroutine.
func (c *Comm) linksNow() []transport.Link {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	return append([]transport.Link(nil), c.links...)
}

// linkNames is each peer's transport: its link's, or for a pair not
// connected yet the one it will most likely get. Safe off the call's
// goroutine.
func (c *Comm) linkNames() []string {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	out := make([]string, c.nranks)
	for p, l := range c.links {
		switch {
		case l != nil:
			out[p] = l.Name()
		case p != c.rank && c.lazy:
			out[p] = firstConnector(&c.peers[c.rank], &c.peers[p]).name
		}
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AsyncError is the error that broke the communicator, if any.
func (c *Comm) AsyncError() error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.broken
}

// usable returns an error when the communicator can no longer be used.
func (c *Comm) usable() error {
	if !c.unusable.Load() {
		return nil
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.freed {
		return status.Errorf(status.InvalidUsage, "rank %d: the communicator was destroyed", c.rank)
	}
	if c.broken != nil {
		return status.Errorf(status.CodeOf(c.broken),
			"rank %d: the communicator is unusable after an earlier error (%w); abort it and create a new one", c.rank, c.broken)
	}
	return nil
}

// begin/end count operations queued on streams, so Destroy and synchronous
// calls can wait for them.
func (c *Comm) begin() {
	c.stateMu.Lock()
	c.inflight.Add(1)
	c.stateMu.Unlock()
}

func (c *Comm) end() {
	c.stateMu.Lock()
	c.inflight.Add(-1)
	c.cond.Broadcast()
	c.stateMu.Unlock()
}

func (c *Comm) waitQueued() {
	if c.inflight.Load() == 0 {
		return
	}
	c.stateMu.Lock()
	for c.inflight.Load() > 0 {
		c.cond.Wait()
	}
	c.stateMu.Unlock()
}

// destroyGrace is how long Destroy lets a call another thread is making
// finish before it fails the call: destroy never waits on peers.
const destroyGrace = 100 * time.Millisecond

// Destroy waits for queued work, then closes the links and frees the comm.
// A call another thread is still in (stuck on a peer, perhaps) gets
// destroyGrace to finish, then is failed as Abort fails it.
func (c *Comm) Destroy() error {
	c.waitQueued()
	if !c.opMu.TryLock() {
		locked := make(chan struct{})
		go func() { c.opMu.Lock(); close(locked) }() // Destroy owns the lock once it is taken
		grace := time.NewTimer(destroyGrace)
		select {
		case <-locked:
		case <-grace.C:
			c.fail(transport.NewError(transport.Error{Kind: transport.KindPeerFailed, Self: c.rank, Peer: c.rank, Via: -1,
				Detail: "the communicator was destroyed by another thread during this call (destroy aborts calls in progress)"}))
			<-locked
		}
		grace.Stop()
	}
	defer c.opMu.Unlock()
	c.release()
	return nil
}

// Abort fails every operation in progress (from any goroutine), closes the
// links so peers fail too, and frees the comm without waiting for peers.
func (c *Comm) Abort() {
	c.fail(transport.NewError(transport.Error{Kind: transport.KindPeerFailed, Self: c.rank, Peer: c.rank, Via: -1,
		Detail: "the communicator was aborted"}))
	c.waitQueued()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.release()
}

func (c *Comm) release() {
	unregister(c)
	c.beats.Stop()
	c.beats.Log()
	c.metrics.Close() // flushes: no call runs now
	c.stateMu.Lock()
	c.freed = true
	c.unusable.Store(true)
	c.stateMu.Unlock()
	for _, l := range c.linkList() {
		l.Close()
	}
	if c.ln != nil {
		c.ln.Close()
	}
	c.in.close()
	inproc.Forget(c.key)
}

// DumpTrace writes this rank's flight recorder to path (empty: the file
// GOCL_TRACE_FILE names) as JSON lines, for `gocl trace`.
func (c *Comm) DumpTrace(path string) error {
	if c.flight == nil {
		return status.Errorf(status.InvalidUsage,
			"rank %d: the flight recorder is off: set GOCL_TRACE_BUFFER (calls to keep) or GOCL_TRACE_FILE before creating the communicator", c.rank)
	}
	if path == "" {
		path = c.flight.File()
	}
	if path == "" {
		return status.Errorf(status.InvalidArgument, "rank %d: no trace file: pass a path or set GOCL_TRACE_FILE before creating the communicator", c.rank)
	}
	return c.flight.Write(path, "requested")
}
