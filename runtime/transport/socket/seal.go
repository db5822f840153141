package socket

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Encrypted links (GOCL_SOCKET_ENCRYPT=1). Every connection of a pair
// carries authenticated encryption (AES-256-GCM) with its own key per
// direction: a frame's header is one sealed record, its payload follows in
// sealed records of at most SealRecord bytes, so memory stays bounded and a
// receiver opens one record while the next crosses the link. A record's
// nonce is its counter on that connection and direction; the keys are
// fresh for every link, so a counter never repeats under a key, and a
// record replayed, dropped, reordered or moved to another connection fails
// to open. A record that fails to open is a *TamperError: the link closes
// and nothing of the record reaches the caller.

// SealRecord is the most payload bytes one sealed record carries.
const SealRecord = 64 << 10

// tagSize is GCM's authentication tag.
const tagSize = 16

// hdrRecord is a sealed header's size on the wire.
const hdrRecord = wire.HeaderSize + tagSize

// Options says how Connect sets a link up.
type Options struct {
	// Encrypt: every frame travels sealed (GOCL_SOCKET_ENCRYPT). Both ends
	// must agree; Connect fails on both when they do not.
	Encrypt bool
	// Secret is the job's secret (the unique id's), which both ends proved
	// they hold in the mesh handshake. Encrypted links derive their keys
	// from it and the nonces both ends pick in Connect's exchange; it is
	// never used as a key itself.
	Secret []byte
}

// helloMagic opens the link exchange: magic, version, flags, nonce.
var helloMagic = []byte("GOCLSOCK")

const (
	helloVersion = 1
	helloNonce   = 32
	helloSize    = 8 + 1 + 1 + helloNonce
	flagEncrypt  = 1
)

// Connect makes the link to peer over conns (established and authenticated
// by the mesh, the same count and order on both sides). Both ends first
// trade a hello on conns[0]: whether they encrypt (a pair where one end
// does and the other does not fails here, on both ends, instead of reading
// garbage later) and, for encrypted links, a fresh nonce each for the keys.
func Connect(conns []net.Conn, self, peer int, opt Options, deadline time.Time) (transport.Link, error) {
	var mine [helloSize]byte
	copy(mine[:], helloMagic)
	mine[8] = helloVersion
	if opt.Encrypt {
		mine[9] = flagEncrypt
		if len(opt.Secret) == 0 {
			return nil, status.Errorf(status.InternalError, "GOCL_SOCKET_ENCRYPT=1 without the job's secret")
		}
	}
	if _, err := rand.Read(mine[10:]); err != nil {
		return nil, err
	}
	c := conns[0]
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	// Both write first: 42 bytes fit any socket buffer.
	if _, err := c.Write(mine[:]); err != nil {
		return nil, fmt.Errorf("sending the link hello to rank %d: %w", peer, err)
	}
	var theirs [helloSize]byte
	if _, err := io.ReadFull(c, theirs[:]); err != nil {
		return nil, fmt.Errorf("waiting for rank %d's link hello: %w", peer, err)
	}
	if !bytes.Equal(theirs[:8], helloMagic) || theirs[8] != helloVersion {
		return nil, status.Errorf(status.InvalidUsage, "rank %d's socket link hello is not this version's (%q): run the same gocl build on every rank", peer, theirs[:9])
	}
	if theirs[9]&flagEncrypt != mine[9]&flagEncrypt {
		onOff := func(f byte) int { return int(f & flagEncrypt) }
		return nil, status.Errorf(status.InvalidUsage,
			"rank %d runs with GOCL_SOCKET_ENCRYPT=%d and this rank (%d) with GOCL_SOCKET_ENCRYPT=%d: the TCP links between ranks are encrypted only when every rank sets it alike; set GOCL_SOCKET_ENCRYPT the same on every rank",
			peer, onOff(theirs[9]), self, onOff(mine[9]))
	}
	if !opt.Encrypt {
		return New(conns, self, peer), nil
	}
	return newSealed(conns, self, peer, opt.Secret, mine[10:], theirs[10:])
}

