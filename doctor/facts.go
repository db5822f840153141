package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Schema names the JSON layout written by `gocl-doctor --json`. It changes
// only when a field changes meaning or goes away; new optional fields keep it.
// SCHEMA.md in this folder documents every field.
const Schema = "gocl-doctor/1"

// Report is the whole JSON document: what was found, and what it means.
type Report struct {
	Schema   string    `json:"schema"`
	Facts    Facts     `json:"facts"`
	Findings []Finding `json:"findings"`
	// Checks holds one verdict per check, passing ones included (the text
	// output prints one line each).
	Checks []Verdict `json:"checks"`
	// RecommendedEnv merges the env of every finding: what to export.
	RecommendedEnv map[string]EnvAdvice `json:"recommended_env"`
}

// Finding is one problem or piece of advice.
type Finding struct {
	ID          string            `json:"id"`
	Severity    string            `json:"severity"` // "error", "warning" or "info"
	Check       string            `json:"check"`
	Message     string            `json:"message"`
	Fix         string            `json:"fix"`
	Explanation string            `json:"explanation,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Refs        []string          `json:"refs,omitempty"`
}

// Verdict is the outcome of one check: "fail" when it produced a finding of
// severity error or warning, "note" for info-level findings only, "pass", or
// "skip" (with the reason: a fact it needs is missing).
type Verdict struct {
	Check  string `json:"check"`
	Title  string `json:"title"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// EnvAdvice is one variable of the recommended environment.
type EnvAdvice struct {
	Value string   `json:"value"`
	Mode  string   `json:"mode"` // "set" (replace) or "append" (Value already holds the user's flags)
	Rules []string `json:"rules"`
	// UserValue is the value already in the environment, when there is one.
	// Variables with mode "append" (XLA_FLAGS) already include it in Value.
	UserValue *string `json:"user_value,omitempty"`
}

// Facts is everything the doctor knows about one machine and one Python
// environment. Every field is optional: a fact that could not be gathered is
// left out and named in Missing with the reason.
type Facts struct {
	Doctor            *DoctorInfo       `json:"doctor,omitempty"`
	NVML              *NVMLInfo         `json:"nvml,omitempty"`
	DriverVersion     string            `json:"driver_version,omitempty"`
	CUDADriverVersion int               `json:"cuda_driver_version,omitempty"` // 12080 means CUDA 12.8
	GPUs              []GPU             `json:"gpus,omitempty"`
	P2P               *P2P              `json:"p2p,omitempty"`
	Topology          *Topology         `json:"topology,omitempty"`
	Torch             *Torch            `json:"torch,omitempty"`
	JAX               *JAX              `json:"jax,omitempty"`
	Packages          map[string]string `json:"packages,omitempty"`
	Env               map[string]string `json:"env"`
	OS                *OSInfo           `json:"os,omitempty"`
	Python            *Python           `json:"python,omitempty"`
	Kernel            *Kernel           `json:"kernel,omitempty"`
	Libraries         map[string]string `json:"libraries,omitempty"` // soname -> path, "" when not found
	GoRuntimes        *GoRuntimes       `json:"go_runtimes,omitempty"`
	MPILibrary        *MPILibrary       `json:"mpi_library,omitempty"` // what MPITRAMPOLINE_LIB names, when set
	Missing           map[string]string `json:"missing,omitempty"`     // fact -> why it is missing
	Extra             map[string]any    `json:"extra,omitempty"`
}

// DoctorInfo says who collected the facts, and when.
type DoctorInfo struct {
	Version     string `json:"version"`
	CollectedAt string `json:"collected_at,omitempty"` // RFC 3339
	GoVersion   string `json:"go_version,omitempty"`
}

// NVMLInfo is the outcome of nvml.Init.
type NVMLInfo struct {
	Status  string `json:"status"` // "ok", or the NVML error name such as "ERROR_LIBRARY_NOT_FOUND"
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

// GPU is one device as NVML (or, without NVML, torch or JAX) sees it.
type GPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"` // "12.0"
	MemoryBytes       uint64 `json:"memory_bytes,omitempty"`
	UUID              string `json:"uuid,omitempty"`
	PCIBusID          string `json:"pci_bus_id,omitempty"` // sysfs form: 0000:01:00.0
	Architecture      string `json:"architecture,omitempty"`
	Brand             string `json:"brand,omitempty"`
	NVLinkActive      int    `json:"nvlink_active,omitempty"`
	IOMMUGroupType    string `json:"iommu_group_type,omitempty"` // "DMA", "DMA-FQ", "identity", ...
	Source            string `json:"source,omitempty"`           // "nvml", "torch" or "jax"
}

// P2P holds NVML's peer-to-peer status matrices, indexed [i][j] by GPU index.
// Entries are "X" on the diagonal, "OK", or the NVML status without its
// prefix ("NOT_SUPPORTED", "CHIPSET_NOT_SUPPORTED", "GPU_NOT_SUPPORTED",
// "IOH_TOPOLOGY_NOT_SUPPORTED", "DISABLED_BY_REGKEY", "UNKNOWN"), or "ERR"
// when NVML could not answer.
type P2P struct {
	Read    [][]string `json:"read,omitempty"`
	Write   [][]string `json:"write,omitempty"`
	NVLink  [][]string `json:"nvlink,omitempty"`
	Atomics [][]string `json:"atomics,omitempty"`
}

// Topology is `nvidia-smi topo -m`'s matrix: "X", "NV<n>", "PIX", "PXB",
// "PHB", "NODE", "SYS" (or "?" when NVML could not answer).
type Topology struct {
	Matrix [][]string `json:"matrix"`
}

// Torch is what the given interpreter's torch reports.
type Torch struct {
	Version       string        `json:"version,omitempty"`
	CUDA          string        `json:"cuda,omitempty"` // torch.version.cuda, "" for a CPU build
	ArchList      []string      `json:"arch_list,omitempty"`
	NCCLVersion   string        `json:"nccl_version,omitempty"`
	CUDNNVersion  int           `json:"cudnn_version,omitempty"`
	CUDAAvailable *bool         `json:"cuda_available,omitempty"`
	Devices       []TorchDevice `json:"devices,omitempty"`
	Warnings      []string      `json:"warnings,omitempty"`
	Error         string        `json:"error,omitempty"` // import or CUDA init failure
}

// TorchDevice is one torch.cuda device.
type TorchDevice struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"`
}

