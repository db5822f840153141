package bootstrap

import (
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"gocl/runtime/status"
)

// dial connects to addr and authenticates, retrying refused connections
// (a root or peer may still be starting) and connections a busy listener
// turned away (a root that every rank dials at once), until the deadline.
// The pauses are jittered, so ranks turned away together come back spread.
func dial(addr string, secret []byte, deadline time.Time) (net.Conn, error) {
	backoff := 10 * time.Millisecond
	for {
		d := net.Dialer{Deadline: deadline}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.SetDeadline(time.Now().Add(authTimeout))
			if err = authDial(c, secret); err == nil {
				c.SetDeadline(time.Time{})
				return c, nil
			}
			c.Close()
			if !errors.Is(err, errTurnedAway) {
				return nil, status.Errorf(status.RemoteError, "handshake with %s failed: %v (is it the same communicator?)", addr, err)
			}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, errTurnedAway) ||
			!deadline.IsZero() && time.Now().Add(backoff).After(deadline) {
			return nil, status.Errorf(status.RemoteError, "cannot connect to %s: %v", addr, err)
		}
		time.Sleep(backoff/2 + rand.N(backoff/2+1))
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Join meets the other ranks at the id's root: it sends this rank's info and
// returns every rank's, indexed by rank.
func Join(id *ID, me PeerInfo, deadline time.Time) ([]PeerInfo, error) {
	root, err := id.Root()
	if err != nil {
		return nil, err
	}
	c, err := dial(root.String(), id.Secret(), deadline)
	if err != nil {
		return nil, status.Errorf(status.RemoteError,
			"rank %d: cannot reach the rendezvous root %s: %v; is the process that called goclGetUniqueId still running and reachable (GOCL_SOCKET_IFNAME)?", me.Rank, root, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if err := writeMsg(c, me); err != nil {
		return nil, status.Errorf(status.RemoteError, "rank %d: rendezvous with %s failed: %v", me.Rank, root, err)
	}
	var reply rootReply
	if err := readMsg(c, &reply); err != nil {
		if errors.Is(err, syscall.ETIMEDOUT) || IsTimeout(err) {
			return nil, status.Errorf(status.Timeout, "rank %d: rendezvous timed out: it did not complete within the timeout (GOCL_TIMEOUT, or the timeout given at init): not every rank called goclCommInitRank", me.Rank)
		}
		return nil, status.Errorf(status.RemoteError, "rank %d: rendezvous with %s failed: %v", me.Rank, root, err)
	}
	if reply.Err != "" {
		code := status.InvalidUsage
		switch {
		case reply.Expired:
			code = status.Timeout
		case reply.Left:
			code = status.RemoteError
		}
		return nil, status.Errorf(code, "rank %d: rendezvous failed: %s", me.Rank, reply.Err)
	}
	if len(reply.Peers) != me.NRanks {
		return nil, status.Errorf(status.InternalError, "rank %d: root sent %d peers for %d ranks", me.Rank, len(reply.Peers), me.NRanks)
	}
	return reply.Peers, nil
}

// IsTimeout reports a network wait that passed its deadline.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
