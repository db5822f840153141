// Package jaxffi runs gocl collectives inside jitted JAX programs: XLA FFI
// handlers (handlers.c, plain C: the registration handshake arrives with no
// execution context and must not need Go) decode the call frame and hand the
// call to a per-rank lane here, which runs collectives in an order every rank
// agrees on and completes XLA's future when done.
//
// It is linked into libgocl.so by a blank import in capi; Python (gocl.jax)
// makes sessions with goclJaxSessionInit and registers the goclJax* handlers with
// jax.ffi.register_ffi_target.
package jaxffi

/*
#cgo LDFLAGS: -ldl
#include <stdint.h>
#include <stdlib.h>
#include "xla_ffi.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gocl/runtime/bootstrap"
	"gocl/runtime/status"
)

// goclJaxSessionInit starts a session: this process's ranks of one
// communicator (gocl.jax.init to gocl.jax.shutdown), ndev ranks
// proc*ndev .. proc*ndev+ndev-1 of nprocs*ndev, joined through the 128-byte
// unique id uid (NULL with nprocs 1: an in-process world). devices (NULL,
// or ndev ids) are the device ordinals XLA reports for local rank 0, 1, ...
// (XLA:CPU under jax.distributed numbers devices across processes); without
// them ordinal i is local rank i. *out gets the session's handle for the
// handlers' comm attribute.
//
//export goclJaxSessionInit
func goclJaxSessionInit(uid *C.char, nprocs, proc, ndev C.int, devices *C.int64_t, out *C.int64_t, msg *C.char, msglen C.size_t) (rc C.int) {
	var err error
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(status.InternalError, "gocl.jax.init: internal error (a gocl bug, please report it): panic: %v", r)
		}
		rc = C.int(report(err, msg, msglen, false))
	}()
	var id *bootstrap.ID
	if uid != nil {
		id = new(bootstrap.ID)
		copy(id[:], unsafe.Slice((*byte)(unsafe.Pointer(uid)), bootstrap.IDBytes))
	}
	var devs []int64
	if devices != nil && ndev > 0 {
		devs = append(devs, unsafe.Slice((*int64)(unsafe.Pointer(devices)), int(ndev))...)
	}
	h, err := newSession(id, int(nprocs), int(proc), int(ndev), devs)
	if err == nil {
		*out = C.int64_t(h)
	}
	return 0
}

// goclJaxSessionDestroy waits for the session's queued calls and frees it; with
// abort != 0 it fails them instead, so peers fail rather than wait.
//
//export goclJaxSessionDestroy
func goclJaxSessionDestroy(h C.int64_t, abort C.int) {
	defer func() { _ = recover() }() // a panic must not cross into Python
	if w := takeSession(int64(h)); w != nil {
		w.close(abort != 0)
	}
}

// goclJaxSubmit is called by the handlers with a decoded call. It returns 0
// once the call is done, or queued with *fut set to the XLA future that
// finishes it (fut NULL, or no futures in api: it waits instead), else an
// XLA status code with gocl's sentence in msg.
//
//export goclJaxSubmit
func goclJaxSubmit(session C.int64_t, ordinal C.int32_t, kind C.int, send, recv unsafe.Pointer, nsend, nrecv C.int64_t,
	dtype C.int, op, root, site C.int64_t, perm *C.int64_t, nperm C.int64_t, api *C.gx_api, fut **C.gx_future,
	msg *C.char, msglen C.size_t) (rc C.int) {
	var err error
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(status.InternalError, "gocl.jax: internal error (a gocl bug, please report it): panic: %v", r)
		}
		rc = C.int(report(err, msg, msglen, true))
	}()
	r := request{kind: int(kind), send: send, recv: recv, nsend: int(nsend), nrecv: int(nrecv), dtype: int(dtype),
		op: int(op), root: int(root)}
	if nperm > 0 {
		r.perm = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(perm)), int(nperm))...)
	}
	var wait chan error
	later := func() func(error) {
		if fut != nil {
			if f := C.gocl_jax_future(api); f != nil {
				*fut = f
				return func(e error) { finish(api, f, e) }
			}
		}
		wait = make(chan error, 1)
		return func(e error) { wait <- e }
	}
	ran, err := submit(int64(session), int(ordinal), int64(site), r, later)
	if !ran && wait != nil {
		err = <-wait
	}
	return 0
}

// finish settles XLA's future (on its own goroutine: XLA may continue the
// program inline, which must not stall the lane).
func finish(api *C.gx_api, fut *C.gx_future, err error) {
	if err == nil {
		C.gocl_jax_finish(api, fut, nil, 0)
		return
	}
	m := C.CString(err.Error())
	defer C.free(unsafe.Pointer(m))
	C.gocl_jax_finish(api, fut, m, C.int(xlaCode(err)))
}

// report copies err's sentence into msg and returns its code: an XLA (absl)
// code when xla is set, else gocl's result code.
func report(err error, msg *C.char, msglen C.size_t, xla bool) int {
	if err == nil {
		return 0
	}
	if msglen > 0 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(msg)), int(msglen))
		n := copy(b[:len(b)-1], err.Error())
		b[n] = 0
	}
	if xla {
		return xlaCode(err)
	}
	return int(status.CodeOf(err))
}

// xlaCode maps gocl's result codes onto absl status codes.
func xlaCode(err error) int {
	switch status.CodeOf(err) {
	case status.InvalidArgument:
		return C.GX_INVALID_ARGUMENT
	case status.InvalidUsage:
		return C.GX_FAILED_PRECONDITION
	case status.RemoteError:
		return C.GX_UNAVAILABLE
	case status.Timeout:
		return C.GX_DEADLINE_EXCEEDED
	}
	return C.GX_INTERNAL
}

func badArg(format string, args ...any) error {
	return status.Errorf(status.InvalidArgument, "%s", fmt.Sprintf(format, args...))
}
