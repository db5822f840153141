package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gocl/runtime/debuglog"
	"gocl/runtime/status"
)

// The id exchange of a launcher's world (Communicator.from_env,
// gocl.jax.init, goclExchangeUniqueId): rank 0 serves the unique id at
// MASTER_ADDR:MASTER_PORT and the other ranks fetch it.
//
// Every connection starts with the bootstrap's mutual handshake (auth.go)
// keyed by the launcher's rendezvous secret, and the rest travels sealed
// (seal.go) under the connection's session key:
//
//	fetcher -> hello {rank, nranks, round}
//	rank 0  -> ok {id} | retry | busy | dup | fatal {err}
//	fetcher -> ack             (after ok)
//	rank 0  -> counted         (the rank is counted only now)
//
// With a secret, a stranger neither gets the id nor passes for rank 0: both
// sides prove the secret before a byte of the id moves, and it moves
// encrypted. Without one (a bare torchrun environment) the handshake keys on
// a public constant, so it only keeps out what is not gocl; what still holds
// then: rank 0 listens on MASTER_ADDR's interface only, serves fetchers
// concurrently, counts a rank once it acknowledges, refuses ranks outside
// the world and a second claim of a counted rank (so a stranger who took a
// rank's id makes that rank fail loudly, not silently), and tells a
// mismatched fetcher nothing about rank 0's world.

// Exchange is one exchange as a rank sees it.
type Exchange struct {
	Host         string // MASTER_ADDR
	Port         int
	Rank, NRanks int
	Round        int    // the same on every rank for one exchange (from_env counts its calls)
	Secret       []byte // the launcher's rendezvous secret; empty: none
	Deadline     time.Time
}

// CheckSecret says what is wrong with a rendezvous secret, if anything
// (secret.go: none is allowed, a weak one is not).
func CheckSecret(secret []byte) error {
	if len(secret) == 0 {
		return nil
	}
	if n, distinct, ok := SecretStrength(string(secret)); !ok {
		return status.Errorf(status.InvalidArgument,
			"GOCL_RENDEZVOUS_SECRET has %d characters (%d different): anyone who sees one handshake could guess it offline; give at least %d, %d different, as %s makes",
			n, distinct, MinSecretLen, MinSecretDistinct, MakeSecret)
	}
	return nil
}

// exchangeKey is what the handshake proves: derived from the secret, never
// the secret itself.
func exchangeKey(secret []byte) []byte { return mac(secret, "gocl rendezvous v1", nil, nil) }

type idHello struct {
	Rank   int `json:"rank"`
	NRanks int `json:"nranks"`
	Round  int `json:"round"`
}

type idReply struct {
	Status string `json:"status"` // ok, retry, busy, dup, fatal, counted
	ID     []byte `json:"id,omitempty"`
	Err    string `json:"err,omitempty"`
}

type idAck struct {
	Ack bool `json:"ack"`
}

// ListenExchange opens rank 0's exchange listener: on MASTER_ADDR's own
// address when it is one of this host's (a loopback MASTER_ADDR keeps the
// job on loopback), else on every address (a name that reaches this host
// from outside, as a Kubernetes Service). local is the interface found.
func ListenExchange(host string, port int) (ln net.Listener, local Iface, found bool, err error) {
	local, found, err = LocalIface(host)
	if err != nil {
		return nil, Iface{}, false, err
	}
	bind := ""
	if found {
		bind = local.IP.String()
	} else {
		debuglog.Infof(debuglog.Bootstrap, 0, "MASTER_ADDR %s is not an address of this host: the unique id exchange listens on every address", host)
	}
	ln, err = net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.EADDRINUSE) {
			hint = " (another program holds it: set GOCL_MASTER_PORT to a free port on every rank)"
		}
		return nil, Iface{}, false, status.Errorf(status.SystemError,
			"rank 0 cannot listen on MASTER_PORT %d at %s: %v%s", port, host, err, hint)
	}
	return ln, local, found, nil
}

// idServer is rank 0's side of one exchange.
type idServer struct {
	x    Exchange
	id   ID
	key  []byte
	gate *gate

	mu       sync.Mutex
	counted  map[int]bool
	claimed  map[int]bool
	strayed  []string // why fetchers were turned away, for rank 0's own error
	authFail int
	done     chan struct{}
}

