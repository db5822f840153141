// Package wire defines the frame header that precedes every payload between
// two ranks. It carries a full description of the sender's call, so a rank
// that disagrees with its peer (another collective, count, type, op, root or
// sequence number) fails with a message naming both calls instead of hanging
// or silently mixing data.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"gocl/abi"
)

// HeaderSize is the encoded size of a Header.
const HeaderSize = 48

const (
	magic   = 0x4c434f47 // "GOCL" little endian
	version = 1
)

// Kind separates collective traffic from point-to-point traffic.
type Kind uint8

const (
	KindColl  Kind = 1
	KindP2P   Kind = 2
	KindAbort Kind = 3 // payload: why the sender failed; it closes the link next
)

// MaxAbortReason bounds an abort frame's payload.
const MaxAbortReason = 4096

// Header describes one frame. Call fields (Kind..Count) must match between
// sender and receiver; Step and Len describe the frame itself.
type Header struct {
	Kind  Kind
	Coll  Coll
	Dtype uint8
	Op    uint8
	Root  int32
	Seq   uint64 // per-communicator sequence number of the call
	Count uint64 // the call's element count
	Step  uint32 // the step its receiver takes it at (a ring's hop, a chain's or a tree's chunk), for diagnostics
	Len   uint64 // payload bytes that follow the header
}

// Encode writes h into b (len(b) >= HeaderSize).
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = byte(h.Kind)
	b[6] = byte(h.Coll)
	b[7] = h.Dtype
	b[8] = h.Op
	b[9], b[10], b[11] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Root))
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.Count)
	binary.LittleEndian.PutUint32(b[32:], h.Step)
	binary.LittleEndian.PutUint32(b[36:], 0)
	binary.LittleEndian.PutUint64(b[40:], h.Len)
}

// ErrNotGocl means the bytes on a connection are not a gocl frame at all.
var ErrNotGocl = errors.New("not a gocl frame (bad magic): the connection carries foreign or corrupted data")

// Decode parses a header. It checks only the framing; Match checks the call.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("short frame header: %d bytes", len(b))
	}
	if binary.LittleEndian.Uint32(b[0:]) != magic {
		return Header{}, ErrNotGocl
	}
	if b[4] != version {
		return Header{}, fmt.Errorf("frame version %d, this gocl speaks %d: every rank must run the same gocl release", b[4], version)
	}
	h := Header{
		Kind:  Kind(b[5]),
		Coll:  Coll(b[6]),
		Dtype: b[7],
		Op:    b[8],
		Root:  int32(binary.LittleEndian.Uint32(b[12:])),
		Seq:   binary.LittleEndian.Uint64(b[16:]),
		Count: binary.LittleEndian.Uint64(b[24:]),
		Step:  binary.LittleEndian.Uint32(b[32:]),
		Len:   binary.LittleEndian.Uint64(b[40:]),
	}
	if h.Kind != KindColl && h.Kind != KindP2P && h.Kind != KindAbort {
		return Header{}, fmt.Errorf("frame kind %d is unknown", h.Kind)
	}
	return h, nil
}

// Describe renders the call a header belongs to, for error messages.
func (h *Header) Describe() string {
	if h.Kind == KindP2P {
		return fmt.Sprintf("send/recv #%d (count %d, %s)", h.Seq, h.Count, DtypeName(h.Dtype))
	}
	s := fmt.Sprintf("%s #%d (count %d, %s", h.Coll, h.Seq, h.Count, DtypeName(h.Dtype))
	if d := h.Coll.Desc(); d.Reduces {
		s += ", " + OpName(h.Op)
	}
	if h.Coll.Desc().Rooted {
		s += fmt.Sprintf(", root %d", h.Root)
	}
	return s + ")"
}

// Match returns nil when got (from peer) belongs to the same call as want and
// carries the expected payload length; otherwise an error naming both calls.
func Match(want, got *Header, self, peer int) error {
	if got.Kind != want.Kind || got.Coll != want.Coll || got.Dtype != want.Dtype || got.Op != want.Op ||
		got.Root != want.Root || got.Seq != want.Seq || got.Count != want.Count {
		return &MismatchError{Self: self, Peer: peer, Want: *want, Got: *got}
	}
	if got.Len != want.Len {
		return &MismatchError{Self: self, Peer: peer, Want: *want, Got: *got, LenOnly: true}
	}
	return nil
}

// MismatchError reports ranks that disagree on the call they are making.
type MismatchError struct {
	Self, Peer int
	Want, Got  Header
	LenOnly    bool
}

func (e *MismatchError) Error() string {
	if e.LenOnly {
		return fmt.Sprintf("rank %d expected %d bytes from rank %d in %s but got %d: ranks disagree on the buffer layout of this call",
			e.Self, e.Want.Len, e.Peer, e.Want.Describe(), e.Got.Len)
	}
	return fmt.Sprintf("ranks disagree on the call: rank %d is in %s but rank %d sent data for %s; every rank must make the same calls in the same order with the same count, datatype, op and root",
		e.Self, e.Want.Describe(), e.Peer, e.Got.Describe())
}

// DtypeName and OpName render the numeric type and op of a header.
func DtypeName(d uint8) string { return abi.DataType(d).String() }
func OpName(o uint8) string    { return abi.RedOp(o).String() }
