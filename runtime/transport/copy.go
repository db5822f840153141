package transport

// CopyCached copies src into dst with ordinary, cached stores, for memory
// that the peer reads next (a FIFO slot, a lent buffer). Go's copy streams
// 1 MiB or more past the caches with non-temporal stores, which would send
// a slot to DRAM and make its reader fetch it back from there; pieces under
// that size stay in the shared cache.
func CopyCached(dst, src []byte) int {
	const step = 512 << 10 // under runtime.memmove's non-temporal threshold
	n := min(len(dst), len(src))
	for o := 0; o < n; o += step {
		e := min(o+step, n)
		copy(dst[o:e], src[o:e])
	}
	return n
}
