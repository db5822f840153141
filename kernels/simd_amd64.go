package kernels

import "gocl/abi"

//go:generate go run ./gen

const simdName = "avx2"

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax uint32)

// hasAVX2 reports AVX2 and F16C with the OS saving YMM state (OSXSAVE and
// XCR0 bits 1 and 2), checked once at start-up.
var hasAVX2 = func() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx, f16c = 1 << 27, 1 << 28, 1 << 29
	if ecx1&(osxsave|avx|f16c) != osxsave|avx|f16c || xgetbv()&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}()

// cpuKernels returns the kernel table this CPU can run, or nil.
func cpuKernels() *[abi.NumTypes]simdSet {
	if hasAVX2 {
		return &avx2Kernels
	}
	return nil
}
