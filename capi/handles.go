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
// ranks that are threads of one process do not contend on every call, and
// the handles used last sit in a few slots in front of it (hashing an
// interface key was a tenth of an 8-byte call).
type handles struct {
	next atomic.Uintptr
	objs sync.Map // uintptr -> *handle
	hot  [8]atomic.Pointer[handle]
}

type handle struct {
	id   uintptr
	v    any
	dead atomic.Bool // removed: a slot may still hold it for a moment
}

var table = func() *handles {
	h := &handles{}
	h.next.Store(0x1000)
	return h
}()

func (h *handles) add(v any) uintptr {
	id := h.next.Add(0x10)
	h.objs.Store(id, &handle{id: id, v: v})
	return id
}

func (h *handles) remove(id uintptr) {
	if e, ok := h.objs.LoadAndDelete(id); ok {
		e.(*handle).dead.Store(true)
	}
	slot := &h.hot[id>>4%uintptr(len(h.hot))]
	if e := slot.Load(); e != nil && e.id == id {
		slot.CompareAndSwap(e, nil)
	}
}

// get returns the live object behind id.
func (h *handles) get(id uintptr) (any, bool) {
	slot := &h.hot[id>>4%uintptr(len(h.hot))]
	if e := slot.Load(); e != nil && e.id == id && !e.dead.Load() {
		return e.v, true
	}
	v, ok := h.objs.Load(id)
	if !ok {
		return nil, false
	}
	e := v.(*handle)
	slot.Store(e)
	if e.dead.Load() { // removed since the Load: remove may have missed the slot
		slot.CompareAndSwap(e, nil)
		return nil, false
	}
	return e.v, true
}

func lookup[T any](id uintptr, what string) (T, error) {
	var zero T
	if id == 0 {
		return zero, status.Errorf(status.InvalidArgument, "%s is NULL", what)
	}
	v, ok := table.get(id)
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
