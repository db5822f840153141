//go:build !amd64

package kernels

// No streaming stores on this architecture yet: ordinary copies.
func copyStream(dst, src []byte) { copy(dst, src) }

func streamFence() {}
