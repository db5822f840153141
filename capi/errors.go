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

// Last errors, as C strings that stay valid until the next failure on the
// same communicator or thread (goclGetLastError's contract).
var (
	errMu       sync.Mutex
	commErrs    = map[uintptr]*C.char{}
	threadErrs  = map[int]*C.char{}
	emptyString = C.CString("")
)

// keep stores msg in *slot. An identical message keeps the old string, so a
// pointer the caller holds stays valid when a query (goclCommGetAsyncError)
// reports the error it already explained.
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
		s := commErrs[comm]
		keep(&s, msg)
		commErrs[comm] = s
	}
	s := threadErrs[tid]
	keep(&s, msg)
	threadErrs[tid] = s
	return C.int(code)
}

// explain gives comm a message for an error found by a query (which itself
// succeeded), unless it has one: strings handed out stay valid.
func explain(comm uintptr, err error) {
	errMu.Lock()
	defer errMu.Unlock()
	if commErrs[comm] == nil {
		commErrs[comm] = C.CString(err.Error())
	}
}

// forget drops a destroyed communicator's message.
func forget(comm uintptr) {
	errMu.Lock()
	if s := commErrs[comm]; s != nil {
		C.free(unsafe.Pointer(s))
	}
	delete(commErrs, comm)
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
	errMu.Lock()
	defer errMu.Unlock()
	if s := commErrs[uintptr(comm)]; s != nil {
		return s
	}
	if s := threadErrs[syscall.Gettid()]; s != nil {
		return s
	}
	return emptyString
}
