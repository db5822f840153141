//go:build !amd64

package kernels

import "gocl/abi"

const simdName = "portable"

// cpuKernels: no vector kernels on this architecture yet.
func cpuKernels() *[abi.NumTypes]simdSet { return nil }
