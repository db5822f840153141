package main

// #include "gocl.h"
import "C"

import (
	"unsafe"

	"gocl/abi"
	"gocl/runtime/status"
)

// goclgoRecvAny is goclRecvAny: a blocking receive from whichever rank sends
// first; *peer is set to that rank.
//
//export goclgoRecvAny
func goclgoRecvAny(recv unsafe.Pointer, count C.size_t, dtype C.int, peer *C.int, h, st C.uintptr_t) (rc C.int) {
	defer guard(&rc, uintptr(h))
	c, err := getComm(uintptr(h))
	if err != nil {
		return record(uintptr(h), err)
	}
	if peer == nil {
		return record(uintptr(h), nullArg("peer (the output pointer)"))
	}
	if st != 0 {
		return record(uintptr(h), status.Errorf(status.InvalidUsage,
			"goclRecvAny on rank %d: stream must be NULL (the call reports its peer when it returns)", c.Rank()))
	}
	if currentGroup() != nil {
		return record(uintptr(h), status.Errorf(status.InvalidUsage,
			"goclRecvAny on rank %d: not allowed between goclGroupStart and goclGroupEnd (its peer is known only when it runs)", c.Rank()))
	}
	p, err := c.RecvAny(recv, int(count), abi.DataType(dtype))
	if err != nil {
		return record(uintptr(h), err)
	}
	*peer = C.int(p)
	return 0
}
