//go:build cgo

package nvmlprobe

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"gocl/doctor"
)

// The DGX H100 mock as shipped: names, capabilities, memory and driver come
// through; it implements no P2P or topology call, and those facts come out
// as "ERR"/"?" instead of a crash.
func TestDGXH100Mock(t *testing.T) {
	var f doctor.Facts
	Collect(dgxh100.New(), &f)
	if f.NVML == nil || f.NVML.Status != "ok" || f.NVML.Version != "12.550.54.15" {
		t.Fatalf("nvml %+v", f.NVML)
	}
	if f.DriverVersion != "550.54.15" || f.CUDADriverVersion != 12040 {
		t.Errorf("driver %q cuda %d", f.DriverVersion, f.CUDADriverVersion)
	}
	if len(f.GPUs) != 8 {
		t.Fatalf("%d GPUs", len(f.GPUs))
	}
	g := f.GPUs[3]
	if g.Index != 3 || g.Name != "NVIDIA H100 80GB HBM3" || g.ComputeCapability != "9.0" ||
		g.MemoryBytes != 80*1024*1024*1024 || g.Architecture != "hopper" || g.Brand != "nvidia" ||
		!strings.HasPrefix(g.UUID, "GPU-") || g.Source != "nvml" {
		t.Errorf("gpu %+v", g)
	}
	if f.P2P == nil || f.P2P.Read[0][1] != "ERR" || f.P2P.Read[2][2] != "X" {
		t.Errorf("p2p %+v", f.P2P)
	}
	if f.Topology == nil || f.Topology.Matrix[0][1] != "?" {
		t.Errorf("topology %+v", f.Topology)
	}
	r := doctor.Judge(&f, nil)
	for _, fd := range r.Findings {
		if fd.Severity != "info" {
			t.Errorf("%s %s: %s", fd.Severity, fd.ID, fd.Message)
		}
	}
}

// The DGX H100 with its NVSwitch fabric filled in: NVLink P2P everywhere,
// 18 links per GPU, so the topology matrix reads NV18 as nvidia-smi does.
func TestDGXH100WithNVLink(t *testing.T) {
	s := dgxh100.New()
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if link >= 18 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
	}
	var f doctor.Facts
	Collect(s, &f)
	if f.GPUs[0].NVLinkActive != 18 {
		t.Errorf("nvlinks %d", f.GPUs[0].NVLinkActive)
	}
	if got := f.Topology.Matrix[1][6]; got != "NV18" {
		t.Errorf("topology %s", got)
	}
	if got := f.P2P.NVLink[1][6]; got != "OK" {
		t.Errorf("nvlink p2p %s", got)
	}
	// Datacenter NVLink GPUs are not the P2P-over-IOMMU case.
	f.Kernel = &doctor.Kernel{IOMMU: "translated"}
	for _, fd := range doctor.Judge(&f, nil).Findings {
		if strings.HasPrefix(fd.ID, "p2p-") {
			t.Errorf("unexpected %s", fd.ID)
		}
	}
}

func TestDGXA100Mock(t *testing.T) {
	var f doctor.Facts
	Collect(dgxa100.New(), &f)
	if len(f.GPUs) != 8 || f.GPUs[0].ComputeCapability != "8.0" || f.GPUs[0].Architecture != "ampere" {
		t.Fatalf("gpus %+v", f.GPUs)
	}
}

var (
	rtx5090 = gpus.Config{
		Name: "NVIDIA GeForce RTX 5090", Architecture: nvml.DEVICE_ARCH_BLACKWELL, Brand: nvml.BRAND_GEFORCE_RTX,
		MemoryMB: 32607, CudaMajor: 12, CudaMinor: 0, PciDeviceId: 0x2B8510DE,
	}
	rtxPro6000 = gpus.Config{
		Name: "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", Architecture: nvml.DEVICE_ARCH_BLACKWELL, Brand: nvml.BRAND_NVIDIA_RTX,
		MemoryMB: 97887, CudaMajor: 12, CudaMinor: 0, PciDeviceId: 0x2BB110DE,
	}
)

// pcie builds a two-GPU workstation: PCIe only, the given P2P answer, the
// given common ancestor, and real-looking PCI addresses.
func pcie(cfg gpus.Config, p2p nvml.GpuP2PStatus, topo nvml.GpuTopologyLevel, driver string, cuda int) *server.Server {
	s := server.NewServerWithGPUs(driver, "12."+driver, cuda, cfg, cfg)
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		bus := []string{"00000000:01:00.0", "00000000:C1:00.0"}[i]
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j := range bus {
				p.BusId[j] = int8(bus[j])
			}
			return p, nvml.SUCCESS
		}
		dev.GetP2PStatusFunc = func(_ nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if idx == nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			return p2p, nvml.SUCCESS
		}
		dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return topo, nvml.SUCCESS
		}
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	return s
}

