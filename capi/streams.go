package main

// #include "gocl.h"
// void goclCallHostFn(goclHostFn_t fn, uintptr_t userData);
import "C"

import (
	"gocl/runtime/status"
	"gocl/runtime/stream"
)

//export goclgoStreamCreate
func goclgoStreamCreate(out *C.uintptr_t) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("stream"))
	}
	*out = C.uintptr_t(table.add(stream.New()))
	return 0
}

// goclgoStreamOp is Synchronize (0), Query (1) and Destroy (2).
//
//export goclgoStreamOp
func goclgoStreamOp(h C.uintptr_t, what C.int) (rc C.int) {
	defer guard(&rc, 0)
	s, err := lookup[*stream.Stream](uintptr(h), "stream")
	if err != nil {
		return record(0, err)
	}
	switch what {
	case 0:
		return record(0, s.Synchronize())
	case 1:
		busy, err := s.Query()
		if err != nil {
			return record(0, err)
		}
		if busy {
			return C.int(status.InProgress)
		}
		return 0
	}
	table.remove(uintptr(h))
	return record(0, s.Close())
}

//export goclgoEventCreate
func goclgoEventCreate(out *C.uintptr_t) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("event"))
	}
	*out = C.uintptr_t(table.add(&stream.Event{}))
	return 0
}

//export goclgoEventRecord
func goclgoEventRecord(e, s C.uintptr_t) (rc C.int) {
	defer guard(&rc, 0)
	ev, err := lookup[*stream.Event](uintptr(e), "event")
	if err != nil {
		return record(0, err)
	}
	st, err := lookup[*stream.Stream](uintptr(s), "stream")
	if err != nil {
		return record(0, err)
	}
	ev.Record(st)
	return 0
}

// goclgoEventOp is Query (0), Synchronize (1) and Destroy (2).
//
//export goclgoEventOp
func goclgoEventOp(e C.uintptr_t, what C.int) (rc C.int) {
	defer guard(&rc, 0)
	ev, err := lookup[*stream.Event](uintptr(e), "event")
	if err != nil {
		return record(0, err)
	}
	switch what {
	case 0:
		done, err := ev.Done()
		if !done {
			return C.int(status.InProgress)
		}
		return record(0, err)
	case 1:
		return record(0, ev.Wait())
	default:
		table.remove(uintptr(e))
	}
	return 0
}

//export goclgoLaunchHostFunc
func goclgoLaunchHostFunc(st C.uintptr_t, fn C.goclHostFn_t, userData C.uintptr_t) (rc C.int) {
	defer guard(&rc, 0)
	s, err := lookup[*stream.Stream](uintptr(st), "stream")
	if err != nil {
		return record(0, err)
	}
	if fn == nil {
		return record(0, nullArg("fn"))
	}
	s.Then(func() { C.goclCallHostFn(fn, userData) })
	return 0
}
