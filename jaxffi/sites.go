package jaxffi

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Sites are int64 hashes (gocl/_jax_sites.py); Python names each one it
// makes (file, line, function, and where in the compiled program), so an
// error can say which call of the user's program it is about.
var siteNames sync.Map // int64 -> string

// goclJaxNameSite records the description of a site (name: n bytes, not
// NUL-terminated).
//
//export goclJaxNameSite
func goclJaxNameSite(site C.int64_t, name *C.char, n C.size_t) {
	defer func() { _ = recover() }() // a panic must not cross into Python
	nameSite(int64(site), string(unsafe.Slice((*byte)(unsafe.Pointer(name)), int(n))))
}

func nameSite(site int64, name string) { siteNames.Store(site, name) }

// siteName describes a call: "the gocl.jax call at step.py:12 in step (in
// jit_step), execution 3"; a site Python did not name is given by number.
func siteName(t tag) string {
	where := fmt.Sprintf("site %d", t.site)
	if v, ok := siteNames.Load(t.site); ok {
		where = v.(string)
	}
	return fmt.Sprintf("the gocl.jax call at %s (its execution %d)", where, t.n+1)
}
