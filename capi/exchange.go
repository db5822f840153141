package main

// #include "gocl.h"
import "C"

import (
	"time"
	"unsafe"

	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/config"
)

// The rendezvous of a launcher's world: an id near MASTER_ADDR, and the
// authenticated exchange from_env runs (runtime/bootstrap/exchange.go).

//export goclgoGetUniqueIdAt
func goclgoGetUniqueIdAt(out *C.char, host *C.char) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("uniqueId"))
	}
	startup()
	h := ""
	if host != nil {
		h = C.GoString(host)
	}
	id, err := comm.NewUniqueIDAt(h)
	if err != nil {
		return record(0, err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), bootstrap.IDBytes), id[:])
	return 0
}

//export goclgoExchangeUniqueId
func goclgoExchangeUniqueId(out *C.char, host *C.char, port, rank, nranks, round C.int, secret *C.char, timeout C.double) (rc C.int) {
	defer guard(&rc, 0)
	if out == nil {
		return record(0, nullArg("uniqueId"))
	}
	if host == nil {
		return record(0, nullArg("host (rank 0's address, MASTER_ADDR)"))
	}
	startup()
	config.Reload()
	x := bootstrap.Exchange{Host: C.GoString(host), Port: int(port), Rank: int(rank), NRanks: int(nranks), Round: int(round)}
	if secret != nil {
		x.Secret = []byte(C.GoString(secret))
	} else {
		x.Secret = []byte(config.String("RENDEZVOUS_SECRET"))
	}
	t := time.Duration(float64(timeout) * float64(time.Second))
	if timeout < 0 {
		t = config.Timeout()
	} else if timeout > 1e9 { // beyond time.Duration: no limit
		t = 0
	}
	if t > 0 {
		x.Deadline = time.Now().Add(t)
	}
	id, err := comm.ExchangeUniqueID(x)
	if err != nil {
		return record(0, err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), bootstrap.IDBytes), id[:])
	return 0
}
