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

func setString(m map[uintptr]*C.char, k uintptr, s *C.char) {
	if old := m[k]; old != nil {
		C.free(unsafe.Pointer(old))
	}
	m[k] = s
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
		setString(commErrs, comm, C.CString(msg))
	}
	if old := threadErrs[tid]; old != nil {
		C.free(unsafe.Pointer(old))
	}
	threadErrs[tid] = C.CString(msg)
	return C.int(code)
}

// forget drops a destroyed communicator's message.
func forget(comm uintptr) {
	errMu.Lock()
	setString(commErrs, comm, nil)
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
