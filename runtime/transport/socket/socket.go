// Package socket is the TCP transport: one or more connections per peer pair
// (GOCL_SOCKET_NTHREADS × GOCL_NSOCKS_PERTHREAD); large messages are striped
// over all of them so several streams carry one message in parallel.
package socket

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"gocl/runtime/host"
	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Chunk is the ring chunk (GOCL_BUFFSIZE) a communicator uses when any of
// its links is a socket and GOCL_BUFFSIZE is not set: a ring step waits for
// its chunk to cross the link, so every chunk costs a round trip and lets
// the TCP pipe drain, so larger chunks carry more (bench/CALLPATH.md,
// "Socket chunks and polling").
const Chunk = 4 << 20

// ChunkFor is the chunk for a link between hosts of gbs GB/s (GOCL_NET_GBPS,
// or the NICs' speed): what the link carries in about 2 ms, a power of two
// from 256 KiB up to Chunk. On a slow link a whole 4 MiB chunk is tens of
// ms of store-and-forward per ring step; smaller ones keep every link of
// the ring busy. 4 hosts on 1 Gbit/s links (bench/multihost.py, gocl
// alone, 256 KiB-16 MiB): 256 KiB chunks ran all-reduce at 0.95-0.98 of
// the link and all-gather at 0.97-1.00; 1 MiB at 0.82-0.95 and 0.71-0.98;
// 4 MiB at 0.51-0.96 and 0.54-0.95.
func ChunkFor(gbs float64) int {
	c := 256 << 10
	for c < Chunk && float64(2*c) <= gbs*1e9*2e-3 {
		c *= 2
	}
	return c
}

// StripeMin is the smallest payload split over several connections; below it
// the extra frames and goroutines cost more than they gain.
const StripeMin = 256 << 10

type link struct {
	stats      transport.Stats // the live view's counts (transport.Counted)
	conns      []net.Conn
	raw        []syscall.RawConn
	writeMu    []sync.Mutex // per connection: frames never interleave
	self, peer int
	hdr        [][wire.HeaderSize]byte // per connection, for the receiver
	sendHdr    [][wire.HeaderSize]byte // per connection, for the sender
	scratch    []byte                  // RecvWith's buffer
	// deadline is the link's own (SetDeadline) or the communicator's
	// (ShareDeadline): each connection takes it when it next reads or
	// writes, so arming a call costs nothing per link and only the links
	// a call uses are touched. rdl and wdl are what each connection holds
	// (Unix ns; -1: unknown).
	deadline  transport.LinkDeadline
	rdl, wdl  []int64
	started   started // the frame TrySend began and Finish ends
	closeOnce sync.Once
	closed    chan struct{}
}

// New wraps established, authenticated connections to peer (the same count
// and order on both sides) into a Link.
func New(conns []net.Conn, self, peer int) transport.Link {
	raw := make([]syscall.RawConn, len(conns))
	for i, c := range conns {
		raw[i], _ = c.(syscall.Conn).SyscallConn()
	}
	l := &link{raw: raw,
		conns: conns, self: self, peer: peer, writeMu: make([]sync.Mutex, len(conns)),
		hdr:     make([][wire.HeaderSize]byte, len(conns)),
		sendHdr: make([][wire.HeaderSize]byte, len(conns)),
		rdl:     make([]int64, len(conns)), wdl: make([]int64, len(conns)),
		closed: make(chan struct{}),
	}
	for i := range conns {
		l.rdl[i], l.wdl[i] = -1, -1
	}
	return l
}

// Stats implements transport.Counted.
func (l *link) Stats() []*transport.Stats { return []*transport.Stats{&l.stats} }

func (l *link) Name() string { return "socket" }

// InlineMax is the largest frame sent on the caller's goroutine: far below
// the kernel's default socket buffer, so the write cannot wait on the peer.
const InlineMax = 32 << 10

func (l *link) Buffered(n int) bool { return n <= InlineMax }

// SpinMax is the largest frame a receiver polls for (its header, then its
// payload) before it parks on the netpoller. A larger one streams in for far
// longer than a poll can bridge, and the polling reads take the core from
// the kernel's copies that carry it (bench/CALLPATH.md, "Socket chunks and
// polling").
const SpinMax = InlineMax

func (l *link) SetDeadline(t time.Time) {
	l.deadline.Set(t)
}

// ShareDeadline takes the communicator's deadline, armed once per call
// (transport.DeadlineSharer), until the next SetDeadline.
func (l *link) ShareDeadline(d *transport.Deadline) { l.deadline.Share(d) }

