//go:build !amd64

package kernels

const simdName = "portable"

// cpuKernels: no vector kernels on this architecture yet.
func cpuKernels() *[NumTypes]simdSet { return nil }
