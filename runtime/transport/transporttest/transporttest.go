// Package transporttest is a conformance suite for transport.Link, in the
// manner of testing/fstest: a transport's tests hand it a way to make a
// connected pair, and it checks what every Link promises (frame order and
// contents at every size, header checks, deadlines, abort reasons, peer
// close, the peer's verdict winning over a timeout, Buffered, and the optional Lender and Prober capabilities).
package transporttest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gocl/runtime/status"
	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Pair makes two connected ends: a is rank 0's link to rank 1, b rank 1's
// link to rank 0. The suite closes both.
type Pair func(t *testing.T) (a, b transport.Link)

// Sizes are the payload sizes every transport must carry; they straddle the
// usual protocol and striping thresholds.
var Sizes = []int{0, 1, 3, 4, 7, 8, 63, 64, 100, 1000, 1975, 1976, 1977, 2048, 4095, 4097,
	32 << 10, 64<<10 + 3, 256<<10 + 1, 1 << 20, 2<<20 + 5, 5<<20 + 7}

func hdr(step int) *wire.Header {
	return &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Dtype: 0, Seq: 7, Count: 1, Step: uint32(step)}
}

func fill(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = byte(v >> (8 * (j - i)))
		}
	}
	return b
}

// Run runs the whole suite.
func Run(t *testing.T, pair Pair) {
	t.Run("Order", func(t *testing.T) { testOrder(t, pair) })
	t.Run("Stress", func(t *testing.T) { testStress(t, pair) })
	t.Run("Mismatch", func(t *testing.T) { testMismatch(t, pair) })
	t.Run("Deadline", func(t *testing.T) { testDeadline(t, pair) })
	t.Run("AbortReason", func(t *testing.T) { testAbort(t, pair) })
	t.Run("Failure", func(t *testing.T) { testFailure(t, pair) })
	t.Run("VerdictBeatsTimeout", func(t *testing.T) { testVerdict(t, pair) })
	t.Run("PeerClose", func(t *testing.T) { testPeerClose(t, pair) })
	t.Run("LocalClose", func(t *testing.T) { testLocalClose(t, pair) })
	t.Run("Buffered", func(t *testing.T) { testBuffered(t, pair) })
	t.Run("Lender", func(t *testing.T) { testLender(t, pair) })
	t.Run("Prober", func(t *testing.T) { testProber(t, pair) })
	t.Run("PeekWhileSending", func(t *testing.T) { testPeekWhileSending(t, pair) })
	t.Run("Counted", func(t *testing.T) { testCounted(t, pair) })
	t.Run("PieceReceiver", func(t *testing.T) { testPieceReceiver(t, pair) })
	t.Run("TrySender", func(t *testing.T) { testTrySender(t, pair) })
	t.Run("TrySenderAbandon", func(t *testing.T) { testTrySenderAbandon(t, pair) })
	t.Run("SharedDeadline", func(t *testing.T) { testSharedDeadline(t, pair) })
}