func TestRTX5090PairHasNoP2P(t *testing.T) {
	var f doctor.Facts
	Collect(pcie(rtx5090, nvml.P2P_STATUS_NOT_SUPPORTED, nvml.TOPOLOGY_HOSTBRIDGE, "575.57.08", 12090), &f)
	if f.GPUs[1].PCIBusID != "0000:c1:00.0" || f.GPUs[0].ComputeCapability != "12.0" || f.GPUs[0].Brand != "geforce_rtx" {
		t.Errorf("gpu %+v", f.GPUs[1])
	}
	if f.Topology.Matrix[0][1] != "PHB" || f.P2P.Read[0][1] != "NOT_SUPPORTED" || f.P2P.Write[1][0] != "NOT_SUPPORTED" {
		t.Errorf("topology %v p2p %v", f.Topology.Matrix, f.P2P.Read)
	}
	f.Kernel = &doctor.Kernel{IOMMU: "translated"}
	r := doctor.Judge(&f, nil)
	var got []string
	for _, fd := range r.Findings {
		got = append(got, fd.ID)
	}
	if !slices.Contains(got, "p2p-unsupported") || slices.Contains(got, "p2p-unsafe-iommu") {
		t.Errorf("findings %v", got)
	}
}

func TestRTXPro6000PairWithIOMMU(t *testing.T) {
	var f doctor.Facts
	Collect(pcie(rtxPro6000, nvml.P2P_STATUS_OK, nvml.TOPOLOGY_NODE, "580.82.07", 13000), &f)
	if f.Topology.Matrix[1][0] != "NODE" || f.P2P.Read[0][1] != "OK" {
		t.Fatalf("topology %v p2p %v", f.Topology.Matrix, f.P2P.Read)
	}
	f.Kernel = &doctor.Kernel{IOMMU: "translated", CmdlineIOMMU: []string{"amd_iommu=on"}}
	r := doctor.Judge(&f, nil)
	found := false
	for _, fd := range r.Findings {
		if fd.ID == "p2p-unsafe-iommu" {
			found = true
			if !strings.Contains(fd.Message, "amd_iommu=on") {
				t.Errorf("message %s", fd.Message)
			}
		}
	}
	if !found || r.RecommendedEnv["NCCL_P2P_DISABLE"].Value != "1" {
		t.Errorf("findings %+v env %+v", r.Findings, r.RecommendedEnv)
	}
}

// Without a driver, Init fails and nothing else may be called: the real
// library would abort the process on the first unresolved nvml* symbol.
// The bare mock panics on any method without an implementation, so a call
// after the failed Init fails this test.
func TestNoCallAfterFailedInit(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		var f doctor.Facts
		Collect(lib, &f)
		if f.NVML == nil || f.NVML.Status != returnName(ret) || len(f.GPUs) != 0 {
			t.Errorf("%v: facts %+v", ret, f.NVML)
		}
		if _, ok := f.Missing["nvml"]; !ok {
			t.Errorf("%v: nvml not marked missing", ret)
		}
		if len(lib.InitCalls()) != 1 || len(lib.ShutdownCalls()) != 0 {
			t.Errorf("%v: init %d shutdown %d", ret, len(lib.InitCalls()), len(lib.ShutdownCalls()))
		}
	}
}

func TestShutdownAfterSuccessfulInit(t *testing.T) {
	s := dgxa100.New()
	Collect(s, &doctor.Facts{})
	if len(s.ShutdownCalls()) != 1 {
		t.Errorf("shutdown called %d times", len(s.ShutdownCalls()))
	}
}

// The real library on this machine: with a driver it answers, without one
// Init reports LIBRARY_NOT_FOUND; either way no crash.
func TestSystemNVML(t *testing.T) {
	var f doctor.Facts
	System(&f)
	if f.NVML == nil {
		t.Fatal("no NVML facts")
	}
	t.Logf("NVML status %s, driver %q, %d GPU(s)", f.NVML.Status, f.DriverVersion, len(f.GPUs))
	if f.NVML.Status != "ok" && f.Missing["nvml"] == "" {
		t.Error("failed NVML not marked missing")
	}
}

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{"00000000:01:00.0": "0000:01:00.0", "00000001:C1:00.0": "0001:c1:00.0", "0000:02:00.0": "0000:02:00.0"} {
		var p nvml.PciInfo
		for i := range in {
			p.BusId[i] = int8(in[i])
		}
		if got := busID(p); got != want {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
	}
	if got := busID(nvml.PciInfo{Domain: 0, Bus: 0x41}); got != "0000:41:00.0" {
		t.Errorf("from numbers: %s", got)
	}
}
