package main

// #include "gocl.h"
import "C"

import (
	"math"
	"time"
	"unsafe"

	"gocl/runtime/comm"
	"gocl/runtime/status"
)

// options reads a goclConfig_t (nil: every setting from the environment).
// The size field lets an older caller pass a shorter struct: fields past
// its end are unset.
func options(cfg *C.goclConfig_t, rank int) (comm.Options, error) {
	var o comm.Options
	if cfg == nil {
		return o, nil
	}
	if uint32(cfg.magic) != C.GOCL_CONFIG_MAGIC {
		return o, status.Errorf(status.InvalidArgument,
			"rank %d: config has magic 0x%x instead of GOCL_CONFIG_MAGIC: start from goclConfig_t config = GOCL_CONFIG_INITIALIZER, then set its fields",
			rank, uint32(cfg.magic))
	}
	size := uintptr(cfg.size)
	if size < unsafe.Offsetof(cfg.timeout) {
		return o, status.Errorf(status.InvalidArgument,
			"rank %d: config.size is %d, smaller than any goclConfig_t: start from GOCL_CONFIG_INITIALIZER", rank, size)
	}
	if size >= unsafe.Offsetof(cfg.timeout)+unsafe.Sizeof(cfg.timeout) {
		t := float64(cfg.timeout)
		switch {
		case math.IsNaN(t) || math.IsInf(t, 0) || (t < 0 && t != C.GOCL_CONFIG_UNDEF_DOUBLE):
			return o, status.Errorf(status.InvalidArgument,
				"rank %d: config.timeout is %g: pass seconds >= 0 (0: no limit), or GOCL_CONFIG_UNDEF_DOUBLE for GOCL_TIMEOUT", rank, t)
		case t*float64(time.Second) >= math.MaxInt64: // centuries: no limit
			o.HasTimeout = true
		case t >= 0:
			o.Timeout, o.HasTimeout = time.Duration(t*float64(time.Second)), true
		}
	}
	return o, nil
}
