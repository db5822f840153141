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
	out, err := encodeMsg(v)
	if err == nil {
		_, err = w.Write(out)
	}
	return err
}

// encodeMsg is v as one message: its length, then its JSON.
func encodeMsg(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > maxMsg {
		return nil, fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", len(b), maxMsg)
	}
	out := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(out, uint32(len(b)))
	copy(out[4:], b)
	return out, nil
}

func readMsg(r io.Reader, v any) error {
	m, err := readRawMsg(r)
	if err != nil {
		return err
	}
	return json.Unmarshal(m[4:], v)
}

// readRawMsg reads one message as it came (length and JSON), for a reader
// that passes it on as well.
func readRawMsg(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return nil, fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", size, maxMsg)
	}
	b := make([]byte, 4+size)
	copy(b, n[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, err
	}
	return b, nil
}

// PeerInfo is what every rank tells the others at init.
type PeerInfo struct {
	Rank   int    `json:"rank"`
	NRanks int    `json:"nranks"`
	Addr   string `json:"addr"` // peer listener, host:port
	Boot   string `json:"boot"` // where the rank takes the rank table from its parent (table.go), during init only; empty: another rank of its process takes it (shared.go)
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
	// Lazy: the rank connects its pairs on first use (GOCL_RUNTIME_CONNECT);
	// every rank must alike.
	Lazy bool `json:"lazy,omitempty"`
}

// rootReply is the root's answer: every rank joined, and where this rank's
// children in the bootstrap tree take the table (table.go), or why the
// rendezvous failed.
type rootReply struct {
	Err     string   `json:"err,omitempty"`
	Expired bool     `json:"expired,omitempty"` // Err is the root's timeout
	Left    bool     `json:"left,omitempty"`    // Err is a rank gone from the rendezvous
	Kids    []string `json:"kids,omitempty"`
	// From is the rank the table comes from (-1: the root). Local: From is
	// a rank of this process, whose copy this rank takes in memory.
	From  int  `json:"from"`
	Local bool `json:"local,omitempty"`
}
