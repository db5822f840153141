package bootstrap

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Bootstrap messages are JSON behind a 4-byte length. They are small and rare,
// so readability beats compactness; the length is bounded so a confused or
// hostile peer cannot make us allocate much.
const maxMsg = 4 << 20

func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	out := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(out, uint32(len(b)))
	copy(out[4:], b)
	_, err = w.Write(out)
	return err
}

func readMsg(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", size, maxMsg)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// PeerInfo is what every rank tells the others at init.
type PeerInfo struct {
	Rank   int    `json:"rank"`
	NRanks int    `json:"nranks"`
	Addr   string `json:"addr"` // peer listener, host:port
	Host   string `json:"host"` // host identity: same string = same machine
	Proc   string `json:"proc"` // process identity: same string = same process
	Pid    int    `json:"pid"`
	Device int    `json:"device"`
	// What the rank offers for connections, so both ends of a pair choose
	// the same transport from the same data: NoP2P is its P2P_DISABLE, and
	// Shm names its shared-memory domain (host, IPC and pid namespaces,
	// user), empty when SHM_DISABLE is set. Equal non-empty domains can map
	// each other's segments.
	NoP2P bool   `json:"nop2p,omitempty"`
	Shm   string `json:"shm,omitempty"`
}

// rootReply is the root's answer: the whole table, or why there is none.
type rootReply struct {
	Err     string     `json:"err,omitempty"`
	Expired bool       `json:"expired,omitempty"` // Err is the root's timeout
	Left    bool       `json:"left,omitempty"`    // Err is a rank gone from the rendezvous
	Peers   []PeerInfo `json:"peers,omitempty"`
}
