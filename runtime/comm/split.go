package comm

import (
	"encoding/binary"
	"sort"
	"unsafe"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// NoColor leaves a rank out of every new communicator (NCCL_SPLIT_NOCOLOR).
const NoColor = -1

// Split is collective over c: ranks passing the same color form a new
// communicator, ordered by key and then by rank in c. Ranks passing NoColor
// take part in the exchange and get nil. The new communicator takes the
// timeout of opts, else c's (as NCCL's split inherits the parent's config).
func (c *Comm) Split(color, key int, opts Options) (*Comm, error) {
	if color < NoColor {
		return nil, status.Errorf(status.InvalidArgument,
			"split on rank %d: color %d is negative: pass a color >= 0, or GOCL_SPLIT_NOCOLOR (-1) to opt out", c.rank, color)
	}
	// Everyone learns everyone's (color, key).
	mine := make([]byte, 8)
	binary.LittleEndian.PutUint32(mine[0:], uint32(int32(color)))
	binary.LittleEndian.PutUint32(mine[4:], uint32(int32(key)))
	all := make([]byte, 8*c.nranks)
	if err := c.allGather(mine, all, 2, abi.Int32); err != nil {
		return nil, err
	}
	colorOf := func(r int) int { return int(int32(binary.LittleEndian.Uint32(all[8*r:]))) }
	keyOf := func(r int) int { return int(int32(binary.LittleEndian.Uint32(all[8*r+4:]))) }

	var members []int
	for r := 0; r < c.nranks; r++ {
		if color != NoColor && colorOf(r) == color {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return keyOf(members[i]) < keyOf(members[j]) })
	leader := func(r int) bool { // the lowest rank of each color starts its rendezvous
		for q := 0; q < r; q++ {
			if colorOf(q) == colorOf(r) {
				return false
			}
		}
		return colorOf(r) != NoColor
	}

	// Each color's leader makes a unique id; everyone learns every id.
	id := bootstrap.ID{}
	var idErr error
	if leader(c.rank) {
		id, idErr = c.newUniqueID(c.timeout)
	}
	ids := make([]byte, bootstrap.IDBytes*c.nranks)
	if err := c.allGather(id[:], ids, bootstrap.IDBytes, abi.Uint8); err != nil {
		return nil, err
	}
	if idErr != nil {
		return nil, idErr
	}
	if color == NoColor {
		return nil, nil
	}
	lead := members[0]
	for _, r := range members {
		if r < lead {
			lead = r
		}
	}
	copy(id[:], ids[lead*bootstrap.IDBytes:])
	newRank := 0
	for i, r := range members {
		if r == c.rank {
			newRank = i
		}
	}
	if !opts.HasTimeout {
		opts.Timeout, opts.HasTimeout = c.timeout, true
	}
	return InitRank(id, len(members), newRank, c.device, opts)
}

// allReduceMax is an internal all-reduce (max) of Go memory, in place.
func (c *Comm) allReduceMax(v []uint64) error {
	p := unsafe.Pointer(&v[0])
	return c.Run(nil, Op{Coll: wire.AllReduce, Send: p, Recv: p, Count: len(v), Type: abi.Uint64, RedOp: int32(abi.Max)})
}

// allGather is an internal allgather of Go memory.
func (c *Comm) allGather(send, recv []byte, count int, t abi.DataType) error {
	return c.Run(nil, Op{Coll: wire.AllGather, Send: unsafe.Pointer(&send[0]), Recv: unsafe.Pointer(&recv[0]), Count: count, Type: t})
}