// linkKey is the key of connection i's direction from rank from to rank
// to: HMAC-SHA256 of the job's secret over a label, both ranks, the index
// and both ends' fresh nonces (the lower rank's first), so every link,
// connection and direction has a key of its own that no earlier link used.
func linkKey(secret []byte, from, to, i int, lowNonce, highNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("gocl socket link key v1"))
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(from))
	binary.LittleEndian.PutUint32(b[4:], uint32(to))
	binary.LittleEndian.PutUint32(b[8:], uint32(i))
	m.Write(b[:])
	m.Write(lowNonce)
	m.Write(highNonce)
	return m.Sum(nil)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// TamperError is a sealed record from Peer that failed to open on this
// rank (Self): the bytes were altered on the way, or they were not sent by
// rank Peer of this job. The link returns it inside a *transport.Error of
// kind KindMismatch (Peer set, Err this error), so errors.As finds either.
type TamperError struct {
	Self, Peer int
	Conn       int // the connection of the pair
	What       string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("data from rank %d over TCP failed authentication (GOCL_SOCKET_ENCRYPT) while %s: it was altered on the way or did not come from rank %d of this job; nothing of it was used, and the link to rank %d is closed",
		e.Peer, e.What, e.Peer, e.Peer)
}

// sealConn is one connection's ciphers and counters.
type sealConn struct {
	send, recv cipher.AEAD
	sent       uint64        // records sealed (under the connection's write lock)
	got        atomic.Uint64 // records opened (the receiver; Failure and Peek read it)
	out        []byte        // sealed records being written (write lock)
	in         []byte        // a sealed record being read (the receiver)
}

func nonce(n uint64) []byte {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return b[:]
}

// sealedLink is an encrypted socket link: the plain link's connections,
// locks, deadlines, striping and waits, with every frame sealed.
type sealedLink struct {
	l  *link
	sc []sealConn
	// tried: the sealed frame TrySend began (tryLen bytes of sc[0].out, of
	// which trySent are written; connection 0's write lock held), or -1.
	trySent, tryLen int
	try             started
	// taken: the start of connection 0's next sealed header, read by Peek
	// (the receiver's goroutine, between frames) and not yet used by a
	// receive. Peek must consume: bytes left queued while the rest of the
	// header waits can hold the TCP window shut (the kernel charges the
	// whole buffer they came in), and the rest would never come.
	taken []byte
}

