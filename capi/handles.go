package main

import (
	"sync"

	"gocl/runtime/comm"
	"gocl/runtime/status"
	"gocl/runtime/stream"
)

// C sees communicators, streams and events as opaque pointers. They are
// numbers from this table, never Go pointers (C must not hold those), and
// never reused, so a stale handle is reported instead of aliasing a new one.
type handles struct {
	mu   sync.Mutex
	next uintptr
	objs map[uintptr]any
}

var table = handles{next: 0x1000, objs: map[uintptr]any{}}

func (h *handles) add(v any) uintptr {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next += 0x10
	h.objs[h.next] = v
	return h.next
}

func (h *handles) remove(id uintptr) {
	h.mu.Lock()
	delete(h.objs, id)
	h.mu.Unlock()
}

func lookup[T any](id uintptr, what string) (T, error) {
	var zero T
	if id == 0 {
		return zero, status.Errorf(status.InvalidArgument, "%s is NULL", what)
	}
	table.mu.Lock()
	v, ok := table.objs[id]
	table.mu.Unlock()
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
