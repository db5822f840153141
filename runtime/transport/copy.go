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
