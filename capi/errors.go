package main

// #include <stdint.h>
// #include <stdlib.h>
import "C"

import (
	"runtime/debug"
	"sync"
	"syscall"
	"unsafe"

	"gocl/runtime/debuglog"
	"gocl/runtime/status"
)

// Last errors. A thread's own last error is a C string only that thread
// reads, freed by its next failure (goclGetLastError(NULL)'s contract). A
// communicator's last error is kept as a Go string and handed to each
// reading thread as that thread's own C copy, freed only by the same thread's
// next read of that communicator that finds a different message, or by the
// communicator's destroy: a failing call on another thread never frees a
// string a reader holds (it did: a reader could get a string another
// thread's failure had just freed, issue 39).
var (
	errMu       sync.Mutex
	commErrs    = map[uintptr]string{}
	threadErrs  = map[int]*C.char{}
	readerErrs  = map[reader]*C.char{}
	emptyString = C.CString("")
)

// reader is one thread's view of one communicator's last error.
type reader struct {
	tid  int
	comm uintptr
}

// keep stores msg in *slot. An identical message keeps the old string, so a
// pointer the caller holds stays valid when a query (goclCommGetAsyncError)
// reports the error it already explained. Only the thread that reads *slot
// may replace it.
func keep(slot **C.char, msg string) {
	if *slot != nil {
		if C.GoString(*slot) == msg {
			return
		}
		C.free(unsafe.Pointer(*slot))
	}
	*slot = C.CString(msg)
}

// record keeps err's message for comm (0: none) and for the calling thread,
// and returns its result code.
func record(comm uintptr, err error) C.int {
	if err == nil {
		return 0
	}
	code := status.CodeOf(err)
	msg := err.Error()
	debuglog.Warnf(debuglog.Call, -1, "call failed with result %d: %s", int(code), msg)
	tid := syscall.Gettid()
	errMu.Lock()
	defer errMu.Unlock()
	if comm != 0 {
		commErrs[comm] = msg
	}
	s := threadErrs[tid]
	keep(&s, msg)
	threadErrs[tid] = s
	return C.int(code)
}

// explain gives comm a message for an error found by a query (which itself
// succeeded), unless it has one.
func explain(comm uintptr, err error) {
	errMu.Lock()
	defer errMu.Unlock()
	if _, ok := commErrs[comm]; !ok {
		commErrs[comm] = err.Error()
	}
}

// forget drops a destroyed communicator's message and its readers' copies.
func forget(comm uintptr) {
	errMu.Lock()
	delete(commErrs, comm)
	for r, s := range readerErrs {
		if r.comm == comm {
			C.free(unsafe.Pointer(s))
			delete(readerErrs, r)
		}
	}
	errMu.Unlock()
}

// guard recovers a panic in an export into goclInternalError: nothing may
// unwind into C.
func guard(rc *C.int, comm uintptr) {
	if r := recover(); r != nil {
		err := status.Errorf(status.InternalError, "internal error (a gocl bug, please report it with this text): panic: %v\n%s", r, debug.Stack())
		*rc = record(comm, err)
	}
}

//export goclgoGetLastError
func goclgoGetLastError(comm C.uintptr_t) (out *C.char) {
	out = emptyString
	defer func() { recover() }()
	tid := syscall.Gettid()
	errMu.Lock()
	defer errMu.Unlock()
	if msg, ok := commErrs[uintptr(comm)]; ok && comm != 0 {
		r := reader{tid, uintptr(comm)}
		s := readerErrs[r]
		keep(&s, msg)
		readerErrs[r] = s
		return s
	}
	if s := threadErrs[tid]; s != nil {
		return s
	}
	return emptyString
}
