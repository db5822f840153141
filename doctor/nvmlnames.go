package doctor

import (
	"fmt"
	"strings"
)

// NVML's numeric enums as the names the facts use. Both NVML readers
// share them: gocl-doctor's (go-nvml) and libgocl's own dlopen shim.

var p2pStatusNames = []string{ // nvmlGpuP2PStatus_t, by value
	"OK", "CHIPSET_NOT_SUPPORTED", "GPU_NOT_SUPPORTED", "IOH_TOPOLOGY_NOT_SUPPORTED",
	"DISABLED_BY_REGKEY", "NOT_SUPPORTED", "UNKNOWN",
}

// P2PStatusName names an nvmlGpuP2PStatus_t value ("OK", "NOT_SUPPORTED", ...).
func P2PStatusName(status int) string {
	if status >= 0 && status < len(p2pStatusNames) {
		return p2pStatusNames[status]
	}
	return "UNKNOWN"
}

var returnNames = map[int]string{ // nvmlReturn_t: the codes worth telling apart
	0: "SUCCESS", 1: "ERROR_UNINITIALIZED", 2: "ERROR_INVALID_ARGUMENT", 3: "ERROR_NOT_SUPPORTED",
	4: "ERROR_NO_PERMISSION", 6: "ERROR_NOT_FOUND", 9: "ERROR_DRIVER_NOT_LOADED",
	12: "ERROR_LIBRARY_NOT_FOUND", 13: "ERROR_FUNCTION_NOT_FOUND", 15: "ERROR_GPU_IS_LOST",
	18: "ERROR_LIB_RM_VERSION_MISMATCH", 999: "ERROR_UNKNOWN",
}

// NVMLReturnName names an nvmlReturn_t value ("ERROR_LIBRARY_NOT_FOUND",
// stable, for the JSON); others read "ERROR_<n>".
func NVMLReturnName(rc int) string {
	if n, ok := returnNames[rc]; ok {
		return n
	}
	return fmt.Sprintf("ERROR_%d", rc)
}

var brandNames = map[int]string{ // nvmlBrandType_t
	1: "quadro", 2: "tesla", 5: "geforce", 6: "titan",
	12: "quadro_rtx", 13: "nvidia_rtx", 14: "nvidia", 15: "geforce_rtx", 16: "titan_rtx",
}

// BrandName names an nvmlBrandType_t value ("geforce_rtx", "nvidia_rtx", ...).
func BrandName(brand int) string {
	if n, ok := brandNames[brand]; ok {
		return n
	}
	return fmt.Sprintf("brand-%d", brand)
}

// SysfsBusID turns NVML's PCI bus id ("00000000:01:00.0") into sysfs's
// form ("0000:01:00.0"); with no string it is built from the numbers.
func SysfsBusID(busID string, domain, bus, device uint32) string {
	s := strings.ToLower(busID)
	if s == "" {
		if bus == 0 && device == 0 && domain == 0 {
			return ""
		}
		return fmt.Sprintf("%04x:%02x:%02x.0", domain, bus, device)
	}
	if dom, rest, ok := strings.Cut(s, ":"); ok && len(dom) == 8 && strings.HasPrefix(dom, "0000") {
		s = dom[4:] + ":" + rest
	}
	return s
}
