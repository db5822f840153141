// Package bootstrap brings ranks together: the unique id, the rendezvous root
// that collects every rank's address, the mutual authentication every
// connection starts with, and the peer-to-peer socket mesh.
package bootstrap

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"

	"gocl/runtime/status"
)

// IDBytes is the size of a unique id (goclUniqueId).
const IDBytes = 128

// ID layout, little endian:
//
//	0  magic "GOCLID" + version byte + family (4 or 6)
//	8  port (2 bytes), 2 reserved
//	12 IP (16 bytes, IPv4 in IPv6 form)
//	28 secret (32 bytes)
//	60 zero up to 128
type ID [IDBytes]byte

var idMagic = []byte("GOCLID")

const idVersion = 1

// NewID returns an id naming addr as the root, with a fresh random secret.
func NewID(addr *net.TCPAddr) (ID, error) {
	var id ID
	copy(id[0:], idMagic)
	id[6] = idVersion
	id[7] = 4
	if addr.IP.To4() == nil {
		id[7] = 6
	}
	binary.LittleEndian.PutUint16(id[8:], uint16(addr.Port))
	copy(id[12:28], addr.IP.To16())
	if _, err := rand.Read(id[28:60]); err != nil {
		return ID{}, status.Errorf(status.SystemError, "cannot read random bytes for the communicator secret: %v", err)
	}
	return id, nil
}

// Root is the rendezvous address an id names.
func (id *ID) Root() (*net.TCPAddr, error) {
	if !bytes.Equal(id[0:6], idMagic) {
		return nil, status.Errorf(status.InvalidArgument,
			"the unique id is not a gocl id (bad magic): pass every rank the 128 bytes goclGetUniqueId produced, unchanged")
	}
	if id[6] != idVersion {
		return nil, status.Errorf(status.InvalidArgument,
			"the unique id has version %d but this gocl reads version %d: every rank must run the same gocl release", id[6], idVersion)
	}
	ip := net.IP(append([]byte(nil), id[12:28]...))
	if id[7] == 4 {
		ip = ip.To4()
	}
	return &net.TCPAddr{IP: ip, Port: int(binary.LittleEndian.Uint16(id[8:]))}, nil
}

// Secret is the shared secret every connection of the communicator proves.
func (id *ID) Secret() []byte { return id[28:60] }

// Key is a process-local name for the communicator (the inproc registry's key).
func (id *ID) Key() string { return string(id[:60]) }

func (id *ID) String() string {
	a, err := id.Root()
	if err != nil {
		return "invalid-id"
	}
	return fmt.Sprintf("root %s", a)
}
