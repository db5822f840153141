package main

// #include "gocl.h"
import "C"

import (
	"unsafe"

	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/status"
)

// The fault-tolerance calls: shrink, revoke, grow.

//export goclgoCommShrink
func goclgoCommShrink(h C.uintptr_t, list *C.int, count C.int, out *C.uintptr_t, config unsafe.Pointer, flags C.int) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if out == nil {
		return record(uintptr(h), nullArg("newcomm"))
	}
	if count < 0 || (count > 0 && list == nil) {
		return record(uintptr(h), status.Errorf(status.InvalidArgument,
			"shrink on rank %d: excludeRanksCount is %d with excludeRanksList %p: pass a list of that many ranks, or NULL and 0 to let the survivors agree",
			c.Rank(), int(count), list))
	}
	opts, err := options((*C.goclConfig_t)(config), c.Rank())
	if err != nil {
		return record(uintptr(h), err)
	}
	var exclude []int
	for _, r := range unsafe.Slice(list, int(count)) {
		exclude = append(exclude, int(r))
	}
	nc, err := c.Shrink(exclude, list == nil, comm.ShrinkFlags(flags), opts)
	if err != nil {
		return record(uintptr(h), err)
	}
	*out = C.uintptr_t(table.add(&commEntry{c: nc}))
	return 0
}

//export goclgoCommRevoke
func goclgoCommRevoke(h C.uintptr_t, flags C.int) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if flags != 0 {
		return record(uintptr(h), status.Errorf(status.InvalidArgument, "revoke on rank %d: flags is %d: pass 0", c.Rank(), int(flags)))
	}
	c.Revoke()
	return 0
}

//export goclgoCommGetUniqueId
func goclgoCommGetUniqueId(h C.uintptr_t, out *C.char) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if out == nil {
		return record(uintptr(h), nullArg("uniqueId"))
	}
	id, err := c.GetUniqueID()
	if err != nil {
		return record(uintptr(h), err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), bootstrap.IDBytes), id[:])
	return 0
}

//export goclgoCommGrow
func goclgoCommGrow(h C.uintptr_t, nranks C.int, id *C.char, rank C.int, out *C.uintptr_t, config unsafe.Pointer) (rc C.int) {
	defer guard(&rc, uintptr(h))
	if out == nil {
		return record(uintptr(h), nullArg("newcomm"))
	}
	var uid *bootstrap.ID
	if id != nil {
		uid = new(bootstrap.ID)
		copy(uid[:], unsafe.Slice((*byte)(unsafe.Pointer(id)), bootstrap.IDBytes))
	}
	var nc *comm.Comm
	if h == 0 { // a new rank
		if uid == nil {
			return record(0, nullArg("uniqueId (a new rank needs the id rank 0's goclCommGetUniqueId made)"))
		}
		if rank < 0 || rank >= nranks {
			return record(0, status.Errorf(status.InvalidArgument,
				"grow: a new rank passes its rank in [existing size, nRanks); got rank %d of nRanks %d", int(rank), int(nranks)))
		}
		opts, err := options((*C.goclConfig_t)(config), int(rank))
		if err != nil {
			return record(0, err)
		}
		startup()
		if nc, err = comm.GrowJoin(*uid, int(nranks), int(rank), opts); err != nil {
			return record(0, err)
		}
	} else {
		c, err := getComm(uintptr(h))
		if err != nil {
			return record(uintptr(h), err)
		}
		if rank != -1 {
			return record(uintptr(h), status.Errorf(status.InvalidArgument,
				"grow on rank %d: an existing rank passes rank -1 (it keeps its rank); got %d", c.Rank(), int(rank)))
		}
		opts, err := options((*C.goclConfig_t)(config), c.Rank())
		if err != nil {
			return record(uintptr(h), err)
		}
		if nc, err = c.Grow(int(nranks), uid, opts); err != nil {
			return record(uintptr(h), err)
		}
	}
	*out = C.uintptr_t(table.add(&commEntry{c: nc}))
	return 0
}
