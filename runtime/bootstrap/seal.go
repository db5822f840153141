package bootstrap

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A sealed conversation: after the handshake, the requests and replies on a
// rank's listener (probes, the shrink agreement, revoke, status) travel
// under AES-256-GCM with the connection's session key, so the new
// communicator's unique id in a shrink's decision is never in the clear,
// and every message (its sender's rank included) is bound to the
// authenticated connection: altered or replayed bytes fail to open.
type sealed struct {
	aead       cipher.AEAD
	send, recv byte // the direction bytes of this side's nonces
	sent, got  uint64
}

func newSealed(key []byte, dialer bool) (*sealed, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &sealed{aead: aead, send: 'L', recv: 'D'}
	if dialer {
		s.send, s.recv = 'D', 'L'
	}
	return s, nil
}

func (s *sealed) nonce(dir byte, n uint64) []byte {
	b := make([]byte, s.aead.NonceSize())
	b[0] = dir
	binary.LittleEndian.PutUint64(b[4:], n)
	return b
}

// write seals v's JSON as one length-prefixed frame.
func (s *sealed) write(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ct := s.aead.Seal(nil, s.nonce(s.send, s.sent), b, nil)
	s.sent++
	if len(ct) > maxMsg {
		return fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", len(ct), maxMsg)
	}
	frame := make([]byte, 4+len(ct))
	binary.LittleEndian.PutUint32(frame, uint32(len(ct)))
	copy(frame[4:], ct)
	_, err = w.Write(frame)
	return err
}

var errSealed = errors.New("a sealed bootstrap message failed to open (altered, replayed, or from another job)")

// read opens one frame into v.
func (s *sealed) read(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", size, maxMsg)
	}
	ct := make([]byte, size)
	if _, err := io.ReadFull(r, ct); err != nil {
		return err
	}
	b, err := s.aead.Open(nil, s.nonce(s.recv, s.got), ct, nil)
	if err != nil {
		return errSealed
	}
	s.got++
	return json.Unmarshal(b, v)
}
