//go:build !amd64

package kernels

const simdName = "portable"

// simdKernels: no vector kernels on this architecture yet.
func simdKernels() *[NumTypes]simdSet { return nil }
