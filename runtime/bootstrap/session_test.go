package bootstrap

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"
)

// A session carries requests one after another on one connection (the
// heartbeats ask every period without a handshake each time), and closing
// the listener ends it: the asker hears that the communicator is gone.
func TestSessionAsksManyThenEndsWithTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secret := bytes.Repeat([]byte{9}, 32)
	served := make(chan struct{})
	go func() { Serve(ln, 0, secret, func(r Request) any { return "re:" + r.Kind }); close(served) }()
	s, err := Dial(ln.Addr().String(), secret, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		var got string
		kind := fmt.Sprint("beat-", i)
		if err := s.Ask(time.Now().Add(10*time.Second), NewRequest(kind, nil), &got); err != nil || got != "re:"+kind {
			t.Fatalf("ask %d: %q, %v", i, got, err)
		}
	}
	ln.Close()
	<-served
	var got string
	if err := s.Ask(time.Now().Add(5*time.Second), NewRequest("after-close", nil), &got); err == nil {
		t.Fatalf("a session outlived its listener: answered %q", got)
	}
	if _, err := Dial(ln.Addr().String(), secret, time.Now().Add(5*time.Second)); err == nil {
		t.Fatal("dialled a closed listener")
	}
}