func newSealed(conns []net.Conn, self, peer int, secret, mine, theirs []byte) (transport.Link, error) {
	low, high := mine, theirs
	if self > peer {
		low, high = theirs, mine
	}
	s := &sealedLink{l: New(conns, self, peer).(*link), sc: make([]sealConn, len(conns)), trySent: -1}
	for i := range conns {
		var err error
		if s.sc[i].send, err = newAEAD(linkKey(secret, self, peer, i, low, high)); err != nil {
			return nil, err
		}
		if s.sc[i].recv, err = newAEAD(linkKey(secret, peer, self, i, low, high)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var (
	_ transport.TrySender = (*sealedLink)(nil)
	_ transport.Peeker    = (*sealedLink)(nil)
	_ transport.Counted   = (*sealedLink)(nil)
)

func (s *sealedLink) Name() string                        { return "socket" }
func (s *sealedLink) Stats() []*transport.Stats           { return s.l.Stats() }
func (s *sealedLink) Buffered(n int) bool                 { return s.l.Buffered(n) }
func (s *sealedLink) SetDeadline(t time.Time)             { s.l.SetDeadline(t) }
func (s *sealedLink) ShareDeadline(d *transport.Deadline) { s.l.ShareDeadline(d) }
func (s *sealedLink) Close() error                        { return s.l.Close() }
func (s *sealedLink) Pending() bool                       { return len(s.taken) > 0 || s.l.Pending() }
func (s *sealedLink) wrap(err error, what string) error {
	return s.l.wrapWith(s.Failure, err, what)
}

// tampered closes the link (its stream can no longer be trusted) and
// returns the error naming the peer.
func (s *sealedLink) tampered(i int, what string) error {
	s.l.Close()
	return transport.NewError(transport.Error{Kind: transport.KindMismatch, Self: s.l.self, Peer: s.l.peer, Via: -1,
		Err: &TamperError{Self: s.l.self, Peer: s.l.peer, Conn: i, What: what}})
}

// sealFrame appends to c.out[:0] the sealed header h (Len set) and, if
// payload is not nil, the payload's first record; it returns the bytes.
func (c *sealConn) sealHeader(h *wire.Header) []byte {
	if cap(c.out) < hdrRecord+SealRecord+tagSize {
		c.out = make([]byte, 0, hdrRecord+SealRecord+tagSize)
	}
	var hb [wire.HeaderSize]byte
	h.Encode(hb[:])
	out := c.send.Seal(c.out[:0], nonce(c.sent), hb[:], nil)
	c.sent++
	return out
}

func (c *sealConn) sealRecord(out, p []byte) []byte {
	out = c.send.Seal(out, nonce(c.sent), p, nil)
	c.sent++
	return out
}

// sendPart writes one frame part on connection i: the sealed header, then
// the payload record by record (the first one in the header's write).
// The caller holds the connection's write lock.
func (s *sealedLink) sendPart(i int, h *wire.Header, data []byte) error {
	c := &s.sc[i]
	out := c.sealHeader(h)
	s.l.writeBy(i)
	for off := 0; ; {
		if off < len(data) {
			end := min(off+SealRecord, len(data))
			out = c.sealRecord(out, data[off:end])
			off = end
		}
		if _, err := s.l.conns[i].Write(out); err != nil {
			return err
		}
		if off >= len(data) {
			return nil
		}
		out = c.out[:0]
	}
}

func (s *sealedLink) Send(h *wire.Header, data []byte) error {
	transport.RaceRelease()
	l := s.l
	parts := l.parts(len(data))
	err := each(parts, func(i int) error {
		lo, hi := span(len(data), parts, i)
		ph := *h
		ph.Len = uint64(hi - lo)
		l.writeMu[i].Lock()
		err := s.sendPart(i, &ph, data[lo:hi])
		l.writeMu[i].Unlock()
		if err != nil {
			return s.wrap(err, "sending "+h.Describe())
		}
		return nil
	})
	h.Len = uint64(len(data))
	if err = first(err); err == nil {
		l.stats.CountSent(len(data))
	}
	return err
}

// TrySend seals a frame of up to SealRecord bytes (not striped) and writes
// it on connection 0 with one non-blocking write; larger frames are left
// whole to Finish. Once sealed, the frame's records hold their counters:
// what the kernel did not take stays in the buffer, under connection 0's
// lock, for Finish.
func (s *sealedLink) TrySend(h *wire.Header, data []byte) (bool, error) {
	l := s.l
	h.Len = uint64(len(data))
	s.try, s.trySent = started{h: *h, data: data}, -1
	if l.parts(len(data)) > 1 || len(data) > SealRecord {
		return false, nil
	}
	transport.RaceRelease()
	l.writeMu[0].Lock()
	c := &s.sc[0]
	out := c.sealHeader(h)
	if len(data) > 0 {
		out = c.sealRecord(out, data)
	}
	var n int
	var errno syscall.Errno
	if err := l.raw[0].Write(func(fd uintptr) bool {
		r, _, e := syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&out[0])), uintptr(len(out)))
		n, errno = int(r), e
		return true
	}); err != nil {
		l.writeMu[0].Unlock()
		return false, s.wrap(err, "sending "+h.Describe())
	}
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		n = 0
	case errno != 0:
		l.writeMu[0].Unlock()
		return false, s.wrap(errno, "sending "+h.Describe())
	case n == len(out):
		l.writeMu[0].Unlock()
		l.stats.CountSent(len(data))
		return true, nil
	}
	l.stats.CountSent(len(data)) // Finish writes the rest, or Abandon closes the link
	s.trySent, s.tryLen = n, len(out)
	return false, nil
}

