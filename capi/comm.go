package main

// #include "gocl.h"
import "C"

import (
	"unsafe"

	"gocl/abi"
	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/status"
)

func nullArg(what string) error {
	return status.Errorf(status.InvalidArgument, "%s is NULL: pass a valid pointer", what)
}

//export goclgoGetVersion
func goclgoGetVersion(version *C.int) (rc C.int) {
	defer guard(&rc, 0)
	if version == nil {
		return record(0, nullArg("version"))
	}
	*version = C.int(comm.Version)
	return 0
}

//export goclgoGetUniqueId
func goclgoGetUniqueId(out *C.char) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("uniqueId"))
	}
	startup()
	id, err := comm.NewUniqueID()
	if err != nil {
		return record(0, err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), bootstrap.IDBytes), id[:])
	return 0
}

//export goclgoCommInitRank
func goclgoCommInitRank(out *C.uintptr_t, nranks C.int, id *C.char, rank C.int, config unsafe.Pointer) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("comm (the output pointer)"))
	}
	opts, err := options((*C.goclConfig_t)(config), int(rank))
	if err != nil {
		return record(0, err)
	}
	startup()
	var uid bootstrap.ID
	copy(uid[:], unsafe.Slice((*byte)(unsafe.Pointer(id)), bootstrap.IDBytes))
	if g := currentGroup(); g != nil {
		// Inside a group the init runs at goclGroupEnd, with the others.
		e := &commEntry{}
		h := table.add(e)
		*out = C.uintptr_t(h)
		g.inits = append(g.inits, pendingInit{entry: e, handle: h, id: uid, nranks: int(nranks), rank: int(rank), opts: opts})
		return 0
	}
	c, err := comm.InitRank(uid, int(nranks), int(rank), -1, opts)
	if err != nil {
		return record(0, err)
	}
	*out = C.uintptr_t(table.add(&commEntry{c: c}))
	return 0
}

//export goclgoCommInitAll
func goclgoCommInitAll(out *C.uintptr_t, ndev C.int, devlist *C.int) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("comms"))
	}
	startup()
	if ndev <= 0 {
		return record(0, status.Errorf(status.InvalidArgument, "ndev is %d: pass the number of communicators to create (>= 1)", int(ndev)))
	}
	var devs []int
	if devlist != nil {
		for _, d := range unsafe.Slice(devlist, int(ndev)) {
			devs = append(devs, int(d))
		}
	}
	comms, err := comm.InitAll(int(ndev), devs, comm.Options{})
	if err != nil {
		return record(0, err)
	}
	handles := unsafe.Slice(out, int(ndev))
	for i, c := range comms {
		handles[i] = C.uintptr_t(table.add(&commEntry{c: c}))
	}
	return 0
}

//export goclgoCommSplit
func goclgoCommSplit(h C.uintptr_t, color, key C.int, out *C.uintptr_t, config unsafe.Pointer) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if out == nil {
		return record(uintptr(h), nullArg("newcomm"))
	}
	opts, err := options((*C.goclConfig_t)(config), c.Rank())
	if err != nil {
		return record(uintptr(h), err)
	}
	nc, err := c.Split(int(color), int(key), opts)
	if err != nil {
		return record(uintptr(h), err)
	}
	*out = 0
	if nc != nil {
		*out = C.uintptr_t(table.add(&commEntry{c: nc}))
	}
	return 0
}

//export goclgoCommDestroy
func goclgoCommDestroy(h C.uintptr_t, abort C.int) (rc C.int) {
	defer guard(&rc, 0)
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(0, err)
	}
	table.remove(uintptr(h))
	forget(uintptr(h))
	if abort != 0 {
		c.Abort()
		return 0
	}
	return record(0, c.Destroy())
}

//export goclgoCommGetAsyncError
func goclgoCommGetAsyncError(h C.uintptr_t, out *C.int) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if out == nil {
		return record(uintptr(h), nullArg("asyncError"))
	}
	aerr := c.AsyncError()
	*out = C.int(status.CodeOf(aerr))
	if aerr != nil {
		explain(uintptr(h), aerr)
	}
	return 0
}

//export goclgoCommDumpTrace
func goclgoCommDumpTrace(h C.uintptr_t, path *C.char) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	p := ""
	if path != nil {
		p = C.GoString(path)
	}
	return record(uintptr(h), c.DumpTrace(p))
}

// goclgoCommQuery answers goclCommCount (0), goclCommUserRank (1) and
// goclCommCuDevice (2).
//
//export goclgoCommQuery
func goclgoCommQuery(h C.uintptr_t, what C.int, out *C.int) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if out == nil {
		return record(uintptr(h), nullArg([]string{"count", "rank", "device"}[what]))
	}
	*out = C.int([]int{c.NRanks(), c.Rank(), c.Device()}[what])
	return 0
}

//export goclgoRedOpCreatePreMulSum
func goclgoRedOpCreatePreMulSum(op *C.int, scalar unsafe.Pointer, dtype C.int, h C.uintptr_t) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if op == nil {
		return record(uintptr(h), nullArg("op"))
	}
	if scalar == nil {
		return record(uintptr(h), nullArg("scalar"))
	}
	t := abi.DataType(dtype)
	if !t.Valid() {
		return record(uintptr(h), status.Errorf(status.InvalidArgument, "premulsum on rank %d: datatype %d is not a gocl datatype (0..9)", c.Rank(), int(dtype)))
	}
	id, err := c.CreatePreMulSum(t, unsafe.Slice((*byte)(scalar), t.Size()))
	if err != nil {
		return record(uintptr(h), err)
	}
	*op = C.int(id)
	return 0
}

//export goclgoRedOpDestroy
func goclgoRedOpDestroy(op C.int, h C.uintptr_t) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	return record(uintptr(h), c.DestroyRedOp(int32(op)))
}
