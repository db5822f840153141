package bootstrap

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
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

func mac(secret []byte, role string, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

// authDial runs the dialer's side.
func authDial(c net.Conn, secret []byte) error {
	nd := make([]byte, nonceLen)
	rand.Read(nd)
	if _, err := c.Write(append(append([]byte(nil), authMagic...), nd...)); err != nil {
		return err
	}
	reply := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, reply); err != nil {
		return err
	}
	nl := reply[:nonceLen]
	if !hmac.Equal(reply[nonceLen:], mac(secret, "L", nd, nl)) {
		return errAuth
	}
	_, err := c.Write(mac(secret, "D", nd, nl))
	return err
}

// authAccept runs the listener's side.
func authAccept(c net.Conn, secret []byte) error {
	hello := make([]byte, len(authMagic)+nonceLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return err
	}
	if !bytes.Equal(hello[:len(authMagic)], authMagic) {
		return errAuth
	}
	nd := hello[len(authMagic):]
	nl := make([]byte, nonceLen)
	rand.Read(nl)
	if _, err := c.Write(append(nl, mac(secret, "L", nd, nl)...)); err != nil {
		return err
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, proof); err != nil {
		return err
	}
	if !hmac.Equal(proof, mac(secret, "D", nd, nl)) {
		return errAuth
	}
	return nil
}
