package bootstrap

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tap forwards one connection to target and records the bytes both ways.
func tap(t *testing.T, target string) (string, func() []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var seen bytes.Buffer
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		u, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer u.Close()
		rec := func(dst io.Writer, src io.Reader) {
			buf := make([]byte, 4096)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					mu.Lock()
					seen.Write(buf[:n])
					mu.Unlock()
					dst.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}
		go rec(u, c)
		rec(c, u)
	}()
	return ln.Addr().String(), func() []byte { mu.Lock(); defer mu.Unlock(); return bytes.Clone(seen.Bytes()) }
}

// Requests and replies on a rank's listener are sealed: a secret in a reply
// never crosses the wire in the clear, and altered bytes fail to open.
func TestSealedRequests(t *testing.T) {
	secret := bytes.Repeat([]byte{9}, 32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type answer struct{ Secret string }
	go Serve(ln, 0, secret, func(r Request) any { return answer{Secret: "the-new-communicators-secret:" + r.Kind} })
	addr, seen := tap(t, ln.Addr().String())
	var got answer
	if err := Ask(addr, secret, time.Now().Add(2*time.Second), NewRequest("shrink-decision", nil), &got); err != nil {
		t.Fatal(err)
	}
	if got.Secret != "the-new-communicators-secret:shrink-decision" {
		t.Fatalf("reply %+v", got)
	}
	time.Sleep(50 * time.Millisecond)
	if wire := seen(); bytes.Contains(wire, []byte("the-new-communicators-secret")) || bytes.Contains(wire, []byte("shrink-decision")) {
		t.Errorf("the request or reply crossed the wire in the clear: %q", wire)
	}
	// A tampered frame fails to open.
	key := bytes.Repeat([]byte{1}, 32)
	a, _ := newSealed(key, true)
	b, _ := newSealed(key, false)
	var frame bytes.Buffer
	if err := a.write(&frame, NewRequest("probe", 7)); err != nil {
		t.Fatal(err)
	}
	raw := frame.Bytes()
	raw[len(raw)-1] ^= 1
	var req Request
	if err := b.read(bytes.NewReader(raw), &req); err != errSealed {
		t.Errorf("a flipped bit: %v, want %v", err, errSealed)
	}
	// A replayed frame (the second message opened with the first's nonce) fails too.
	frame.Reset()
	a2, _ := newSealed(key, true)
	a2.write(&frame, NewRequest("probe", 1))
	first := bytes.Clone(frame.Bytes())
	b2, _ := newSealed(key, false)
	if err := b2.read(bytes.NewReader(first), &req); err != nil {
		t.Fatal(err)
	}
	if err := b2.read(bytes.NewReader(first), &req); err != errSealed {
		t.Errorf("a replayed frame: %v, want %v", err, errSealed)
	}
}
