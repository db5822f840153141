package kernels

import "unsafe"

// copyNT copies n bytes (a multiple of 32) to a 32-byte aligned d with
// non-temporal stores, without a fence (nontemporalFence orders them).
//
//go:noescape
func copyNT(d, s *byte, n int)

func sfence()

// canNontemporal: AVX (implied by hasAVX2), and not under the race detector,
// which cannot see memory that assembly writes.
var canNontemporal = hasAVX2 && !raceEnabled

// copyNontemporal copies src into dst (equal lengths) with non-temporal stores
// for the 32-byte aligned middle of dst and ordinary ones for its ends.
// The caller runs nontemporalFence before anyone else may read dst.
func copyNontemporal(dst, src []byte) {
	if !canNontemporal || len(dst) < 256 {
		copy(dst, src)
		return
	}
	head := int(-uintptr(unsafe.Pointer(&dst[0])) & 31)
	copy(dst[:head], src[:head])
	n := (len(dst) - head) &^ 31
	copyNT(&dst[head], &src[head], n)
	copy(dst[head+n:], src[head+n:])
}

// nontemporalFence makes the non-temporal stores before it visible to other
// cores before any later store (x86's non-temporal stores are weakly ordered).
func nontemporalFence() {
	if canNontemporal {
		sfence()
	}
}
