package sysfs

import (
	"encoding/binary"
	"slices"
	"testing"

	"gocl/doctor"
	"gocl/doctor/internal/fakefs"
)

// bridgeConfig is a 4 KiB PCIe configuration space whose extended
// capability list holds AER at 0x100 and ACS at 0x140 with control bits ctl.
func bridgeConfig(ctl uint16) []byte {
	cfg := make([]byte, 4096)
	binary.LittleEndian.PutUint32(cfg[0x100:], 0x0001|1<<16|0x140<<20)
	binary.LittleEndian.PutUint32(cfg[0x140:], 0x000d|1<<16)
	binary.LittleEndian.PutUint16(cfg[0x146:], ctl)
	return cfg
}

// fakeSys builds a sysfs/procfs tree: GPU 0 (0000:41:00.0) behind bridge
// 0000:40:01.1 whose ACS redirects; GPU 1 (0000:c1:00.0) behind a bridge
// whose config space reads short (not root).
func fakeSys(t *testing.T, groupType string) string {
	root := t.TempDir()
	fakefs.Write(t, root+"/proc/cmdline", []byte("BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro amd_iommu=on pci=noacs pci=realloc quiet\n"))
	for _, g := range []string{"0", "7", "9"} {
		fakefs.Write(t, root+"/sys/kernel/iommu_groups/"+g+"/type", []byte(groupType+"\n"))
	}
	gpu0 := "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
	gpu1 := "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0"
	fakefs.Write(t, root+"/sys/devices/pci0000:40/0000:40:01.1/config", bridgeConfig(0b1101)) // SrcValid ReqRedir CmpltRedir
	fakefs.Write(t, root+gpu0+"/config", make([]byte, 4096))
	fakefs.Write(t, root+"/sys/devices/pci0000:c0/0000:c0:01.1/config", make([]byte, 64))
	fakefs.Write(t, root+gpu1+"/config", make([]byte, 64))
	fakefs.Symlink(t, "../../../../kernel/iommu_groups/7", root+gpu0+"/iommu_group")
	fakefs.Symlink(t, "../../../../kernel/iommu_groups/9", root+gpu1+"/iommu_group")
	fakefs.Symlink(t, "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0", root+"/sys/bus/pci/devices/0000:41:00.0")
	fakefs.Symlink(t, "../../../devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0", root+"/sys/bus/pci/devices/0000:c1:00.0")
	fakefs.Write(t, root+"/dev/nvidiactl", nil)
	fakefs.Write(t, root+"/dev/nvidia0", nil)
	fakefs.Write(t, root+"/dev/nvidia1", nil)
	fakefs.Write(t, root+"/etc/os-release", []byte("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.2 LTS\"\n"))
	return root
}

func TestKernelFacts(t *testing.T) {
	root := fakeSys(t, "DMA-FQ")
	gpus := []doctor.GPU{{Index: 0, PCIBusID: "0000:41:00.0"}, {Index: 1, PCIBusID: "0000:c1:00.0"}}
	k := System{Root: root}.Kernel(gpus)
	if !slices.Equal(k.CmdlineIOMMU, []string{"amd_iommu=on", "pci=noacs"}) {
		t.Errorf("cmdline %v", k.CmdlineIOMMU)
	}
	if *k.IOMMUGroups != 3 || k.IOMMU != "translated" {
		t.Errorf("groups %d iommu %s", *k.IOMMUGroups, k.IOMMU)
	}
	if gpus[0].IOMMUGroupType != "DMA-FQ" || gpus[1].IOMMUGroupType != "DMA-FQ" {
		t.Errorf("group types %q %q", gpus[0].IOMMUGroupType, gpus[1].IOMMUGroupType)
	}
	if len(k.ACS) != 1 || k.ACS[0].Device != "0000:40:01.1" || k.ACS[0].GPU != 0 ||
		!slices.Equal(k.ACS[0].Flags, []string{"SrcValid", "ReqRedir", "CmpltRedir"}) {
		t.Errorf("acs %+v", k.ACS)
	}
	if k.ACSReadable == nil || *k.ACSReadable {
		t.Error("GPU 1's bridge reads short: ACS must be marked unreadable")
	}
	if !slices.Equal(k.DevNodes, []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"}) {
		t.Errorf("dev nodes %v", k.DevNodes)
	}
	if o := (System{Root: root}).OS(); o.Name != "Ubuntu 24.04.2 LTS" {
		t.Errorf("os %+v", o)
	}
}

func TestIOMMUState(t *testing.T) {
	for _, c := range []struct {
		groups  int
		types   map[string]int
		cmdline []string
		want    string
	}{
		{0, nil, nil, "off"},
		{3, map[string]int{"identity": 3}, nil, "passthrough"},
		{3, map[string]int{"identity": 2, "DMA": 1}, nil, "translated"},
		{3, nil, []string{"iommu=pt"}, "passthrough"},
		{3, nil, []string{"intel_iommu=on"}, "unknown"},
	} {
		if got := iommuState(c.groups, c.types, c.cmdline); got != c.want {
			t.Errorf("%+v: %s, want %s", c, got, c.want)
		}
	}
}

func TestACSControlSurvivesGarbage(t *testing.T) {
	loop := make([]byte, 4096)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|1<<16|0x100<<20) // points at itself
	if _, ok := acsControl(loop); ok {
		t.Error("self-loop found ACS")
	}
	if _, ok := acsControl(make([]byte, 0x104)); ok {
		t.Error("truncated config found ACS")
	}
	if flags, ok := acsControl(bridgeConfig(0)); !ok || len(flags) != 0 {
		t.Errorf("ACS present with no bits: %v %v", flags, ok)
	}
}
