package doctor

import (
	"fmt"
	"strings"
)

var nvmlErrorFixes = map[string]string{
	"ERROR_LIB_RM_VERSION_MISMATCH": "The kernel module and the user-space driver differ (a driver upgrade without a reboot): reboot, or unload and reload the nvidia kernel modules.",
	"ERROR_DRIVER_NOT_LOADED":       "The nvidia kernel module is not loaded: sudo modprobe nvidia, and read dmesg for why it failed (an unsigned module under Secure Boot is a common cause).",
	"ERROR_NO_PERMISSION":           "This user cannot open /dev/nvidia*: add it to the group that owns them (ls -l /dev/nvidia*), or fix the udev rules / container device list.",
	"ERROR_GPU_IS_LOST":             "A GPU fell off the bus: read dmesg (Xid 79), check power and cooling, and reboot.",
	"ERROR_NOT_BUILT":               "This gocl-doctor was built with CGO_ENABLED=0, so it has no NVML: rebuild it with cgo (CGO_ENABLED=1 go build ./cmd/gocl-doctor) or install gocl from a wheel.",
}

// checkNVML is check "nvml" of kb.json: NVIDIA driver reachable through NVML.
func (j *judge) checkNVML() outcome {
	nv := j.f.NVML
	if nv == nil {
		return skip("no NVML facts%s", missingWhy(j.f, "nvml"))
	}
	if nv.Status == "ok" {
		return pass("driver %s, CUDA %s, %d GPU(s)", j.f.DriverVersion, j.driverCUDA(), len(j.f.GPUs))
	}
	var o outcome
	status := strings.TrimPrefix(nv.Status, "ERROR_")
	if nv.Status == "ERROR_LIBRARY_NOT_FOUND" {
		evidence := ""
		switch {
		case j.f.Kernel != nil && len(j.f.Kernel.DevNodes) > 0:
			evidence = strings.Join(j.f.Kernel.DevNodes, ", ") + " exist"
		case len(j.gpus) > 0:
			evidence = fmt.Sprintf("%s sees %d GPU(s)", j.gpus[0].Source, len(j.gpus))
		}
		consequence := "No GPU facts are available"
		if len(j.gpus) > 0 {
			consequence = "GPU facts come from " + j.gpus[0].Source + " only"
		}
		if evidence == "" {
			o.add("nvml-missing", map[string]any{"Status": status})
		} else {
			o.add("nvml-missing-with-gpu", map[string]any{"Status": status, "Evidence": evidence, "Consequence": consequence})
		}
		return o
	}
	fix, ok := nvmlErrorFixes[nv.Status]
	if !ok {
		fix = "Run nvidia-smi to see the driver's own error message."
	}
	o.add("nvml-error", map[string]any{"Status": status, "Error": nv.Error, "Fix": fix})
	return o
}

func missingWhy(f *Facts, fact string) string {
	if why, ok := f.Missing[fact]; ok {
		return ": " + why
	}
	return ""
}
