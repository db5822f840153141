package jaxffi

import (
	"sync"

	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/status"
)

// A session is this process's ranks of one communicator, from gocl.jax.init
// to gocl.jax.shutdown (the world is every process's): one lane per local
// device (ranks proc*ndev+i), each driven by its own goroutine.
type session struct {
	lanes   []*lane
	devices []int64 // XLA's device ordinal of each lane; nil: the lane index
}

// lane returns the lane of the device XLA runs a call on.
func (w *session) lane(ordinal int) *lane {
	for i, d := range w.devices {
		if d == int64(ordinal) {
			return w.lanes[i]
		}
	}
	if w.devices == nil && ordinal >= 0 && ordinal < len(w.lanes) {
		return w.lanes[ordinal]
	}
	return nil
}

var (
	sessionsMu  sync.Mutex
	sessions    = map[int64]*session{}
	nextSession int64
)

func newSession(id *bootstrap.ID, nprocs, proc, ndev int, devices []int64) (int64, error) {
	if ndev < 1 || nprocs < 1 || proc < 0 || proc >= nprocs {
		return 0, badArg("gocl.jax.init: need local_devices >= 1 and 0 <= rank < world_size, got local_devices=%d, rank=%d, world_size=%d", ndev, proc, nprocs)
	}
	keepResultMemory(proc * ndev)
	var comms []*comm.Comm
	var err error
	switch {
	case id == nil && nprocs == 1:
		comms, err = comm.InitAll(ndev, nil, comm.Options{})
	case id == nil:
		return 0, badArg("gocl.jax.init on rank %d: a world of %d processes needs the unique id from rank 0", proc, nprocs)
	default:
		comms = make([]*comm.Comm, ndev)
		err = status.Parallel(ndev, func(i int) (err error) {
			comms[i], err = comm.InitRank(*id, nprocs*ndev, proc*ndev+i, i, comm.Options{})
			return err
		})
		if err != nil {
			for _, c := range comms {
				if c != nil {
					c.Abort()
				}
			}
		}
	}
	if err != nil {
		return 0, err
	}
	w := &session{lanes: make([]*lane, ndev), devices: devices}
	for i, c := range comms {
		w.lanes[i] = newLane(c)
	}
	sessionsMu.Lock()
	defer sessionsMu.Unlock()
	nextSession++
	sessions[nextSession] = w
	return nextSession, nil
}

func (w *session) deviceList() []int64 {
	if w.devices != nil {
		return w.devices
	}
	l := make([]int64, len(w.lanes))
	for i := range l {
		l[i] = int64(i)
	}
	return l
}

func takeSession(h int64) *session {
	sessionsMu.Lock()
	defer sessionsMu.Unlock()
	w := sessions[h]
	delete(sessions, h)
	return w
}

func (w *session) close(abort bool) {
	for _, l := range w.lanes {
		l.stop(abort)
	}
}

// submit validates a call and runs it: on the caller's thread when its
// device's lane is idle (ran: err is the call's result), else later,
// finishing through the function later returns (called at most once, while
// the call cannot yet be run, so it may make an XLA future). A rejected call
// returns ran with its error.
func submit(h int64, ordinal int, site int64, r request, later func() func(error)) (ran bool, err error) {
	sessionsMu.Lock()
	w := sessions[h]
	sessionsMu.Unlock()
	if w == nil {
		return true, status.Errorf(status.InvalidUsage, "gocl.jax %s: session %d does not exist (it was shut down, or never made: call gocl.jax.init first)", kindName(r.kind), h)
	}
	l := w.lane(ordinal)
	if l == nil {
		return true, status.Errorf(status.InvalidUsage, "gocl.jax %s: the call runs on device %d, which is not one of the %d local devices gocl.jax.init made ranks for (devices %v): pass local_devices covering it", kindName(r.kind), ordinal, len(w.lanes), w.deviceList())
	}
	if err := r.check(l.c); err != nil {
		return true, err
	}
	return l.submit(site, r, later)
}
