//go:build !amd64

package kernels

// No non-temporal stores on this architecture yet: ordinary copies.
func copyNontemporal(dst, src []byte) { copy(dst, src) }

func nontemporalFence() {}