// TrySender: TrySend never waits for the receiver, even for frames far
// larger than any kernel buffer; Finish (on another goroutine, as the
// primitives' sender runs it) completes them; every frame arrives whole and
// in order, among frames sent by plain Send.
// A link that shares the communicator's Deadline (transport.DeadlineSharer)
// moves frames under it, a wait that has to sleep times out at the shared
// timeout, and SetDeadline gives the link its own deadline back.
func testSharedDeadline(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	ds, ok := b.(transport.DeadlineSharer)
	if !ok {
		t.Skipf("%s is not a transport.DeadlineSharer", b.Name())
	}
	var d transport.Deadline
	ds.ShareDeadline(&d)
	h := &wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Count: 2}
	for range 100 {
		d.Arm(time.Minute)
		if err := a.Send(h, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		if err := b.RecvInto(h, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	d.Arm(50 * time.Millisecond)
	start := time.Now()
	err := b.RecvInto(h, make([]byte, 8))
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindTimeout {
		t.Fatalf("receive with nothing sent and a shared 50 ms deadline: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Fatalf("timed out after %v, want about 50 ms", took)
	}
	if d.UnixNano() == 0 {
		t.Fatal("the timed-out wait did not take its deadline from the shared Deadline")
	}
	b.SetDeadline(time.Now().Add(-time.Second)) // the link's own, already passed
	d.Arm(time.Minute)
	err = b.RecvInto(h, make([]byte, 8))
	if e := transport.ErrorOf(err); e == nil || e.Kind != transport.KindTimeout {
		t.Fatalf("after SetDeadline in the past: %v, want a timeout (the link's own deadline, not the shared one)", err)
	}
}

func testTrySender(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	ts, ok := a.(transport.TrySender)
	if !ok {
		t.Skipf("%s is not a transport.TrySender", a.Name())
	}
	r := rand.New(rand.NewPCG(7, 8))
	sizes := append(slices.Clone(Sizes), 16<<20+9)
	for i, n := range sizes {
		m := fill(r, n)
		start := time.Now()
		done, err := ts.TrySend(hdr(i), m)
		if err != nil {
			t.Fatalf("TrySend(%d bytes): %v", n, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("TrySend(%d bytes) waited %v for a receiver", n, d)
		}
		fin := goSend(func() error {
			if !done {
				if err := ts.Finish(); err != nil {
					return err
				}
			}
			return a.Send(hdr(1000+i), m[:min(n, 100)]) // a plain frame behind it
		})
		got := make([]byte, n)
		if err := b.RecvInto(hdr(i), got); err != nil {
			t.Fatalf("receiving the %d-byte frame TrySend began (done %v): %v", n, done, err)
		}
		if !bytes.Equal(got, m) {
			t.Fatalf("the %d-byte frame TrySend began (done %v) arrived changed", n, done)
		}
		tail := make([]byte, min(n, 100))
		if err := b.RecvInto(hdr(1000+i), tail); err != nil {
			t.Fatalf("the frame after a %d-byte TrySend: %v", n, err)
		}
		if !bytes.Equal(tail, m[:len(tail)]) {
			t.Fatalf("the frame after a %d-byte TrySend arrived changed", n)
		}
		if err := <-fin; err != nil {
			t.Fatal(err)
		}
	}
}

// TrySenderAbandon: a frame begun and given up closes the link; the peer's
// receive fails at once instead of waiting for a rest that never comes.
func testTrySenderAbandon(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	ts, ok := a.(transport.TrySender)
	if !ok {
		t.Skipf("%s is not a transport.TrySender", a.Name())
	}
	m := make([]byte, 16<<20)
	done, err := ts.TrySend(hdr(1), m)
	if err != nil || done {
		t.Fatalf("TrySend of 16 MiB with no receiver: done %v, %v; want a frame begun", done, err)
	}
	ts.Abandon()
	got := goSend(func() error { return b.RecvInto(hdr(1), make([]byte, len(m))) })
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("the peer received a frame that was abandoned")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer still waits 5 s after the frame was abandoned")
	}
	if err := a.Send(hdr(2), []byte{1}); err == nil {
		t.Fatal("Send on a link whose frame was abandoned succeeded")
	}
}

// PieceReceiver: RecvPieces covers every frame with consecutive pieces, in
// order, each a multiple of 64 bytes but the last, holding the frame's
// bytes.
func testPieceReceiver(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	s, ok := b.(transport.PieceReceiver)
	if !ok {
		t.Skipf("%s is not a transport.PieceReceiver", b.Name())
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i, n := range Sizes {
		if n == 0 || testing.Short() && n > 3<<20 {
			continue
		}
		m := fill(r, n)
		done := goSend(func() error { return a.Send(hdr(i), m) })
		want := hdr(i)
		want.Len = uint64(n)
		got := make([]byte, 0, n)
		err := s.RecvPieces(want, func(off int, p []byte) {
			if off != len(got) {
				t.Errorf("%d bytes: piece at %d, want %d", n, off, len(got))
			}
			if off+len(p) < n && len(p)%64 != 0 {
				t.Errorf("%d bytes: inner piece of %d bytes", n, len(p))
			}
			got = append(got, p...)
		})
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%d bytes: send: %v", n, err)
		}
		if !bytes.Equal(got, m) {
			t.Fatalf("%d bytes: pieces differ from the frame", n)
		}
	}
}

func open(t *testing.T, pair Pair) (a, b transport.Link) {
	a, b = pair(t)
	t.Cleanup(func() { a.Close(); b.Close() })
	dl := time.Now().Add(30 * time.Second)
	a.SetDeadline(dl)
	b.SetDeadline(dl)
	return a, b
}

// goSend sends on its own goroutine (inproc Sends wait for the receiver).
func goSend(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() {
		var err error
		defer func() { ch <- err }()
		defer status.Catch(&err)
		err = f()
	}()
	return ch
}

// Order: frames of every size arrive whole and in order, both ways at once,
// through RecvInto and RecvWith alike.
func testOrder(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	r := rand.New(rand.NewPCG(1, 2))
	var msgs [][]byte
	for _, n := range Sizes {
		if testing.Short() && n > 3<<20 {
			continue
		}
		msgs = append(msgs, fill(r, n))
	}
	one := func(tx, rx transport.Link) error {
		done := goSend(func() error {
			for i, m := range msgs {
				if err := tx.Send(hdr(i), m); err != nil {
					return err
				}
			}
			return nil
		})
		for i, m := range msgs {
			if i%2 == 0 {
				got := make([]byte, len(m))
				if err := rx.RecvInto(hdr(i), got); err != nil {
					return err
				}
				if !bytes.Equal(got, m) {
					return fmt.Errorf("frame %d (%d bytes) corrupted via RecvInto", i, len(m))
				}
			} else {
				h := hdr(i)
				h.Len = uint64(len(m))
				var ok bool
				if err := rx.RecvWith(h, func(p []byte) { ok = bytes.Equal(p, m) }); err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("frame %d (%d bytes) corrupted via RecvWith", i, len(m))
				}
			}
		}
		return <-done
	}
	errs := make(chan error, 2)
	go func() { errs <- one(a, b) }()
	go func() { errs <- one(b, a) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Stress: many frames of random sizes, enough to wrap every FIFO many times.
func testStress(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	r := rand.New(rand.NewPCG(3, 4))
	frames := 3000
	if testing.Short() {
		frames = 300
	}
	sizes := make([]int, frames)
	for i := range sizes {
		switch r.IntN(4) {
		case 0:
			sizes[i] = r.IntN(64)
		case 1:
			sizes[i] = r.IntN(4096)
		case 2:
			sizes[i] = r.IntN(300 << 10)
		default:
			sizes[i] = r.IntN(16)
		}
	}
	pattern := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*131 + j*7)
		}
		return b
	}
	done := goSend(func() error {
		for i, n := range sizes {
			if err := a.Send(hdr(i), pattern(i, n)); err != nil {
				return err
			}
		}
		return nil
	})
	for i, n := range sizes {
		got := make([]byte, n)
		if err := b.RecvInto(hdr(i), got); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, pattern(i, n)) {
			t.Fatalf("frame %d (%d bytes) corrupted", i, n)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Mismatch: a frame that differs from what the receiver expects is an
// error naming both calls, never a hang or silent acceptance.
func testMismatch(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	done := goSend(func() error { return a.Send(hdr(0), make([]byte, 16)) })
	err := b.RecvInto(hdr(0), make([]byte, 8))
	if err == nil || status.CodeOf(err) != status.RemoteError {
		t.Fatalf("16 bytes received as 8: want a remote error, got %v", err)
	}
	var m *wire.MismatchError
	if !errors.As(err, &m) {
		t.Errorf("want a wire.MismatchError in the chain, got %v", err)
	}
	b.Close()
	<-done
}

// Deadline: a receive with nothing coming, and a send nobody reads, fail with
// goclTimeout soon after the deadline.
func testDeadline(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	b.SetDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	err := b.RecvInto(hdr(0), make([]byte, 8))
	if status.CodeOf(err) != status.Timeout {
		t.Fatalf("receive: want a timeout, got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("receive timed out after %v, deadline was 200ms", d)
	}
	a.SetDeadline(time.Now().Add(200 * time.Millisecond))
	big := make([]byte, 64<<20) // more than any transport buffers
	start = time.Now()
	err = a.Send(hdr(0), big)
	if status.CodeOf(err) != status.Timeout {
		t.Fatalf("send of 64 MiB nobody reads: want a timeout, got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("send timed out after %v, deadline was 200ms", d)
	}
}

// AbortReason: the peer's blocked receive fails with the reason.
func testAbort(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	errc := make(chan error, 1)
	go func() { errc <- b.RecvInto(hdr(0), make([]byte, 8)) }()
	time.Sleep(50 * time.Millisecond)
	a.Abort("root cause: rank 0 ran out of disk")
	select {
	case err := <-errc:
		if status.CodeOf(err) != status.RemoteError || !strings.Contains(err.Error(), "ran out of disk") {
			t.Fatalf("want a remote error carrying the abort reason, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's receive still waits 5 s after the abort")
	}
	if err := a.Send(hdr(0), []byte{1}); status.CodeOf(err) != status.RemoteError {
		t.Errorf("send on an aborted link: want a remote error, got %v", err)
	}
}

// VerdictBeatsTimeout: once the peer has aborted, this end's waits report
// the peer's verdict (the root it named, with its reason), never a timeout
// or a bare lost connection, even when the deadline has passed already or
// the wait was a send the peer no longer reads: a rank whose deadline
// races its neighbour's abort still names the root cause. Every transport
// reports the verdict through Failure without waiting.
func testVerdict(t *testing.T, pair Pair) {
	// b (rank 1) fails because it timed out waiting for rank 2
	reason := transport.AbortReason(1, transport.TimedOut(1, 2, "waiting for the disk of rank 2"))
	check := func(t *testing.T, what string, err error) {
		t.Helper()
		e := transport.ErrorOf(err)
		if e == nil || e.Peer != 2 || e.Via != 1 || !strings.Contains(err.Error(), "disk of rank 2") {
			t.Fatalf("%s after the peer aborted naming rank 2: want the peer's verdict (rank 2, reported by rank 1), got %v", what, err)
		}
	}
	verdict := func(t *testing.T, a transport.Link) {
		t.Helper()
		f := a
		deadline := time.Now().Add(5 * time.Second)
		for f.Failure() == nil {
			if time.Now().After(deadline) {
				t.Fatal("Failure stays nil 5 s after the peer aborted")
			}
			time.Sleep(time.Millisecond)
		}
		check(t, "Failure", f.Failure())
	}
	t.Run("DeadlinePassed", func(t *testing.T) {
		a, b := open(t, pair)
		b.Abort(reason)
		verdict(t, a)
		a.SetDeadline(time.Now().Add(-time.Second))
		check(t, "a receive past its deadline", a.RecvInto(hdr(0), make([]byte, 8)))
		check(t, "a send past its deadline", a.Send(hdr(0), make([]byte, 64<<20)))
	})
	t.Run("BlockedSend", func(t *testing.T) {
		a, b := open(t, pair)
		done := goSend(func() error { return a.Send(hdr(0), make([]byte, 64<<20)) }) // more than any transport buffers
		time.Sleep(50 * time.Millisecond)
		b.Abort(reason)
		select {
		case err := <-done:
			check(t, "a send blocked on the peer", err)
		case <-time.After(5 * time.Second):
			t.Fatal("a send blocked on the peer still waits 5 s after the peer aborted")
		}
		verdict(t, a)
	})
}

// Failure: nil on both ends of a working link (a frame crossed it), this
// end's Aborted error at once after Close, and a failure on the peer soon
// after, without a call that would notice it.
func testFailure(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	go a.Send(hdr(0), []byte("12345678"))
	if err := b.RecvInto(hdr(0), make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := a.Failure(); err != nil {
		t.Fatalf("Failure of a working link: %v", err)
	}
	if err := b.Failure(); err != nil {
		t.Fatalf("Failure of a working link: %v", err)
	}
	a.Close()
	if e := transport.ErrorOf(a.Failure()); e == nil || e.Kind != transport.KindAborted {
		t.Fatalf("Failure after Close: want this end's Aborted error, got %v", a.Failure())
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Failure() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the peer's Failure stays nil 5 s after this end closed")
		}
		time.Sleep(time.Millisecond)
	}
	if status.CodeOf(b.Failure()) != status.RemoteError {
		t.Fatalf("the peer's Failure after Close: want a remote error, got %v", b.Failure())
	}
}

// PeerClose: frames sent before the peer closed are still delivered, then
// receives fail promptly with a remote error.
func testPeerClose(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	msg := []byte("last words")
	if a.Buffered(len(msg)) {
		if err := a.Send(hdr(0), msg); err != nil {
			t.Fatal(err)
		}
		a.Close()
		got := make([]byte, len(msg))
		if err := b.RecvInto(hdr(0), got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("a frame sent before close: got %q, %v", got, err)
		}
	} else {
		a.Close()
	}
	start := time.Now()
	err := b.RecvInto(hdr(1), make([]byte, 8))
	if status.CodeOf(err) != status.RemoteError {
		t.Fatalf("receive from a closed peer: want a remote error, got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to notice the closed peer", d)
	}
}

// LocalClose: Close on this end fails this end's blocked calls.
func testLocalClose(t *testing.T, pair Pair) {
	_, b := open(t, pair)
	errc := make(chan error, 1)
	go func() { errc <- b.RecvInto(hdr(0), make([]byte, 8)) }()
	time.Sleep(50 * time.Millisecond)
	b.Close()
	select {
	case err := <-errc:
		if status.CodeOf(err) != status.RemoteError {
			t.Fatalf("want a remote error, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a receive blocked on a closed link still waits after 5 s")
	}
}

// Buffered: what the link says it buffers, it does: sends that total n bytes
// return while the peer receives nothing.
func testBuffered(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	var n int
	for n = 1; n <= 1<<20 && a.Buffered(2*n); n *= 2 {
	}
	if !a.Buffered(n) {
		return // buffers nothing (inproc)
	}
	// n bytes in frames of 8 bytes and of n/4 bytes: both must fit.
	var frames []int
	for sum := 0; sum+8 <= n/2; sum += 8 {
		frames = append(frames, 8)
	}
	frames = frames[:min(len(frames), 32)]
	rest := n
	for _, f := range frames {
		rest -= f
	}
	for rest > 0 {
		f := min(rest, max(n/4, 1))
		frames = append(frames, f)
		rest -= f
	}
	done := goSend(func() error {
		for i, f := range frames {
			if err := a.Send(hdr(i), make([]byte, f)); err != nil {
				return err
			}
		}
		return nil
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Buffered(%d) is true but %d frames totalling it did not go out without a receiver", n, len(frames))
	}
	for i, f := range frames {
		if err := b.RecvInto(hdr(i), make([]byte, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// Lender: a lent slot holds what the producer wrote when the peer reads it,
// interleaved with plain sends, and across many reuses of the memory.
func testLender(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	ln, ok := a.(transport.Lender)
	if !ok {
		t.Skip("not a Lender")
	}
	r := rand.New(rand.NewPCG(5, 6))
	frames := 200
	if testing.Short() {
		frames = 30
	}
	var mu sync.Mutex
	sent := make([][]byte, frames)
	done := goSend(func() error {
		for i := range frames {
			n := 1 + r.IntN(512<<10)
			m := fill(r, n)
			mu.Lock()
			sent[i] = m
			mu.Unlock()
			if i%3 == 2 {
				if err := a.Send(hdr(i), m); err != nil {
					return err
				}
				continue
			}
			slot, ok, err := ln.Lend(n)
			if err != nil {
				return err
			}
			if !ok {
				if err := a.Send(hdr(i), m); err != nil {
					return err
				}
				continue
			}
			if len(slot) != n {
				return fmt.Errorf("Lend(%d) returned %d bytes", n, len(slot))
			}
			copy(slot, m)
			if err := ln.Commit(hdr(i)); err != nil {
				return err
			}
		}
		return nil
	})
	for i := range frames {
		h := hdr(i)
		var got []byte
		// The receiver learns the size from the sender's record.
		for {
			mu.Lock()
			got = sent[i]
			mu.Unlock()
			if got != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		h.Len = uint64(len(got))
		var same bool
		if err := b.RecvWith(h, func(p []byte) { same = bytes.Equal(p, got) }); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !same {
			t.Fatalf("frame %d (%d bytes): lent slot corrupted", i, len(got))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A lend given up: Commit then has nothing to send.
	if _, ok, err := ln.Lend(64); err == nil && ok {
		ln.Cancel()
		if err := ln.Commit(hdr(0)); err == nil {
			t.Error("Commit after Cancel succeeded")
		}
	}
	// Closing with a slot lent must neither crash nor hang, and Commit then fails.
	if slot, ok, err := ln.Lend(4096); err == nil && ok {
		slot[0] = 1
		a.Close()
		slot[len(slot)-1] = 2 // still mapped until Commit
		if err := ln.Commit(hdr(0)); err == nil {
			t.Error("Commit after Close succeeded")
		}
	}
}

// Prober: Pending is false with nothing sent, true once a frame waits (or
// the link failed), and a receive then does not wait.
func testProber(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	p, ok := b.(transport.Prober)
	if !ok {
		t.Skip("not a Prober")
	}
	if p.Pending() {
		t.Fatal("Pending before anything was sent")
	}
	done := goSend(func() error { return a.Send(hdr(0), []byte("x")) })
	deadline := time.Now().Add(5 * time.Second)
	for !p.Pending() {
		if time.Now().After(deadline) {
			t.Fatal("Pending stays false with a frame sent")
		}
		time.Sleep(time.Millisecond)
	}
	if err := b.RecvInto(hdr(0), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p.Pending() {
		t.Fatal("Pending after the only frame was received")
	}
	a.Close()
	deadline = time.Now().Add(5 * time.Second)
	for !p.Pending() {
		if time.Now().After(deadline) {
			t.Fatal("Pending stays false after the peer closed (a receive would fail at once)")
		}
		time.Sleep(time.Millisecond)
	}
}

// testPeekWhileSending: on an open link, a Peek that races the peer's Send
// shows that frame's header or nothing, never a closed link's KindAbort
// (a receive from any source would take a collective's frame for a send).
func testPeekWhileSending(t *testing.T, pair Pair) {
	const frames = 2000
	a, b := open(t, pair)
	pk, ok := b.(transport.Peeker)
	if !ok {
		t.Skip("not a Peeker")
	}
	done := goSend(func() error {
		for i := range frames {
			if err := a.Send(hdr(i), []byte{byte(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	buf := make([]byte, 1)
	for i := range frames {
		for {
			h, ok := pk.Peek()
			if !ok {
				runtime.Gosched()
				continue
			}
			if h.Kind != wire.KindColl || h.Step != uint32(i) {
				t.Fatalf("frame %d: Peek shows %s on an open link, want the frame's header", i, h.Describe())
			}
			break
		}
		if err := b.RecvInto(hdr(i), buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// testCounted: a Counted link counts the payload bytes each way, and a
// receive that sleeps shows as a wait for the peer's frame until it ends.
func testCounted(t *testing.T, pair Pair) {
	a, b := open(t, pair)
	ca, ok := a.(transport.Counted)
	if !ok {
		t.Skip("not Counted")
	}
	cb := b.(transport.Counted)
	if _, _, waiting := transport.Longest(cb.Stats()); waiting {
		t.Fatal("a link that did nothing is waiting")
	}
	got := make(chan error, 1)
	start := time.Now()
	const n = transport.PublishEvery + 1000
	go func() { got <- b.RecvInto(hdr(0), make([]byte, n)) }()
	var since time.Time
	for end := time.Now().Add(5 * time.Second); ; {
		k, s, waiting := transport.Longest(cb.Stats())
		if waiting {
			if k != transport.WaitRecv {
				t.Fatalf("a receive waits for %v, want recv", k)
			}
			since = s
			break
		}
		if time.Now().After(end) {
			t.Fatal("a receive with no frame coming never shows as waiting")
		}
		time.Sleep(time.Millisecond)
	}
	if since.Before(start.Add(-time.Second)) || since.After(time.Now()) {
		t.Fatalf("the wait began at %v, the receive at %v", since, start)
	}
	if err := a.Send(hdr(0), make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, _, waiting := transport.Longest(cb.Stats()); waiting {
		t.Fatal("the receive ended but the link still waits")
	}
	s, _ := transport.Totals(ca.Stats())
	_, r := transport.Totals(cb.Stats())
	if s != n || r != n {
		t.Fatalf("sent %d, received %d: want %d each (a frame of at least PublishEvery is published at once)", s, r, n)
	}
}
