package main

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "nvml.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"gocl/doctor"
)

// libgocl's own NVML reader. gocl-doctor reads NVML through go-nvml
// (doctor/nvmlprobe), which libgocl.so must not import: go-nvml leaves the
// nvml* symbols undefined, and ctypes.CDLL then fails to load the library
// on machines where NVML is not already loaded globally. Here nvml.c
// dlopens libnvidia-ml.so.1 itself and reads a small subset of the facts.

var _ doctor.NVMLCollector = nvmlFacts

func nvmlReturnName(rc C.int) string {
	switch rc {
	case C.GOCL_NVML_NO_SYMBOL:
		return "ERROR_FUNCTION_NOT_FOUND"
	case C.GOCL_NVML_NOT_ASKED:
		return "NOT_ASKED"
	}
	return doctor.NVMLReturnName(int(rc))
}

// nvmlFacts is a doctor.NVMLCollector over libgocl's dlopen reader: it fills
// f.NVML, DriverVersion, CUDADriverVersion, GPUs and P2P (read and write),
// and names in f.Missing what it could not learn. One cgo call; it never
// panics and never calls NVML before a successful nvmlInit_v2.
func nvmlFacts(f *doctor.Facts) {
	p := (*C.goclNvmlProbe)(C.calloc(1, C.sizeof_goclNvmlProbe))
	if p == nil {
		f.NVML = &doctor.NVMLInfo{Status: "ERROR_UNKNOWN", Error: "out of memory"}
		f.MarkMissing("nvml", "out of memory")
		return
	}
	defer C.free(unsafe.Pointer(p))
	C.goclNvmlRun(p)

	switch {
	case p.loaded == 0:
		f.NVML = &doctor.NVMLInfo{Status: "ERROR_LIBRARY_NOT_FOUND", Error: C.GoString(&p.load_error[0])}
		f.MarkMissing("nvml", "libnvidia-ml.so.1 not found (no NVIDIA driver)")
		return
	case p.missing_symbol[0] != 0:
		sym := C.GoString(&p.missing_symbol[0])
		f.NVML = &doctor.NVMLInfo{Status: "ERROR_FUNCTION_NOT_FOUND", Error: "libnvidia-ml.so.1 has no " + sym}
		f.MarkMissing("nvml", "libnvidia-ml.so.1 has no "+sym)
		return
	case p.init_rc != C.GOCL_NVML_SUCCESS:
		name := nvmlReturnName(p.init_rc)
		f.NVML = &doctor.NVMLInfo{Status: name, Error: fmt.Sprintf("nvmlInit_v2 returned %d", int(p.init_rc))}
		f.MarkMissing("nvml", "nvmlInit_v2: "+name)
		return
	}
	f.NVML = &doctor.NVMLInfo{Status: "ok"}
	if p.driver_rc == C.GOCL_NVML_SUCCESS {
		f.DriverVersion = C.GoString(&p.driver[0])
	} else {
		f.MarkMissing("driver_version", "nvmlSystemGetDriverVersion: "+nvmlReturnName(p.driver_rc))
	}
	if p.cuda_rc == C.GOCL_NVML_SUCCESS {
		f.CUDADriverVersion = int(p.cuda)
	} else {
		f.MarkMissing("cuda_driver_version", "nvmlSystemGetCudaDriverVersion: "+nvmlReturnName(p.cuda_rc))
	}
	if p.count_rc != C.GOCL_NVML_SUCCESS {
		f.MarkMissing("gpus", "nvmlDeviceGetCount_v2: "+nvmlReturnName(p.count_rc))
		return
	}
	n := int(p.ngpus)
	if uint(p.count) > uint(n) {
		f.MarkMissing(fmt.Sprintf("gpus[%d:]", n), fmt.Sprintf("NVML reports %d GPUs; libgocl reads the first %d", uint(p.count), n))
	}
	for i := range n {
		g := &p.gpus[i]
		if g.handle_rc != C.GOCL_NVML_SUCCESS {
			f.MarkMissing(fmt.Sprintf("gpus[%d]", i), "nvmlDeviceGetHandleByIndex_v2: "+nvmlReturnName(g.handle_rc))
			continue
		}
		gpu := doctor.GPU{Index: i, Source: "nvml"}
		if g.name_rc == C.GOCL_NVML_SUCCESS {
			gpu.Name = C.GoString(&g.name[0])
		}
		if g.cc_rc == C.GOCL_NVML_SUCCESS {
			gpu.ComputeCapability = fmt.Sprintf("%d.%d", int(g.cc_major), int(g.cc_minor))
		}
		if g.pci_rc == C.GOCL_NVML_SUCCESS {
			gpu.PCIBusID = doctor.SysfsBusID(C.GoString(&g.pci.busId[0]),
				uint32(g.pci.domain), uint32(g.pci.bus), uint32(g.pci.device))
		}
		if g.brand_rc == C.GOCL_NVML_SUCCESS {
			gpu.Brand = doctor.BrandName(int(g.brand))
		}
		f.GPUs = append(f.GPUs, gpu)
	}
	switch p.p2p_asked {
	case 1:
		f.P2P = &doctor.P2P{
			Read:  p2pNames(n, &p.p2p_read_rc, &p.p2p_read),
			Write: p2pNames(n, &p.p2p_write_rc, &p.p2p_write),
		}
	case C.GOCL_NVML_NO_SYMBOL:
		f.MarkMissing("p2p", "libnvidia-ml.so.1 has no nvmlDeviceGetP2PStatus")
	}
}