// readBy and writeBy give connection i the deadline before it reads or
// writes (each direction of a connection has one goroutine at a time).
func (l *link) readBy(i int) {
	if ns := l.deadline.Get().UnixNano(); ns != l.rdl[i] {
		l.rdl[i] = ns
		l.conns[i].SetReadDeadline(unixTime(ns))
	}
}

func (l *link) writeBy(i int) {
	if ns := l.deadline.Get().UnixNano(); ns != l.wdl[i] {
		l.wdl[i] = ns
		l.conns[i].SetWriteDeadline(unixTime(ns))
	}
}

// unixTime is ns as a deadline (0: none).
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Abort writes an abort frame with the reason on every connection whose
// writer is idle (a frame half-written would garble it), then closes.
func (l *link) Abort(reason string) {
	if len(reason) > wire.MaxAbortReason {
		reason = reason[:wire.MaxAbortReason]
	}
	select {
	case <-l.closed:
		return
	default:
	}
	h := wire.Header{Kind: wire.KindAbort, Len: uint64(len(reason))}
	var hb [wire.HeaderSize]byte
	h.Encode(hb[:])
	for i, c := range l.conns {
		if l.writeMu[i].TryLock() {
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			(&net.Buffers{hb[:], []byte(reason)}).WriteTo(c)
			l.writeMu[i].Unlock()
		}
	}
	l.Close()
}

func (l *link) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		for _, c := range l.conns {
			c.Close()
		}
	})
	return nil
}

// parts splits n bytes over the connections; both sides compute the same.
func (l *link) parts(n int) int {
	if n < StripeMin || len(l.conns) == 1 {
		return 1
	}
	return len(l.conns)
}

func span(n, parts, i int) (int, int) {
	per := (n + parts - 1) / parts
	lo := min(i*per, n)
	return lo, min(lo+per, n)
}

// each runs f for every part, part 0 on the calling goroutine.
func each(parts int, f func(i int) error) error {
	if parts == 1 {
		return f(0)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := 1; i < parts; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer status.Catch(&errs[i])
			errs[i] = f(i)
		}()
	}
	errs[0] = f(0)
	wg.Wait()
	return errors.Join(errs...)
}

func (l *link) Send(h *wire.Header, data []byte) error {
	transport.RaceRelease()
	parts := l.parts(len(data))
	err := each(parts, func(i int) error {
		lo, hi := span(len(data), parts, i)
		ph := *h
		ph.Len = uint64(hi - lo)
		ph.Encode(l.sendHdr[i][:])
		bufs := net.Buffers{l.sendHdr[i][:], data[lo:hi]}
		l.writeMu[i].Lock()
		l.writeBy(i)
		_, err := bufs.WriteTo(l.conns[i])
		l.writeMu[i].Unlock()
		if err != nil {
			return l.wrap(err, "sending "+h.Describe())
		}
		return nil
	})
	h.Len = uint64(len(data))
	if err = first(err); err == nil {
		l.stats.CountSent(len(data))
	}
	return err
}

// started is a frame TrySend began: its header, its payload, how much of
// both the kernel took (sent; -1: none, the frame goes whole by Send) and,
// while sent >= 0, connection 0's write lock held for the rest.
type started struct {
	h    wire.Header
	data []byte
	sent int
}

var _ transport.TrySender = (*link)(nil)

// TrySend writes the frame on connection 0 with one non-blocking writev
// (the fd is non-blocking; the call does not park), so the caller goes on
// whether the kernel took it all or not. A frame that would be striped is
// left whole to Finish.
func (l *link) TrySend(h *wire.Header, data []byte) (bool, error) {
	h.Len = uint64(len(data))
	l.started = started{h: *h, data: data, sent: -1}
	if l.parts(len(data)) > 1 {
		return false, nil
	}
	transport.RaceRelease()
	l.writeMu[0].Lock()
	h.Encode(l.sendHdr[0][:])
	iov := [2]syscall.Iovec{{Base: &l.sendHdr[0][0]}, {}}
	iov[0].SetLen(wire.HeaderSize)
	cnt := 1
	if len(data) > 0 {
		iov[1].Base, cnt = &data[0], 2
		iov[1].SetLen(len(data))
	}
	var n uintptr
	var errno syscall.Errno
	if err := l.raw[0].Write(func(fd uintptr) bool {
		n, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		return true
	}); err != nil {
		l.writeMu[0].Unlock()
		return false, l.wrap(err, "sending "+h.Describe())
	}
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		l.writeMu[0].Unlock()
		return false, nil
	case errno != 0:
		l.writeMu[0].Unlock()
		return false, l.wrap(errno, "sending "+h.Describe())
	case int(n) == wire.HeaderSize+len(data):
		l.writeMu[0].Unlock()
		l.stats.CountSent(len(data))
		return true, nil
	}
	l.stats.CountSent(len(data)) // Finish writes the rest, or Abandon closes the link
	l.started.sent = int(n)      // the lock stays held: the rest must follow
	return false, nil
}

