package bootstrap

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
)

// StartRoot makes a new unique id and serves one rendezvous for it in the
// background: it waits for every rank's PeerInfo, then sends each the table.
// It stops when the rendezvous is done or after GOCL_TIMEOUT.
func StartRoot() (ID, error) {
	ifc, err := ChooseIface()
	if err != nil {
		return ID{}, err
	}
	ln, err := ifc.Listen()
	if err != nil {
		return ID{}, err
	}
	id, err := NewID(ln.Addr().(*net.TCPAddr))
	if err != nil {
		ln.Close()
		return ID{}, err
	}
	debuglog.Infof(debuglog.Bootstrap, -1, "bootstrap root listening on %s", ln.Addr())
	go serveRoot(ln, id.Secret(), config.Timeout())
	return id, nil
}

type arrival struct {
	conn net.Conn
	info PeerInfo
}

func serveRoot(ln *net.TCPListener, secret []byte, timeout time.Duration) {
	defer ln.Close()
	arrivals := make(chan arrival)
	done := make(chan struct{})
	defer close(done)
	go acceptRanks(ln, secret, arrivals, done)

	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	byRank := map[int]arrival{}
	nranks := 0
	var failure string
	fail := func(msg string) {
		if failure == "" {
			failure = msg
		}
	}
	for {
		select {
		case a := <-arrivals:
			switch {
			case a.info.NRanks <= 0 || a.info.Rank < 0 || a.info.Rank >= a.info.NRanks:
				fail(fmt.Sprintf("rank %d joined with nranks %d", a.info.Rank, a.info.NRanks))
			case nranks != 0 && a.info.NRanks != nranks:
				fail(fmt.Sprintf("ranks disagree on the communicator size: rank %d says nranks=%d, others said %d", a.info.Rank, a.info.NRanks, nranks))
			case byRank[a.info.Rank].conn != nil:
				fail(fmt.Sprintf("rank %d joined twice (from %s and %s): every process must pass a different rank", a.info.Rank, byRank[a.info.Rank].conn.RemoteAddr(), a.conn.RemoteAddr()))
			}
			if nranks == 0 {
				nranks = a.info.NRanks
			}
			if failure != "" {
				writeMsg(a.conn, rootReply{Err: failure})
				a.conn.Close()
				for _, b := range byRank {
					writeMsg(b.conn, rootReply{Err: failure})
					b.conn.Close()
				}
				byRank = map[int]arrival{}
				continue // keep answering late ranks with the failure until the timeout
			}
			byRank[a.info.Rank] = a
			if len(byRank) == nranks {
				peers := make([]PeerInfo, nranks)
				for r, b := range byRank {
					peers[r] = b.info
				}
				for _, b := range byRank {
					writeMsg(b.conn, rootReply{Peers: peers})
					b.conn.Close()
				}
				debuglog.Infof(debuglog.Bootstrap, -1, "bootstrap root: all %d ranks joined", nranks)
				return
			}
		case <-expire:
			var missing []string
			for r := 0; r < nranks; r++ {
				if byRank[r].conn == nil {
					missing = append(missing, fmt.Sprint(r))
				}
			}
			sort.Strings(missing)
			msg := fmt.Sprintf("rendezvous timed out after GOCL_TIMEOUT=%s: %d of %d ranks joined, missing ranks [%s]",
				timeout, len(byRank), nranks, strings.Join(missing, " "))
			if failure != "" {
				msg = failure
			}
			for _, b := range byRank {
				writeMsg(b.conn, rootReply{Err: msg})
				b.conn.Close()
			}
			debuglog.Warnf(debuglog.Bootstrap, -1, "bootstrap root: %s", msg)
			return
		}
	}
}

// acceptRanks authenticates connections and reads each rank's PeerInfo.
func acceptRanks(ln *net.TCPListener, secret []byte, out chan<- arrival, done <-chan struct{}) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // listener closed
		}
		go func() {
			c.SetDeadline(time.Now().Add(authTimeout))
			// A stranger still here when the rendezvous ends is cut off then,
			// not at authTimeout.
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				select {
				case <-done:
					c.SetDeadline(time.Now())
				case <-stop:
				}
			}()
			defer func() { close(stop); <-stopped }()
			if err := authAccept(c, secret); err != nil {
				debuglog.Warnf(debuglog.Bootstrap, -1, "bootstrap root: dropped connection from %s: %v", c.RemoteAddr(), err)
				c.Close()
				return
			}
			var info PeerInfo
			if err := readMsg(c, &info); err != nil {
				c.Close()
				return
			}
			c.SetDeadline(time.Time{})
			select {
			case out <- arrival{c, info}:
			case <-done:
				c.Close()
			}
		}()
	}
}

// authTimeout bounds a handshake so a silent stranger cannot hold a slot.
const authTimeout = 10 * time.Second
