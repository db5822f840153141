//go:build !cgo

// Package nvmlprobe reads GPU facts through NVML. This build has no cgo, so
// there is no NVML: the facts say so instead of failing.
package nvmlprobe

import "gocl/doctor"

// System marks the NVML facts as missing: NVML needs cgo.
func System(f *doctor.Facts) {
	f.NVML = &doctor.NVMLInfo{Status: "ERROR_NOT_BUILT", Error: "gocl-doctor was built with CGO_ENABLED=0"}
	f.MarkMissing("nvml", "gocl-doctor was built without cgo, so without NVML")
}
