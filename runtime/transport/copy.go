package transport

import "gocl/kernels"

// CopyCached copies src into dst with ordinary, cached stores, for memory
// that the peer reads next (a FIFO slot, a lent buffer): Go's copy writes
// 1 MiB or more past the caches (non-temporal stores), which would send a
// slot to DRAM and make its reader fetch it back (kernels.Copy).
func CopyCached(dst, src []byte) int {
	n := min(len(dst), len(src))
	kernels.Copy(dst[:n], src[:n], false)
	return n
}