// JAX is what the given interpreter's jax reports.
type JAX struct {
	JAX     string            `json:"jax,omitempty"`
	JAXLib  string            `json:"jaxlib,omitempty"`
	Plugins map[string]string `json:"plugins,omitempty"` // distribution -> version
	Backend string            `json:"backend,omitempty"` // jax.default_backend()
	Devices []JAXDevice       `json:"devices,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// JAXDevice is one jax.devices() entry.
type JAXDevice struct {
	ID                int    `json:"id"`
	Platform          string `json:"platform"`
	Kind              string `json:"kind,omitempty"`
	ComputeCapability string `json:"compute_capability,omitempty"`
}

// OSInfo describes the host.
type OSInfo struct {
	Name      string `json:"name,omitempty"` // PRETTY_NAME of os-release
	Kernel    string `json:"kernel,omitempty"`
	Arch      string `json:"arch,omitempty"`
	GOOS      string `json:"goos,omitempty"`
	Container string `json:"container,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`
}

// Python describes the interpreter that was probed.
type Python struct {
	Executable         string `json:"executable,omitempty"`
	Version            string `json:"version,omitempty"`
	Implementation     string `json:"implementation,omitempty"`
	Prefix             string `json:"prefix,omitempty"`
	Venv               bool   `json:"venv,omitempty"`
	StartMethodDefault string `json:"start_method_default,omitempty"` // multiprocessing's default
	GoclPath           string `json:"gocl_path,omitempty"`            // the gocl package, when importable
	GoclNativeLib      string `json:"gocl_native_lib,omitempty"`      // its libgocl.so, "" when absent
	GoclMPIABILib      string `json:"gocl_mpi_abi_lib,omitempty"`     // its libgocl_mpiabi.so (gocl mpi-abi), "" when absent
	Error              string `json:"error,omitempty"`
}

