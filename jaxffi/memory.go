package jaxffi

/*
#include "memory.h"
*/
import "C"

import (
	"sync"

	"gocl/runtime/config"
	"gocl/runtime/debuglog"
)

// keepBytes is the most freed memory glibc keeps at its heap's top once
// gocl.jax has tuned it (memory.c): a few of the largest results a step
// makes, returned to the kernel beyond that.
const keepBytes = 256 << 20

var keepOnce sync.Once

// keepResultMemory tunes the process's malloc, once, so that XLA's result
// buffers are reused resident memory instead of fresh pages faulted in by
// the collective (GOCL_JAX_MALLOC=0 leaves malloc alone).
func keepResultMemory(rank int) {
	keepOnce.Do(func() {
		if !config.Bool("JAX_MALLOC") {
			return
		}
		if C.gocl_jax_keep_freed_memory(C.size_t(keepBytes)) == 0 {
			debuglog.Infof(debuglog.Init, rank, "gocl.jax: malloc left as configured (MALLOC_* or GLIBC_TUNABLES set, or not glibc): XLA's result buffers may be fresh pages")
		}
	})
}
