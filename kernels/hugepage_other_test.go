//go:build !linux

package kernels

func benchBuffer(size int) []byte { return make([]byte, size) }
