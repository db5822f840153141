//go:build cgo

// Package nvmlprobe reads GPU facts through NVML (github.com/NVIDIA/go-nvml)
// for gocl-doctor. It lives in the gocl-doctor executable only, never in
// libgocl.so: go-nvml leaves the nvml* symbols undefined until it dlopens
// libnvidia-ml.so.1, which breaks ctypes.CDLL loading of a c-shared library.
//
// Every NVML call happens after a successful Init: without a driver, Init
// returns ERROR_LIBRARY_NOT_FOUND, and any later call would abort the
// process on an unresolved symbol.
package nvmlprobe

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"gocl/doctor"
)

// Lib is the part of NVML the doctor uses. nvml.New() (the real library)
// and go-nvml's mock servers (pkg/nvml/mock/...) satisfy it.
type Lib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	SystemGetNVMLVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// System is the collector gocl-doctor uses: the machine's NVML.
func System(f *doctor.Facts) { Collect(nvml.New(), f) }

// Collect fills the NVML facts from lib. It never panics: a device method
// that misbehaves (or a mock left without an implementation) leaves that
// one fact out.
func Collect(lib Lib, f *doctor.Facts) {
	ret := safeReturn(lib.Init)
	if ret != nvml.SUCCESS {
		f.NVML = &doctor.NVMLInfo{Status: returnName(ret), Error: errorString(ret)}
		why := "nvml.Init: " + returnName(ret)
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			why = "libnvidia-ml.so.1 not found (no NVIDIA driver)"
		}
		f.MarkMissing("nvml", why)
		return
	}
	defer safeReturn(lib.Shutdown)
	f.NVML = &doctor.NVMLInfo{Status: "ok"}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		f.NVML.Version = v
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		f.DriverVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		f.CUDADriverVersion = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		f.MarkMissing("gpus", "nvml.DeviceGetCount: "+returnName(ret))
		return
	}
	var devs []nvml.Device
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			f.MarkMissing(fmt.Sprintf("gpus[%d]", i), "nvml.DeviceGetHandleByIndex: "+returnName(ret))
			continue
		}
		devs = append(devs, d)
		f.GPUs = append(f.GPUs, gpu(i, d))
	}
	if len(devs) != n || n < 2 {
		return
	}
	f.P2P = &doctor.P2P{
		Read:    p2pMatrix(devs, nvml.P2P_CAPS_INDEX_READ),
		Write:   p2pMatrix(devs, nvml.P2P_CAPS_INDEX_WRITE),
		NVLink:  p2pMatrix(devs, nvml.P2P_CAPS_INDEX_NVLINK),
		Atomics: p2pMatrix(devs, nvml.P2P_CAPS_INDEX_ATOMICS),
	}
	f.Topology = &doctor.Topology{Matrix: topologyMatrix(devs, f.GPUs)}
}

func gpu(i int, d nvml.Device) doctor.GPU {
	g := doctor.GPU{Index: i, Source: "nvml"}
	guard(func() {
		if v, ret := d.GetName(); ret == nvml.SUCCESS {
			g.Name = v
		}
	})
	guard(func() {
		if maj, min, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
			g.ComputeCapability = fmt.Sprintf("%d.%d", maj, min)
		}
	})
	guard(func() {
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = m.Total
		}
	})
	guard(func() {
		if v, ret := d.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = v
		}
	})
	guard(func() {
		if p, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.PCIBusID = busID(p)
		}
	})
	guard(func() {
		if a, ret := d.GetArchitecture(); ret == nvml.SUCCESS {
			g.Architecture = archName(a)
		}
	})
	guard(func() {
		if b, ret := d.GetBrand(); ret == nvml.SUCCESS {
			g.Brand = doctor.BrandName(int(b))
		}
	})
	guard(func() {
		for link := range nvml.NVLINK_MAX_LINKS {
			st, ret := d.GetNvLinkState(link)
			if ret != nvml.SUCCESS {
				break // NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
			}
			if st == nvml.FEATURE_ENABLED {
				g.NVLinkActive++
			}
		}
	})
	return g
}

// busID turns NVML's "00000000:01:00.0" into sysfs's "0000:01:00.0".
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return doctor.SysfsBusID(b.String(), p.Domain, p.Bus, p.Device)
}

func p2pMatrix(devs []nvml.Device, idx nvml.GpuP2PCapsIndex) [][]string {
	m := make([][]string, len(devs))
	for i := range devs {
		m[i] = make([]string, len(devs))
		for j := range devs {
			if i == j {
				m[i][j] = "X"
				continue
			}
			m[i][j] = "ERR"
			guard(func() {
				st, ret := devs[i].GetP2PStatus(devs[j], idx)
				if ret == nvml.SUCCESS {
					m[i][j] = doctor.P2PStatusName(int(st))
				}
			})
		}
	}
	return m
}

var topoNames = map[nvml.GpuTopologyLevel]string{
	nvml.TOPOLOGY_INTERNAL:   "X",
	nvml.TOPOLOGY_SINGLE:     "PIX",
	nvml.TOPOLOGY_MULTIPLE:   "PXB",
	nvml.TOPOLOGY_HOSTBRIDGE: "PHB",
	nvml.TOPOLOGY_NODE:       "NODE",
	nvml.TOPOLOGY_SYSTEM:     "SYS",
}

// topologyMatrix is nvidia-smi topo -m: NV<n> when the pair is linked by
// NVLink (NVML reports P2P over NVLink and the first GPU has n active
// links; with an NVSwitch that is the GPU's link count), else the PCIe
// common ancestor.
func topologyMatrix(devs []nvml.Device, gpus []doctor.GPU) [][]string {
	m := make([][]string, len(devs))
	for i := range devs {
		m[i] = make([]string, len(devs))
		for j := range devs {
			if i == j {
				m[i][j] = "X"
				continue
			}
			m[i][j] = "?"
			nvlink := false
			guard(func() {
				st, ret := devs[i].GetP2PStatus(devs[j], nvml.P2P_CAPS_INDEX_NVLINK)
				nvlink = ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK
			})
			if nvlink && gpus[i].NVLinkActive > 0 {
				m[i][j] = fmt.Sprintf("NV%d", gpus[i].NVLinkActive)
				continue
			}
			guard(func() {
				lvl, ret := devs[i].GetTopologyCommonAncestor(devs[j])
				if ret == nvml.SUCCESS {
					if name, ok := topoNames[lvl]; ok {
						m[i][j] = name
					}
				}
			})
		}
	}
	return m
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	}
	return fmt.Sprintf("arch-%d", a)
}

func returnName(r nvml.Return) string { return doctor.NVMLReturnName(int(r)) }

// errorString is NVML's text; go-nvml answers it without the library.
func errorString(r nvml.Return) (s string) {
	defer func() {
		if recover() != nil {
			s = returnName(r)
		}
	}()
	return r.Error()
}

func safeReturn(f func() nvml.Return) (r nvml.Return) {
	defer func() {
		if recover() != nil {
			r = nvml.ERROR_UNKNOWN
		}
	}()
	return f()
}

func guard(f func()) {
	defer func() { _ = recover() }()
	f()
}
