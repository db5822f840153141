package bootstrap

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
)

func TestIDRoundTrip(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "::1"} {
		id, err := NewID(&net.TCPAddr{IP: net.ParseIP(ip), Port: 4242})
		if err != nil {
			t.Fatal(err)
		}
		a, err := id.Root()
		if err != nil || !a.IP.Equal(net.ParseIP(ip)) || a.Port != 4242 {
			t.Errorf("Root() = %v, %v", a, err)
		}
		other, _ := NewID(&net.TCPAddr{IP: net.ParseIP(ip), Port: 4242})
		if bytes.Equal(id.Secret(), other.Secret()) {
			t.Error("two ids share a secret")
		}
	}
	var zero ID
	if _, err := zero.Root(); err == nil || !strings.Contains(err.Error(), "not a gocl id") {
		t.Errorf("zero id: %v", err)
	}
}

func TestIfaceFilter(t *testing.T) {
	cases := []struct {
		spec, name string
		want       bool
	}{
		{"eth", "eth0", true}, {"eth", "ib0", false}, {"^docker,lo", "docker0", false},
		{"^docker,lo", "eth1", true}, {"=eth0", "eth0", true}, {"=eth0", "eth01", false},
		{"ib,eth", "eth3", true},
	}
	for _, c := range cases {
		if got := parseIfaceFilter(c.spec).match(c.name); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.spec, c.name, got, c.want)
		}
	}
}

// pipe returns a connected TCP pair on loopback.
func pipe(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn)
	go func() { c, _ := ln.Accept(); acc <- c }()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-acc
	t.Cleanup(func() { d.Close(); a.Close() })
	d.SetDeadline(time.Now().Add(5 * time.Second))
	a.SetDeadline(time.Now().Add(5 * time.Second))
	return d, a
}

func TestAuth(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	d, a := pipe(t)
	errc := make(chan error)
	go func() { errc <- authAccept(a, secret) }()
	if err := authDial(d, secret); err != nil {
		t.Fatalf("dial side: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("accept side: %v", err)
	}

	// A wrong secret fails on both sides.
	d, a = pipe(t)
	go func() { errc <- authAccept(a, secret) }()
	if err := authDial(d, bytes.Repeat([]byte{8}, 32)); err == nil {
		t.Error("dialer with a wrong secret accepted the listener")
	}
	d.Close()
	if err := <-errc; err == nil {
		t.Error("listener accepted a dialer with a wrong secret")
	}
}

func TestMessageBounds(t *testing.T) {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, uint32(maxMsg+1))
	var v PeerInfo
	if err := readMsg(&buf, &v); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized message: %v", err)
	}
	buf.Reset()
	in := PeerInfo{Rank: 3, NRanks: 4, Addr: "127.0.0.1:5", Host: "h", Proc: "p", Pid: 9}
	if err := writeMsg(&buf, in); err != nil {
		t.Fatal(err)
	}
	if err := readMsg(&buf, &v); err != nil || v != in {
		t.Errorf("round trip: %+v %v", v, err)
	}
}

// FuzzReadMsg: arbitrary bytes from a peer never panic or over-allocate.
func FuzzReadMsg(f *testing.F) {
	var buf bytes.Buffer
	writeMsg(&buf, []PeerInfo{{Rank: 1}})
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r rootReply
		readMsg(bytes.NewReader(data), &r)
		var p PeerInfo
		readMsg(bytes.NewReader(data), &p)
		var part []PeerInfo
		readMsg(bytes.NewReader(data), &part)
	})
}