func (s *sealedLink) Finish() error {
	t, sent, n := s.try, s.trySent, s.tryLen
	s.try, s.trySent = started{}, -1
	if sent < 0 {
		return s.Send(&t.h, t.data)
	}
	defer s.l.writeMu[0].Unlock()
	s.l.writeBy(0)
	if _, err := s.l.conns[0].Write(s.sc[0].out[sent:n]); err != nil {
		return s.wrap(err, "sending "+t.h.Describe())
	}
	return nil
}

func (s *sealedLink) Abandon() {
	sent := s.trySent
	s.try, s.trySent = started{}, -1
	if sent >= 0 {
		if c, ok := s.l.conns[0].(interface{ SetLinger(int) error }); ok {
			c.SetLinger(0)
		}
		s.l.writeMu[0].Unlock()
	}
	s.l.Close()
}

// Abort seals an abort frame with the reason on every connection whose
// writer is idle, then closes.
func (s *sealedLink) Abort(reason string) {
	l := s.l
	if len(reason) > wire.MaxAbortReason {
		reason = reason[:wire.MaxAbortReason]
	}
	select {
	case <-l.closed:
		return
	default:
	}
	h := wire.Header{Kind: wire.KindAbort, Len: uint64(len(reason))}
	for i, c := range l.conns {
		if l.writeMu[i].TryLock() {
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			out := s.sc[i].sealHeader(&h)
			out = s.sc[i].sealRecord(out, []byte(reason))
			c.Write(out)
			l.writeMu[i].Unlock()
		}
	}
	l.Close()
}

func (s *sealedLink) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	parts := s.l.parts(len(dst))
	err := first(each(parts, func(i int) error {
		lo, hi := span(len(dst), parts, i)
		return s.recvPart(i, want, dst[lo:hi])
	}))
	if err == nil {
		s.l.stats.CountReceived(len(dst))
	}
	return err
}

func (s *sealedLink) RecvWith(want *wire.Header, use func([]byte)) error {
	l := s.l
	n := int(want.Len)
	if cap(l.scratch) < n {
		l.scratch = make([]byte, n)
	}
	buf := l.scratch[:n]
	if err := s.RecvInto(want, buf); err != nil {
		return err
	}
	use(buf)
	return nil
}

// recvPart reads one sealed frame part from connection i into dst.
func (s *sealedLink) recvPart(i int, want *wire.Header, dst []byte) error {
	l, c := s.l, &s.sc[i]
	spin := len(dst) <= SpinMax
	if cap(c.in) < SealRecord+tagSize {
		c.in = make([]byte, SealRecord+tagSize)
	}
	rec := c.in[:hdrRecord]
	had := 0
	if i == 0 {
		had = copy(rec, s.taken)
		s.taken = s.taken[:0]
	}
	if err := l.readFull(i, rec[had:], spin); err != nil {
		return s.wrap(err, "waiting for "+want.Describe())
	}
	transport.RaceAcquire()
	var hb [wire.HeaderSize]byte
	if _, err := c.recv.Open(hb[:0], nonce(c.got.Load()), rec, nil); err != nil {
		return s.tampered(i, "waiting for "+want.Describe())
	}
	c.got.Add(1)
	got, err := wire.Decode(hb[:])
	if err != nil {
		l.Close()
		return transport.PeerClosed(l.self, l.peer, err.Error())
	}
	if got.Kind == wire.KindAbort {
		r := int(min(got.Len, wire.MaxAbortReason))
		rec := c.in[:r+tagSize]
		if err := l.readFull(i, rec, false); err != nil {
			select {
			case <-l.closed:
				return transport.Aborted(l.self, l.peer)
			default:
			}
			return transport.PeerFailed(l.self, l.peer, "it aborted (its reason did not arrive: "+err.Error()+")")
		}
		reason, err := c.recv.Open(nil, nonce(c.got.Load()), rec, nil)
		if err != nil {
			return s.tampered(i, "reading rank's abort reason")
		}
		c.got.Add(1)
		return transport.PeerFailed(l.self, l.peer, string(reason))
	}
	pw := *want
	pw.Len = uint64(len(dst))
	if err := transport.CheckFrame(&pw, &got, l.self, l.peer); err != nil {
		return err
	}
	for off := 0; off < len(dst); {
		end := min(off+SealRecord, len(dst))
		rec := c.in[:end-off+tagSize]
		if err := l.readFull(i, rec, spin); err != nil {
			return s.wrap(err, "receiving "+want.Describe())
		}
		// Opened in place into dst (GCM clears what it wrote when the tag
		// does not match: no unauthenticated byte is left there).
		if _, err := c.recv.Open(dst[off:off], nonce(c.got.Load()), rec, nil); err != nil {
			return s.tampered(i, "receiving "+want.Describe())
		}
		c.got.Add(1)
		off = end
	}
	return nil
}