// Finish sends what TrySend left: the whole frame, or its rest on
// connection 0, whose lock TrySend kept.
func (l *link) Finish() error {
	s := l.started
	l.started = started{}
	if s.sent < 0 {
		return l.Send(&s.h, s.data)
	}
	defer l.writeMu[0].Unlock()
	var bufs net.Buffers
	if s.sent < wire.HeaderSize {
		bufs = net.Buffers{l.sendHdr[0][s.sent:], s.data}
	} else {
		bufs = net.Buffers{s.data[s.sent-wire.HeaderSize:]}
	}
	l.writeBy(0)
	if _, err := bufs.WriteTo(l.conns[0]); err != nil {
		return l.wrap(err, "sending "+s.h.Describe())
	}
	return nil
}

// Abandon closes the link: a frame cut short would garble the stream. The
// close resets the connection (linger 0) so that the peer fails at once;
// a graceful one would first drain what the kernel holds of the frame,
// and a receiver that has the frame's first bytes would wait for its rest.
func (l *link) Abandon() {
	s := l.started
	l.started = started{}
	if s.sent >= 0 {
		if c, ok := l.conns[0].(interface{ SetLinger(int) error }); ok {
			c.SetLinger(0)
		}
		l.writeMu[0].Unlock()
	}
	l.Close()
}

func (l *link) RecvInto(want *wire.Header, dst []byte) error {
	want.Len = uint64(len(dst))
	parts := l.parts(len(dst))
	err := first(each(parts, func(i int) error {
		lo, hi := span(len(dst), parts, i)
		return l.recvPart(i, want, dst[lo:hi])
	}))
	if err == nil {
		l.stats.CountReceived(len(dst)) // here: the parts run at once
	}
	return err
}

func (l *link) RecvWith(want *wire.Header, use func([]byte)) error {
	n := int(want.Len)
	if cap(l.scratch) < n {
		l.scratch = make([]byte, n)
	}
	buf := l.scratch[:n]
	if err := l.RecvInto(want, buf); err != nil {
		return err
	}
	use(buf)
	return nil
}

// Pending reports whether the first connection, which carries the header of
// every frame (striped ones too), has bytes to read, or is closed: Recv would
// not wait. It peeks without consuming (transport.Prober).
func (l *link) Pending() bool {
	select {
	case <-l.closed:
		return true
	default:
	}
	var b [1]byte
	pending := false
	l.raw[0].Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// data, EOF (n == 0) or an error all end the wait; EAGAIN/EINTR: nothing yet
		pending = n > 0 || (err == nil && n == 0) || (err != nil && err != syscall.EAGAIN && err != syscall.EINTR)
		return true
	})
	return pending
}

// Peek reads the waiting frame's header on the first connection without
// consuming it (transport.Peeker).
func (l *link) Peek() (wire.Header, bool) {
	select {
	case <-l.closed:
		return wire.Header{Kind: wire.KindAbort}, true
	default:
	}
	var b [wire.HeaderSize]byte
	n, failed := 0, false
	l.raw[0].Read(func(fd uintptr) bool {
		var err error
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		failed = (err == nil && n == 0) || (err != nil && err != syscall.EAGAIN && err != syscall.EINTR)
		return true
	})
	if failed {
		return wire.Header{Kind: wire.KindAbort}, true
	}
	if n < wire.HeaderSize {
		return wire.Header{}, false
	}
	h, err := wire.Decode(b[:])
	if err != nil { // garbage: let the receive report it
		return wire.Header{Kind: wire.KindAbort}, true
	}
	return h, true
}

var _ transport.Peeker = (*link)(nil)

