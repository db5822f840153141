package kernels

import (
	"syscall"
	"unsafe"
)

// benchBuffer returns a zeroed size-byte buffer for the benchmarks, backed
// by transparent huge pages where the kernel gives them (THP "madvise"
// mode): numpy asks for them on every large array, so the side-by-side
// benchmark compares kernels, not page sizes.
func benchBuffer(size int) []byte {
	const huge = 2 << 20
	if size < huge {
		return make([]byte, size)
	}
	raw := make([]byte, size+huge)
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (huge - 1))
	b := raw[off : off+size : off+size]
	_ = syscall.Madvise(b[:size&^(huge-1)], syscall.MADV_HUGEPAGE) // advice only
	return b
}
