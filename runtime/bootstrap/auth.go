package bootstrap

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The handshake proves to both sides that the other holds the secret,
// without sending it:
//
//	dialer   -> "GOCLAUTH" nonceD
//	listener -> nonceL  mac(secret, "L", nonceD, nonceL)
//	dialer   -> mac(secret, "D", nonceD, nonceL)
//
// A stranger (port scanner, another job) fails it and is dropped.

var authMagic = []byte("GOCLAUTH")

const nonceLen = 32

// errAuth is the handshake failing; callers log and drop the connection.
var errAuth = errors.New("peer failed authentication (wrong unique id, another job, or not gocl)")

// errTurnedAway: the listener closed the connection without a word before
// the handshake, as a listener does when it is full of handshakes (gate):
// a root that a thousand ranks dial at once. Dialing again later is right;
// a listener with another secret answers (and fails errAuth) instead.
var errTurnedAway = errors.New("the listener turned the connection away before the handshake (busy)")

func mac(secret []byte, role string, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

// authDial runs the dialer's side.
func authDial(c net.Conn, secret []byte) error {
	_, err := authDialKey(c, secret)
	return err
}

// sessionKey is the key a connection's messages are sealed with after the
// handshake: fresh per connection (both nonces), known only to holders of
// the secret.
func sessionKey(secret, nd, nl []byte) []byte { return mac(secret, "S", nd, nl) }

// authDialKey runs the dialer's side and returns the session key.
func authDialKey(c net.Conn, secret []byte) ([]byte, error) {
	nd := make([]byte, nonceLen)
	rand.Read(nd)
	if _, err := c.Write(append(append([]byte(nil), authMagic...), nd...)); err != nil {
		return nil, err
	}
	reply := make([]byte, nonceLen+sha256.Size)
	if n, err := io.ReadFull(c, reply); err != nil {
		if n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			return nil, fmt.Errorf("%w (%w)", errTurnedAway, err)
		}
		return nil, err
	}
	nl := reply[:nonceLen]
	if !hmac.Equal(reply[nonceLen:], mac(secret, "L", nd, nl)) {
		return nil, errAuth
	}
	if _, err := c.Write(mac(secret, "D", nd, nl)); err != nil {
		return nil, err
	}
	return sessionKey(secret, nd, nl), nil
}

// authAccept runs the listener's side.
func authAccept(c net.Conn, secret []byte) error {
	_, err := authAcceptKey(c, secret)
	return err
}

// authAcceptKey runs the listener's side and returns the session key.
func authAcceptKey(c net.Conn, secret []byte) ([]byte, error) {
	hello := make([]byte, len(authMagic)+nonceLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return nil, err
	}
	if !bytes.Equal(hello[:len(authMagic)], authMagic) {
		return nil, errAuth
	}
	nd := hello[len(authMagic):]
	nl := make([]byte, nonceLen)
	rand.Read(nl)
	if _, err := c.Write(append(nl, mac(secret, "L", nd, nl)...)); err != nil {
		return nil, err
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, proof); err != nil {
		return nil, err
	}
	if !hmac.Equal(proof, mac(secret, "D", nd, nl)) {
		return nil, errAuth
	}
	return sessionKey(secret, nd, nl), nil
}
