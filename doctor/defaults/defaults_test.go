package defaults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gocl/doctor"
	"gocl/doctor/sysfs"
	"gocl/runtime/config"
)

var logFile string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gocl-defaults")
	if err != nil {
		panic(err)
	}
	logFile = filepath.Join(dir, "log")
	os.Setenv("GOCL_DEBUG", "INFO")
	os.Setenv("GOCL_DEBUG_SUBSYS", "ENV")
	os.Setenv("GOCL_DEBUG_FILE", logFile)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gpus is an NVML reader reporting n GPUs of one model, every pair with
// the given P2P status.
func gpus(name, cc, brand string, n int, p2p string) doctor.NVMLCollector {
	return func(f *doctor.Facts) {
		f.NVML = &doctor.NVMLInfo{Status: "ok"}
		f.DriverVersion, f.CUDADriverVersion = "580.82.07", 13000
		m := make([][]string, n)
		for i := range n {
			f.GPUs = append(f.GPUs, doctor.GPU{Index: i, Name: name, ComputeCapability: cc, Brand: brand,
				PCIBusID: []string{"0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"}[i], Source: "nvml"})
			m[i] = make([]string, n)
			for j := range n {
				m[i][j] = p2p
				if i == j {
					m[i][j] = "X"
				}
			}
		}
		if n > 1 {
			f.P2P = &doctor.P2P{Read: m, Write: m}
		}
	}
}

var (
	pro6000 = gpus("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "nvidia_rtx", 2, "OK")
	rtx5090 = gpus("NVIDIA GeForce RTX 5090", "12.0", "geforce_rtx", 2, "NOT_SUPPORTED")
	h100    = gpus("NVIDIA H100 80GB HBM3", "9.0", "nvidia", 2, "OK")
	noNVML  = func(f *doctor.Facts) {
		f.NVML = &doctor.NVMLInfo{Status: "ERROR_LIBRARY_NOT_FOUND"}
		f.MarkMissing("nvml", "libnvidia-ml.so.1 not found (no NVIDIA driver)")
	}
)

// machine is a procfs/sysfs tree whose IOMMU groups have type groupType
// ("DMA": the IOMMU translates device DMA; "identity": passthrough).
func machine(t *testing.T, groupType, cmdline string) sysfs.System {
	root := t.TempDir()
	for p, data := range map[string]string{
		"proc/cmdline":                   cmdline + "\n",
		"sys/kernel/iommu_groups/0/type": groupType + "\n",
		"sys/kernel/iommu_groups/1/type": groupType + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sysfs.System{Root: root}
}

// clean leaves NCCL_P2P_DISABLE unset for the test (restored afterwards).
func clean(t *testing.T, set map[string]string) {
	t.Setenv("NCCL_P2P_DISABLE", "")
	os.Unsetenv("NCCL_P2P_DISABLE")
	for k, v := range set {
		t.Setenv(k, v)
	}
	config.Reload()
	t.Cleanup(config.Reload)
	os.Truncate(logFile, 0)
}

func logged(t *testing.T) string {
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWorkstationBlackwellBehindIOMMUGetsNCCLP2POff(t *testing.T) {
	clean(t, nil)
	set, kept := apply(pro6000, machine(t, "DMA", "BOOT_IMAGE=/vmlinuz amd_iommu=on"))
	if len(set) != 1 || set[0].Name != "NCCL_P2P_DISABLE" || set[0].Value != "1" || set[0].Rule != "p2p-unsafe-iommu" || len(kept) != 0 {
		t.Fatalf("set %+v kept %+v", set, kept)
	}
	if v, ok := os.LookupEnv("NCCL_P2P_DISABLE"); !ok || v != "1" {
		t.Fatalf("NCCL_P2P_DISABLE in the environment: %q %v", v, ok)
	}
	// gocl's own in-process path stays: its setting does not fall back to it.
	if v, src := config.Source("P2P_DISABLE"); v != "0" || src != "default" {
		t.Errorf("GOCL_P2P_DISABLE now %q from %s", v, src)
	}
	log := logged(t)
	for _, want := range []string{"NCCL_P2P_DISABLE=1 set by gocl", "rule p2p-unsafe-iommu", "IOMMU", "GOCL_DEFAULTS=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestUserSettingIsNeverOverridden(t *testing.T) {
	clean(t, map[string]string{"NCCL_P2P_DISABLE": "0"})
	set, kept := apply(pro6000, machine(t, "DMA", "intel_iommu=on"))
	if len(set) != 0 || len(kept) != 1 || kept[0].User != "0" {
		t.Fatalf("set %+v kept %+v", set, kept)
	}
	if v := os.Getenv("NCCL_P2P_DISABLE"); v != "0" {
		t.Fatalf("NCCL_P2P_DISABLE overridden: %q", v)
	}
	if log := logged(t); !strings.Contains(log, `NCCL_P2P_DISABLE="0" kept as you set it`) {
		t.Errorf("log:\n%s", log)
	}
}

func TestDefaultsOff(t *testing.T) {
	clean(t, map[string]string{"GOCL_DEFAULTS": "0"})
	set, kept := apply(pro6000, machine(t, "DMA", "amd_iommu=on"))
	if len(set)+len(kept) != 0 {
		t.Fatalf("set %+v kept %+v", set, kept)
	}
	if _, ok := os.LookupEnv("NCCL_P2P_DISABLE"); ok {
		t.Fatal("NCCL_P2P_DISABLE set with GOCL_DEFAULTS=0")
	}
	if log := logged(t); !strings.Contains(log, "GOCL_DEFAULTS=0") {
		t.Errorf("log:\n%s", log)
	}
}

// Machines the knowledge base does not flag get nothing.
func TestUnflaggedMachinesGetNothing(t *testing.T) {
	for name, c := range map[string]struct {
		nvml      doctor.NVMLCollector
		groupType string
	}{
		"pro6000 pair, IOMMU passthrough": {pro6000, "identity"},
		"5090 pair without P2P":           {rtx5090, "DMA"},
		"H100 pair (datacenter)":          {h100, "DMA"},
		"no driver":                       {noNVML, "DMA"},
		"no reader":                       {nil, "DMA"},
	} {
		t.Run(name, func(t *testing.T) {
			clean(t, nil)
			set, kept := apply(c.nvml, machine(t, c.groupType, "quiet"))
			if len(set)+len(kept) != 0 {
				t.Fatalf("set %+v kept %+v", set, kept)
			}
			if _, ok := os.LookupEnv("NCCL_P2P_DISABLE"); ok {
				t.Fatal("NCCL_P2P_DISABLE set")
			}
		})
	}
}