// p2pNames turns one status matrix into the facts' names: "X" on the
// diagonal, "ERR" where NVML failed to answer.
func p2pNames(n int, rc, status *[C.GOCL_NVML_MAX_GPUS][C.GOCL_NVML_MAX_GPUS]C.int) [][]string {
	m := make([][]string, n)
	for i := range n {
		m[i] = make([]string, n)
		for j := range n {
			switch {
			case i == j:
				m[i][j] = "X"
			case rc[i][j] != C.GOCL_NVML_SUCCESS:
				m[i][j] = "ERR"
			default:
				m[i][j] = doctor.P2PStatusName(int(status[i][j]))
			}
		}
	}
	return m
}

// nvmlFactsJSON is the subset of doctor.Facts that nvmlFacts fills.
type nvmlFactsJSON struct {
	NVML              *doctor.NVMLInfo  `json:"nvml,omitempty"`
	DriverVersion     string            `json:"driver_version,omitempty"`
	CUDADriverVersion int               `json:"cuda_driver_version,omitempty"`
	GPUs              []doctor.GPU      `json:"gpus,omitempty"`
	P2P               *doctor.P2P       `json:"p2p,omitempty"`
	Missing           map[string]string `json:"missing,omitempty"`
}

// goclgoNVMLFactsJSON is INTERNAL, for tests (tests/python/test_nvml_shim.py):
// nvmlFacts as JSON, malloc'd (the caller frees it with free()). Declared in
// nvml.h only, never in the public gocl.h.
//
//export goclgoNVMLFactsJSON
func goclgoNVMLFactsJSON() (js *C.char) {
	defer func() { // no panic crosses the C boundary
		if r := recover(); r != nil {
			out, _ := json.Marshal(map[string]string{"error": fmt.Sprint(r)})
			js = C.CString(string(out))
		}
	}()
	var f doctor.Facts
	nvmlFacts(&f)
	out, err := json.Marshal(nvmlFactsJSON{
		NVML: f.NVML, DriverVersion: f.DriverVersion, CUDADriverVersion: f.CUDADriverVersion,
		GPUs: f.GPUs, P2P: f.P2P, Missing: f.Missing,
	})
	if err != nil {
		out, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return C.CString(string(out))
}
