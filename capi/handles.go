package main

import (
	"sync"
	"sync/atomic"

	"gocl/runtime/comm"
	"gocl/runtime/status"
	"gocl/runtime/stream"
)

// C sees communicators, streams and events as opaque pointers. They are
// numbers from this table, never Go pointers (C must not hold those), and
// never reused, so a stale handle is reported instead of aliasing a new one.
// Every call looks its handles up: a sync.Map reads without a lock, so
// ranks that are threads of one process do not contend on every call.
type handles struct {
	next atomic.Uintptr
	objs sync.Map // uintptr -> any
}

var table = func() *handles {
	h := &handles{}
	h.next.Store(0x1000)
	return h
}()

func (h *handles) add(v any) uintptr {
	id := h.next.Add(0x10)
	h.objs.Store(id, v)
	return id
}

func (h *handles) remove(id uintptr) { h.objs.Delete(id) }

func lookup[T any](id uintptr, what string) (T, error) {
	var zero T
	if id == 0 {
		return zero, status.Errorf(status.InvalidArgument, "%s is NULL", what)
	}
	v, ok := table.objs.Load(id)
	t, isT := v.(T)
	if !ok || !isT {
		return zero, status.Errorf(status.InvalidArgument,
			"%s %#x is not a live %s: it was destroyed, never created, or is another kind of handle", what, id, what)
	}
	return t, nil
}

// commEntry is a communicator handle. An init inside a group is pending
// until goclGroupEnd; c is set then.
type commEntry struct {
	c *comm.Comm
}

func getComm(id uintptr) (*comm.Comm, error) {
	e, err := lookup[*commEntry](id, "comm")
	if err != nil {
		return nil, err
	}
	if e.c == nil {
		return nil, status.Errorf(status.InvalidUsage, "comm %#x is still being initialised: call goclGroupEnd first", id)
	}
	return e.c, nil
}

// getStream maps NULL to nil (run synchronously).
func getStream(id uintptr) (*stream.Stream, error) {
	if id == 0 {
		return nil, nil
	}
	return lookup[*stream.Stream](id, "stream")
}