// peekOpen opens the sealed header at the front of connection i's queue
// without consuming it, given the peeked bytes b.
func (s *sealedLink) peekOpen(i int, b []byte) (wire.Header, bool) {
	var hb [wire.HeaderSize]byte
	if _, err := s.sc[i].recv.Open(hb[:0], nonce(s.sc[i].got.Load()), b[:hdrRecord], nil); err != nil {
		return wire.Header{}, false
	}
	h, err := wire.Decode(hb[:])
	return h, err == nil
}

// Peek opens the waiting frame's sealed header on the first connection
// without consuming it (transport.Peeker). Bytes there that do not open are
// reported as a failed link: the receive says why.
func (s *sealedLink) Peek() (wire.Header, bool) {
	l := s.l
	select {
	case <-l.closed:
		return wire.Header{Kind: wire.KindAbort}, true
	default:
	}
	if cap(s.taken) < hdrRecord {
		s.taken = make([]byte, 0, hdrRecord)
	}
	failed := false
	if len(s.taken) < hdrRecord {
		l.raw[0].Read(func(fd uintptr) bool {
			b := s.taken[len(s.taken):hdrRecord]
			n, err := syscall.Read(int(fd), b)
			switch {
			case n > 0:
				s.taken = s.taken[:len(s.taken)+n]
			case err == nil:
				failed = true // the peer closed
			case err != syscall.EAGAIN && err != syscall.EINTR:
				failed = true
			}
			return true
		})
	}
	if failed {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	if len(s.taken) < hdrRecord {
		return wire.Header{}, false
	}
	h, ok := s.peekOpen(0, s.taken)
	if !ok {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	return h, true
}

// Failure is the plain link's (transport.Link), with the peer's abort frame
// recognised only when it opens under the connection's next counter (one
// whose header Peek already took is left to the receive, which reads it).
func (s *sealedLink) Failure() error {
	l := s.l
	select {
	case <-l.closed:
		return transport.Aborted(l.self, l.peer)
	default:
	}
	var ended error
	buf := make([]byte, hdrRecord+wire.MaxAbortReason+tagSize)
	for i := range l.conns {
		n, err := 0, error(nil)
		if cerr := l.raw[i].Control(func(fd uintptr) {
			n, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		}); cerr != nil {
			err = cerr
		}
		switch {
		case n >= hdrRecord:
			// a frame boundary only if a receive is not halfway through a
			// frame: other bytes do not open under the next counter
			h, ok := s.peekOpen(i, buf[:n])
			if r := int(min(h.Len, wire.MaxAbortReason)); ok && h.Kind == wire.KindAbort && n >= hdrRecord+r+tagSize {
				reason, oerr := s.sc[i].recv.Open(nil, nonce(s.sc[i].got.Load()+1), buf[hdrRecord:hdrRecord+r+tagSize], nil)
				if oerr == nil {
					return transport.PeerFailed(l.self, l.peer, string(reason))
				}
			}
		case n > 0 || err == syscall.EAGAIN || err == syscall.EINTR:
		case err == nil:
			ended = transport.PeerClosed(l.self, l.peer, "connection closed by peer")
		case ended == nil:
			ended = transport.PeerClosed(l.self, l.peer, err.Error())
		}
	}
	return ended
}
