package comm

import (
	"unsafe"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// GetUniqueID makes the id of a grow of c (goclCommGetUniqueId): rank 0
// calls it and hands the id to the joining processes; c's own ranks get it
// inside Grow.
func (c *Comm) GetUniqueID() (bootstrap.ID, error) {
	config.Reload()
	id, err := c.newUniqueID(config.Timeout())
	if err != nil {
		return bootstrap.ID{}, err
	}
	c.stateMu.Lock()
	c.growID = &id
	c.stateMu.Unlock()
	return id, nil
}

// Grow is collective over c's ranks, which keep their ranks in a
// communicator of nranks; the new ranks join it with GrowJoin. Rank 0's id
// (id when given, else the one its GetUniqueID made) reaches the others
// over c, so only rank 0 needs it. The new communicator takes the timeout
// of opts, else c's.
func (c *Comm) Grow(nranks int, id *bootstrap.ID, opts Options) (*Comm, error) {
	if nranks < c.nranks {
		return nil, status.Errorf(status.InvalidArgument,
			"grow on rank %d: nRanks is %d, fewer than the communicator's %d ranks: shrink to drop ranks", c.rank, nranks, c.nranks)
	}
	var buf bootstrap.ID
	if c.rank == 0 {
		c.stateMu.Lock()
		switch {
		case id != nil:
			buf = *id
		case c.growID != nil:
			buf = *c.growID
		}
		c.stateMu.Unlock()
	}
	// A zero id on rank 0 travels too, so every rank returns the same error.
	if err := c.Run(nil, Op{Coll: wire.Broadcast, Send: unsafe.Pointer(&buf[0]), Recv: unsafe.Pointer(&buf[0]),
		Count: bootstrap.IDBytes, Type: abi.Uint8, Root: 0}); err != nil {
		return nil, err
	}
	if buf == (bootstrap.ID{}) {
		return nil, status.Errorf(status.InvalidUsage,
			"grow on rank %d: rank 0 has no id for the grow: call goclCommGetUniqueId on rank 0 first (and give the id to the new ranks)", c.rank)
	}
	if !opts.HasTimeout {
		opts.Timeout, opts.HasTimeout = c.timeout, true
	}
	return InitRank(buf, nranks, c.rank, c.device, opts)
}

// GrowJoin is a new rank's side of a grow: InitRank with the id rank 0 of
// the existing communicator handed out, and a rank past the existing ones.
func GrowJoin(id bootstrap.ID, nranks, rank int, opts Options) (*Comm, error) {
	return InitRank(id, nranks, rank, -1, opts)
}
