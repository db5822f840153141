package main

// #include "gocl.h"
import "C"

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// goclgoCall is every collective and send/recv: coll is the wire code.
//
//export goclgoCall
func goclgoCall(coll C.int, send, recv unsafe.Pointer, count C.size_t, dtype, op, root, isSend C.int,
	h, st C.uintptr_t) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	s, err := getStream(uintptr(st))
	if err != nil {
		return record(uintptr(h), err)
	}
	// A size_t above MaxInt64 becomes negative; validation prints it back
	// as the unsigned value the caller passed.
	o := comm.Op{Coll: wire.Coll(coll), Send: send, Recv: recv, Count: int(count), Type: abi.DataType(dtype),
		RedOp: int32(op), IsSend: isSend != 0}
	if o.Coll == wire.SendRecv {
		o.Peer = int(root) // send and recv pass their peer here
	} else {
		o.Root = int(root)
	}
	if g := currentGroup(); g != nil {
		if err := g.group.Add(c, s, o); err != nil {
			g.failed = true
			return record(uintptr(h), err)
		}
		return 0
	}
	return record(uintptr(h), c.Run(s, o))
}

// Groups are per calling thread, like NCCL's.
type groupState struct {
	depth  int
	group  comm.Group
	inits  []pendingInit
	failed bool
}

type pendingInit struct {
	entry        *commEntry
	handle       uintptr
	id           bootstrap.ID
	nranks, rank int
	opts         comm.Options
}

var (
	groupMu    sync.Mutex
	groups     = map[int]*groupState{}
	openGroups atomic.Int32 // len(groups), read without groupMu
)

func currentGroup() *groupState {
	if openGroups.Load() == 0 { // the common case costs no gettid syscall and no lock
		return nil
	}
	groupMu.Lock()
	defer groupMu.Unlock()
	return groups[syscall.Gettid()]
}

// goclgoGroup is goclGroupStart (start=1) and goclGroupEnd (start=0).
//
//export goclgoGroup
func goclgoGroup(start C.int) (rc C.int) {
	defer guard(&rc, 0)
	tid := syscall.Gettid()
	groupMu.Lock()
	g := groups[tid]
	if start != 0 {
		if g == nil {
			g = &groupState{}
			groups[tid] = g
			openGroups.Add(1)
		}
		g.depth++
		groupMu.Unlock()
		return 0
	}
	if g == nil {
		groupMu.Unlock()
		return record(0, status.Errorf(status.InvalidUsage, "goclGroupEnd without goclGroupStart on this thread"))
	}
	g.depth--
	if g.depth > 0 {
		groupMu.Unlock()
		return 0
	}
	delete(groups, tid)
	openGroups.Add(-1)
	groupMu.Unlock()

	if err := runInits(g.inits); err != nil {
		return record(0, err)
	}
	if g.failed {
		return record(0, status.Errorf(status.InvalidArgument, "a call inside this group was rejected (see its result); nothing in the group ran"))
	}
	return record(0, g.group.Run())
}

// runInits runs the group's goclCommInitRank calls together (they rendezvous
// with each other when one thread drives several ranks).
func runInits(inits []pendingInit) error {
	return status.Parallel(len(inits), func(i int) (err error) {
		p := inits[i]
		if p.entry.c, err = comm.InitRank(p.id, p.nranks, p.rank, -1, p.opts); err != nil {
			table.remove(p.handle)
		}
		return err
	})
}