// Kernel holds what the kernel tells about IOMMU and PCIe ACS.
type Kernel struct {
	CmdlineIOMMU []string  `json:"cmdline_iommu,omitempty"` // iommu-related tokens of /proc/cmdline
	IOMMUGroups  *int      `json:"iommu_groups,omitempty"`  // count under /sys/kernel/iommu_groups
	IOMMU        string    `json:"iommu,omitempty"`         // "off", "passthrough", "translated", "unknown"
	ACS          []ACSPort `json:"acs,omitempty"`           // bridges above the GPUs
	ACSReadable  *bool     `json:"acs_readable,omitempty"`  // false: config space needs root
	UVMHMMError  *bool     `json:"uvm_hmm_error,omitempty"` // dmesg shows the HMM/KASLR failure
	DevNodes     []string  `json:"dev_nodes,omitempty"`     // /dev/nvidia* present
}

// ACSPort is the ACS control register of one PCIe port above a GPU.
type ACSPort struct {
	Device string   `json:"device"` // sysfs address of the bridge
	GPU    int      `json:"gpu"`    // the GPU below it
	Flags  []string `json:"flags"`  // enabled bits: SrcValid, TransBlk, ReqRedir, CmpltRedir, UpstreamFwd, EgressCtrl, DirectTrans
}

// GoRuntimes lists the Go-built shared objects mapped into one process.
type GoRuntimes struct {
	PID     int        `json:"pid"`
	Objects []GoObject `json:"objects"`
	Error   string     `json:"error,omitempty"`
}

// GoObject is one Go-built file mapped into the process.
type GoObject struct {
	Path      string `json:"path"`
	GoVersion string `json:"go_version,omitempty"`
	BuildMode string `json:"build_mode,omitempty"`
	Module    string `json:"module,omitempty"`
}

// MPILibrary is the library MPITRAMPOLINE_LIB names: the MPI that JAX's
// cross-process CPU collectives load through jaxlib's MPItrampoline when
// JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi.
type MPILibrary struct {
	Path   string `json:"path"`              // MPITRAMPOLINE_LIB as set
	Exists bool   `json:"exists"`            // the file is there
	MPIABI bool   `json:"mpi_abi,omitempty"` // it defines mpiwrapper_version_major and MPIABI_Init (MPItrampoline's ABI)
	Gocl   bool   `json:"gocl,omitempty"`    // it is gocl's MPI ABI (libgocl_mpiabi.so: gocl_mpiabi_unsupported)
	Error  string `json:"error,omitempty"`   // why its symbols could not be read
}

// MarkMissing records why a fact could not be gathered.
func (f *Facts) MarkMissing(fact, why string) {
	if f.Missing == nil {
		f.Missing = map[string]string{}
	}
	f.Missing[fact] = why
}

// ParseReport reads either a whole report ({"facts": ..., "findings": ...})
// or a bare facts object, and returns the facts. Unknown fields are kept out
// of the way (JSON decoding ignores them), so a newer doctor's facts still
// load.
func ParseReport(data []byte) (*Facts, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("facts: not a JSON object: %w", err)
	}
	raw := data
	if inner, ok := probe["facts"]; ok {
		raw = inner
	}
	if s, ok := probe["schema"]; ok {
		var name string
		if json.Unmarshal(s, &name) == nil && name != "" && name != Schema {
			// Same major schema family is readable; anything else is refused
			// rather than misjudged.
			if !bytes.HasPrefix([]byte(name), []byte("gocl-doctor/")) {
				return nil, fmt.Errorf("facts: schema %q is not a gocl-doctor schema", name)
			}
		}
	}
	var f Facts
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("facts: %w", err)
	}
	return &f, nil
}

// LoadFacts reads a facts file written by `gocl-doctor --json` (or the facts
// object alone).
func LoadFacts(path string) (*Facts, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := ParseReport(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// DoctorVersion is gocl-doctor's version (reported in facts.doctor).
const DoctorVersion = "0.1.0"

// NVMLCollector fills the NVML facts (NVML, DriverVersion,
// CUDADriverVersion, GPUs, P2P, Topology). gocl/doctor/nvmlprobe provides
// one over go-nvml, libgocl.so one over its own dlopen reader; the doctor
// package itself has no cgo.
type NVMLCollector func(f *Facts)

// WriteJSON writes the report as indented JSON (the documented schema).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