// ServeID serves id on ln to ranks 1..NRanks-1 until each has acknowledged
// it or the deadline passes, and closes ln.
func ServeID(ln net.Listener, x Exchange, id ID) error {
	defer ln.Close()
	if x.NRanks <= 1 {
		return nil
	}
	s := &idServer{x: x, id: id, key: exchangeKey(x.Secret), gate: newGate(x.NRanks),
		counted: map[int]bool{}, claimed: map[int]bool{}, done: make(chan struct{})}
	go AcceptLoop(ln, false, s.handle)
	var expired <-chan time.Time
	if !x.Deadline.IsZero() {
		t := time.NewTimer(time.Until(x.Deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-s.done:
		return nil
	case <-expired:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing []string
	for r := 1; r < x.NRanks; r++ {
		if !s.counted[r] {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	why := ""
	if s.authFail > 0 {
		why += fmt.Sprintf("; %d connection(s) failed authentication (not gocl, silent, or a rank with another GOCL_RENDEZVOUS_SECRET)", s.authFail)
	}
	if len(s.strayed) > 0 {
		why += "; turned away: " + strings.Join(s.strayed, "; ")
	}
	return status.Errorf(status.Timeout,
		"rank 0 timed out waiting for rank(s) %s to fetch the unique id from %s (MASTER_ADDR:MASTER_PORT)%s; did every rank start, with WORLD_SIZE=%d and the same MASTER_ADDR, MASTER_PORT and GOCL_RENDEZVOUS_SECRET?",
		strings.Join(missing, ", "), net.JoinHostPort(x.Host, strconv.Itoa(x.Port)), why, x.NRanks)
}

func (s *idServer) handle(c net.Conn) {
	defer func() { recover() }() // a goroutine of ours never takes the process down
	defer c.Close()
	if !s.gate.enter() {
		return
	}
	defer s.gate.leave()
	c.SetDeadline(time.Now().Add(authTimeout))
	key, err := authAcceptKey(c, s.key)
	if err != nil { // a wrong secret shows here as the dialer hanging up
		s.mu.Lock()
		s.authFail++
		s.mu.Unlock()
		return
	}
	sl, err := newSealed(key, false)
	if err != nil {
		return
	}
	var h idHello
	if sl.read(c, &h) != nil {
		return
	}
	reply := s.claim(h)
	if sl.write(c, reply) != nil || reply.Status != "ok" {
		s.release(h.Rank, reply.Status == "ok")
		return
	}
	var ack idAck
	if sl.read(c, &ack) != nil || !ack.Ack {
		s.release(h.Rank, true)
		return
	}
	s.count(h.Rank)
	sl.write(c, idReply{Status: "counted"})
}

// claim decides the answer to a hello.
func (s *idServer) claim(h idHello) idReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.x
	stray := func(err string) idReply {
		if len(s.strayed) < 8 {
			s.strayed = append(s.strayed, err)
		}
		return idReply{Status: "fatal", Err: err}
	}
	switch {
	case h.NRanks != x.NRanks && len(x.Secret) > 0:
		return stray(fmt.Sprintf("rank %d has WORLD_SIZE=%d but rank 0 has WORLD_SIZE=%d", h.Rank, h.NRanks, x.NRanks))
	case h.NRanks != x.NRanks: // without a secret the asker may be anyone: tell it nothing of the job
		return stray(fmt.Sprintf("rank %d has WORLD_SIZE=%d, which is not rank 0's", h.Rank, h.NRanks))
	case h.Round != x.Round:
		return idReply{Status: "retry"}
	case h.Rank < 1 || h.Rank >= x.NRanks:
		return stray(fmt.Sprintf("rank %d is outside the world of %d ranks (ranks 1 to %d fetch the unique id)", h.Rank, x.NRanks, x.NRanks-1))
	case s.counted[h.Rank]:
		if len(s.strayed) < 8 {
			s.strayed = append(s.strayed, fmt.Sprintf("a second process claimed rank %d", h.Rank))
		}
		return idReply{Status: "dup"}
	case s.claimed[h.Rank]:
		return idReply{Status: "busy"}
	}
	s.claimed[h.Rank] = true
	return idReply{Status: "ok", ID: append([]byte(nil), s.id[:]...)}
}

func (s *idServer) release(rank int, claimed bool) {
	if !claimed {
		return
	}
	s.mu.Lock()
	delete(s.claimed, rank)
	s.mu.Unlock()
}

func (s *idServer) count(rank int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claimed, rank)
	if s.counted[rank] {
		return
	}
	s.counted[rank] = true
	if len(s.counted) == s.x.NRanks-1 {
		close(s.done)
	}
}

// FetchID asks rank 0 for the id until it answers or the deadline passes.
func FetchID(x Exchange) (ID, error) {
	addr := net.JoinHostPort(x.Host, strconv.Itoa(x.Port))
	key := exchangeKey(x.Secret)
	var held *ID // the id of an attempt whose "counted" was lost
	last := "no answer"
	impostor := "" // an answer that failed authentication outranks a later dial cut by the deadline
	pause := 20 * time.Millisecond
	for {
		left := time.Duration(1<<62 - 1)
		if !x.Deadline.IsZero() {
			left = time.Until(x.Deadline)
		}
		if left <= 0 {
			if impostor != "" && impostor != last {
				last = impostor + " (the last attempt: " + last + ")"
			}
			return ID{}, status.Errorf(status.Timeout,
				"rank %d timed out waiting for rank 0 to serve the unique id at %s (MASTER_ADDR:MASTER_PORT); last: %s. Is rank 0 running, with the same MASTER_ADDR, MASTER_PORT and GOCL_RENDEZVOUS_SECRET?",
				x.Rank, addr, last)
		}
		r, err := fetchOnce(addr, key, x, min(left, 10*time.Second), held)
		switch {
		case err == nil && r.id != nil:
			return *r.id, nil
		case err == nil && r.fatal != nil:
			return ID{}, r.fatal
		case err == nil:
			last = r.note
			if r.held != nil {
				held = r.held
			}
		case errors.Is(err, errAuth):
			impostor = fmt.Sprintf("whoever answers at %s did not prove it holds this job's rendezvous secret (another program or job on MASTER_PORT, or rank 0 started with another GOCL_RENDEZVOUS_SECRET)", addr)
			last = impostor
		default:
			last = err.Error()
		}
		time.Sleep(min(pause, max(0, time.Until(x.Deadline))))
		pause = min(pause*3/2, 500*time.Millisecond)
	}
}

type fetched struct {
	id    *ID
	held  *ID
	fatal error
	note  string
}

func fetchOnce(addr string, key []byte, x Exchange, limit time.Duration, held *ID) (fetched, error) {
	c, err := net.DialTimeout("tcp", addr, min(limit, 5*time.Second))
	if err != nil {
		return fetched{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(limit))
	skey, err := authDialKey(c, key)
	if err != nil {
		return fetched{}, err
	}
	sl, err := newSealed(skey, true)
	if err != nil {
		return fetched{}, err
	}
	if err := sl.write(c, idHello{Rank: x.Rank, NRanks: x.NRanks, Round: x.Round}); err != nil {
		return fetched{}, err
	}
	var r idReply
	if err := sl.read(c, &r); err != nil {
		return fetched{}, err
	}
	switch r.Status {
	case "ok":
		if len(r.ID) != IDBytes {
			return fetched{fatal: status.Errorf(status.InternalError, "rank %d: rank 0 sent a unique id of %d bytes", x.Rank, len(r.ID))}, nil
		}
		var id ID
		copy(id[:], r.ID)
		if err := sl.write(c, idAck{Ack: true}); err != nil {
			return fetched{held: &id, note: "the connection dropped before rank 0 counted this rank"}, nil
		}
		var done idReply
		if err := sl.read(c, &done); err != nil || done.Status != "counted" {
			return fetched{held: &id, note: "the connection dropped before rank 0 counted this rank"}, nil
		}
		return fetched{id: &id}, nil
	case "dup":
		if held != nil { // counted on an attempt whose answer was lost
			return fetched{id: held}, nil
		}
		return fetched{fatal: status.Errorf(status.InvalidUsage,
			"rank %d: rank 0 has already given the unique id to another process that claimed rank %d: two ranks were started with RANK=%d, or a stranger on the network took this rank's place (set GOCL_RENDEZVOUS_SECRET on every rank: `gocl run` does)",
			x.Rank, x.Rank, x.Rank)}, nil
	case "retry":
		return fetched{note: "rank 0 is serving another from_env round"}, nil
	case "busy":
		return fetched{note: fmt.Sprintf("another connection claiming rank %d is being served", x.Rank)}, nil
	case "fatal":
		return fetched{fatal: status.Errorf(status.InvalidArgument, "%s", r.Err)}, nil
	}
	return fetched{}, fmt.Errorf("rank 0 answered %q", r.Status)
}
