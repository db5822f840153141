package transport

// hotPiece stays below the size from which Go's memmove on amd64 switches
// to non-temporal stores (1 MiB), which bypass the cache.
const hotPiece = 512 << 10

// CopyHot is copy for memory a peer reads next (a FIFO, a lent slot): it
// copies in pieces small enough to be written through the cache, so the
// reader finds the bytes in cache instead of in DRAM. Measured on a 2-core
// EPYC VM, 1 MiB written into a FIFO and read back: 5.3 GB/s with one copy
// (non-temporal), 13.9 GB/s in 512 KiB pieces; 64 MiB in 1 MiB chunks: 3.0
// against 10.5 GB/s.
func CopyHot(dst, src []byte) int {
	n := min(len(dst), len(src))
	for off := 0; off < n; off += hotPiece {
		end := min(off+hotPiece, n)
		copy(dst[off:end], src[off:end])
	}
	return n
}

// HotCall is the size of call up to which CopyOut keeps results in cache
// (the reduction kernels stream from the same size on).
const HotCall = 8 << 20

// CopyOut copies a received payload into the caller's buffer, for a call
// moving callBytes per rank: through the cache when the call fits in it,
// so the rank's next step and the caller find it there (1 MiB pieces: 15
// against 23 GB/s), else with Go's copy, whose non-temporal stores (from
// 1 MiB) skip reading the destination first (64 MiB in 1 MiB pieces: 7.0
// against 2.3 GB/s).
func CopyOut(dst, src []byte, callBytes int) int {
	if callBytes < HotCall {
		return CopyHot(dst, src)
	}
	return copy(dst, src)
}
