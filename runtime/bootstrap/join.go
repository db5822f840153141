package bootstrap

import (
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"gocl/runtime/status"
)

// dial connects to addr and authenticates, retrying refused connections (a
// root or peer may still be starting) and connections a busy listener
// turned away (a root that every rank dials at once), until the deadline.
// The pauses are jittered, so ranks turned away together come back spread.
// To a listener known to be up (patient: a rank's table listener, open
// before its rank joined) a refusal is final, and the handshake, with one of
// the job's own ranks, may take until the deadline: on a host crowded with
// ranks it can take longer than a stranger is given.
func dial(addr string, secret []byte, deadline time.Time, patient bool) (net.Conn, error) {
	backoff := 10 * time.Millisecond
	for {
		d := net.Dialer{Deadline: deadline}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.SetDeadline(handshakeBy(deadline, patient))
			if err = authDial(c, secret); err == nil {
				c.SetDeadline(time.Time{})
				return c, nil
			}
			c.Close()
			if !errors.Is(err, errTurnedAway) {
				return nil, status.Errorf(status.RemoteError, "handshake with %s failed: %v (is it the same communicator?)", addr, err)
			}
		}
		again := errors.Is(err, errTurnedAway) || !patient && errors.Is(err, syscall.ECONNREFUSED)
		if !again || !deadline.IsZero() && time.Now().Add(backoff).After(deadline) {
			return nil, status.Errorf(status.RemoteError, "cannot connect to %s: %v", addr, err)
		}
		time.Sleep(backoff/2 + rand.N(backoff/2+1))
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// handshakeBy is when a handshake must be done: authTimeout from now, or
// for a patient one the deadline (none: no limit).
func handshakeBy(deadline time.Time, patient bool) time.Time {
	if patient {
		return deadline
	}
	return time.Now().Add(authTimeout)
}

// Join meets the other ranks at the id's root: it sends this rank's info and
// returns every rank's, indexed by rank. The table comes down the bootstrap
// tree (table.go), one rank per process: from the root for the tree's first
// two, from the parent for the others, and a rank passes it on to its
// children before returning; the process's other ranks take that copy
// (shared.go).
func Join(id *ID, me PeerInfo, deadline time.Time) ([]PeerInfo, error) {
	root, err := id.Root()
	if err != nil {
		return nil, err
	}
	c, err := dial(root.String(), id.Secret(), deadline, false)
	if err != nil {
		return nil, status.Errorf(status.RemoteError,
			"rank %d: cannot reach the rendezvous root %s: %v; is the process that called goclGetUniqueId still running and reachable (GOCL_SOCKET_IFNAME)?", me.Rank, root, err)
	}
	defer c.Close()
	var share *sharedTable
	lead := true
	if me.Proc != "" {
		k := sharedKey{*id, me.Proc}
		share, lead = shareTable(k, me.Rank)
		defer share.leave(k)
	}
	var boot *net.TCPListener
	if lead {
		// The table's listener is on the address the rank's peers reach it
		// at, or (no address given) the one this host reaches the root from.
		host := c.LocalAddr().(*net.TCPAddr).IP.String()
		if h, _, err := net.SplitHostPort(me.Addr); err == nil && h != "" {
			host = h
		}
		bl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			err = status.Errorf(status.SystemError, "rank %d: cannot listen for the rank table on %s: %v", me.Rank, host, err)
			if share != nil {
				share.publish(nil, err)
			}
			return nil, err
		}
		boot = bl.(*net.TCPListener)
		defer boot.Close()
		me.Boot = boot.Addr().String()
	}
	peers, err := joinRoot(c, root, id, me, share, boot, deadline)
	if share != nil && lead {
		share.publish(peers, err)
	}
	return peers, err
}

// joinRoot sends me to the root on c, and takes the table: from the tree on
// boot when this rank leads its process (or is alone in it), else the
// leader's copy from share.
func joinRoot(c net.Conn, root *net.TCPAddr, id *ID, me PeerInfo, share *sharedTable, boot *net.TCPListener, deadline time.Time) ([]PeerInfo, error) {
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
	c.Close()
	if boot == nil {
		peers, err := share.take(me.Rank, deadline)
		if err == nil {
			err = ownEntry(peers, me)
		}
		return peers, err
	}
	peers, msgs, err := receiveTable(me.Rank, reply.From, me.NRanks, boot, id.Secret(), deadline)
	if err == nil {
		err = ownEntry(peers, me)
	}
	if share != nil {
		share.publish(peers, err) // the process's other ranks go on at once
	}
	if err != nil {
		abortBelow(me.Rank, reply.Kids, err, id.Secret(), deadline)
		return nil, err
	}
	passOn(me.Rank, newTableTree(peers), peers, msgs, id.Secret(), deadline) // as it came: no encoding again
	return peers, nil
}

// ownEntry checks that the table holds what this rank sent the root.
func ownEntry(peers []PeerInfo, me PeerInfo) error {
	if peers[me.Rank] != me {
		return status.Errorf(status.InternalError, "rank %d: the rank table's entry for this rank is not what it sent", me.Rank)
	}
	return nil
}

// IsTimeout reports a network wait that passed its deadline.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