// Failure reports, without waiting or consuming anything, why the link can
// no longer be used (transport.Link): this end closed, the peer's abort
// frame at the front of a connection (its reason names the root cause), or
// a connection the peer ended. It peeks through Control, which a receive
// blocked on the same connection does not hold up.
func (l *link) Failure() error {
	select {
	case <-l.closed:
		return transport.Aborted(l.self, l.peer)
	default:
	}
	var ended error
	buf := make([]byte, wire.HeaderSize+wire.MaxAbortReason)
	for i := range l.conns {
		n, err := 0, error(nil)
		if cerr := l.raw[i].Control(func(fd uintptr) {
			n, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		}); cerr != nil {
			err = cerr
		}
		switch {
		case n >= wire.HeaderSize:
			// a frame boundary only if a receive is not halfway through a frame;
			// payload bytes fail Decode's magic and version checks
			h, derr := wire.Decode(buf[:wire.HeaderSize])
			if r := min(h.Len, wire.MaxAbortReason); derr == nil && h.Kind == wire.KindAbort && n >= wire.HeaderSize+int(r) {
				return transport.PeerFailed(l.self, l.peer, string(buf[wire.HeaderSize:wire.HeaderSize+int(r)]))
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

// readFull fills buf from connection i. With spin it polls the socket for a
// moment (host.Spin) before parking on the netpoller, whose deadline
// still applies, so a frame that arrives soon costs no goroutine wake-up.
// Without it, it parks as soon as the socket is empty: see SpinMax.
func (l *link) readFull(i int, buf []byte, spin bool) error {
	l.readBy(i)
	got := 0
	var rerr error
	// attempt reads until buf is full or the socket is empty: the netpoller
	// is edge-triggered, so waiting after a short read could miss an end
	// that came with the data (the peer's FIN or reset is no new edge) and
	// wait out the deadline for bytes that never come.
	attempt := func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf[got:])
			switch {
			case n > 0:
				if got += n; got == len(buf) {
					return true
				}
				continue
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				rerr = err
			default:
				rerr = io.EOF
			}
			return true
		}
	}
	parked := false // marked as waiting (the live view) once it parks
	for got < len(buf) && rerr == nil {
		err := l.raw[i].Read(func(fd uintptr) bool {
			done := false
			if !spin {
				done = attempt(fd)
			} else {
				done = host.Spin(func() bool { return attempt(fd) })
			}
			if !done && !parked {
				parked = true
				l.stats.BeginWait(transport.WaitRecv)
			}
			return done
		})
		if err != nil && rerr == nil {
			rerr = err
		}
	}
	if parked {
		l.stats.EndWait()
	}
	if rerr == io.EOF && got > 0 {
		rerr = io.ErrUnexpectedEOF
	}
	return rerr
}

// recvPart reads one frame from connection i into dst.
func (l *link) recvPart(i int, want *wire.Header, dst []byte) error {
	c := l.conns[i]
	spin := len(dst) <= SpinMax
	if err := l.readFull(i, l.hdr[i][:], spin); err != nil {
		return l.wrap(err, "waiting for "+want.Describe())
	}
	transport.RaceAcquire()
	got, err := wire.Decode(l.hdr[i][:])
	if err != nil {
		l.Close() // the stream is out of sync; nothing after this can be trusted
		return transport.PeerClosed(l.self, l.peer, err.Error())
	}
	if got.Kind == wire.KindAbort {
		reason := make([]byte, min(got.Len, wire.MaxAbortReason))
		n, rerr := io.ReadFull(c, reason)
		if rerr != nil {
			select {
			case <-l.closed: // this end failed meanwhile (revoked, aborted): its own cause names the root
				return transport.Aborted(l.self, l.peer)
			default:
			}
			if n == 0 {
				return transport.PeerFailed(l.self, l.peer, "it aborted (its reason did not arrive: "+rerr.Error()+")")
			}
		}
		return transport.PeerFailed(l.self, l.peer, string(reason[:n]))
	}
	pw := *want
	pw.Len = uint64(len(dst))
	if err := transport.CheckFrame(&pw, &got, l.self, l.peer); err != nil {
		return err
	}
	if err := l.readFull(i, dst, spin); err != nil {
		return l.wrap(err, "receiving "+want.Describe())
	}
	return nil
}

// wrap turns a socket error into the transport's vocabulary. The peer's
// verdict, when its abort frame is waiting, wins over the error this end saw
// (a deadline that passed, a reset after the peer closed with our frame
// unread): it names the root cause.
func (l *link) wrap(err error, what string) error { return l.wrapWith(l.Failure, err, what) }

// wrapWith is wrap with the link's Failure given (an encrypted link's
// recognises its peer's sealed abort frame).
func (l *link) wrapWith(failure func() error, err error, what string) error {
	if v := transport.ErrorOf(failure()); v != nil && v.Kind != transport.KindPeerClosed {
		return transport.NewError(*v)
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return transport.TimedOut(l.self, l.peer, what)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return transport.PeerClosed(l.self, l.peer, "connection closed by peer")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return transport.PeerClosed(l.self, l.peer, "connection reset")
	}
	return transport.PeerClosed(l.self, l.peer, err.Error())
}

// first keeps the first error of a join (the others are usually echoes),
// passing over parts that failed only because another part closed the link.
func first(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var closed error
		for _, e := range j.Unwrap() {
			if e == nil {
				continue
			}
			// a part that failed because another part closed the link is a
			// consequence: the other part's error names the cause
			if v := transport.ErrorOf(e); v != nil && v.Kind == transport.KindAborted {
				if closed == nil {
					closed = e
				}
				continue
			}
			return e
		}
		if closed != nil {
			return closed
		}
	}
	return err
}
