package doctor

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func load(t *testing.T, name string) *Facts {
	t.Helper()
	f, err := LoadFacts(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ids(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.ID)
	}
	return out
}

func finding(t *testing.T, r *Report, id string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no finding %s; have %v", id, ids(r))
	return Finding{}
}

func bools(b bool) *bool { return &b }

// scenario is one row of the verdict table: a fixture, an optional change
// to it, the rules that must fire and those that must not.
type scenario struct {
	name    string
	fixture string
	mutate  func(*Facts)
	want    []string
	wantNot []string
	errors  bool // an error-level finding (exit 1)
	check   func(t *testing.T, r *Report)
}

var scenarios = []scenario{
	{
		name: "RTX 5090 with torch 2.7.1+cu126: no sm_120 kernel", fixture: "rtx5090-torch271-cu126.json",
		want: []string{"torch-arch-unsupported", "fork-start-method"}, wantNot: []string{"driver-too-old", "driver-minor-compat", "nccl-broken-sm120", "nccl-old-sm120"},
		errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "torch-arch-unsupported")
			if f.Severity != "error" {
				t.Errorf("severity %s", f.Severity)
			}
			for _, s := range []string{"GPU 0", "sm_120", "2.7.1+cu126", "no 12.x cubin"} {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message lacks %q: %s", s, f.Message)
				}
			}
			// The same torch release rebuilt for CUDA 12.8, torchvision
			// pinned to the same tag, for the interpreter examined.
			cmd := `uv pip install --python /home/ada/venv/bin/python --index-url https://download.pytorch.org/whl/cu128 "torch==2.7.1+cu128" "torchvision==0.22.1+cu128"`
			if !strings.Contains(f.Fix, cmd) {
				t.Errorf("fix lacks\n  %s\nfix:\n%s", cmd, f.Fix)
			}
			if !strings.Contains(f.Fix, `/home/ada/venv/bin/python -m pip install --index-url https://download.pytorch.org/whl/cu128 "torch==2.7.1+cu128"`) {
				t.Errorf("fix lacks the pip form: %s", f.Fix)
			}
			if !strings.Contains(f.Fix, `"torch==2.10.0+cu128"`) {
				t.Errorf("fix lacks the newest known-good wheel: %s", f.Fix)
			}
		},
	},
	{
		name: "H100 with torch cu126 is fine", fixture: "h100-torch-cu126.json",
		wantNot: []string{"torch-arch-unsupported", "torch-arch-ptx-only", "driver-too-old", "driver-minor-compat", "p2p-unsafe-iommu", "p2p-unverified", "p2p-unsupported", "fork-start-method", "go-runtimes-multiple"},
		check: func(t *testing.T, r *Report) {
			for _, f := range r.Findings {
				if f.Severity != "info" {
					t.Errorf("unexpected %s %s: %s", f.Severity, f.ID, f.Message)
				}
			}
			for _, v := range r.Checks {
				if v.Check == "torch-arch" && (v.Status != "pass" || !strings.Contains(v.Detail, "sm_90 by sm_90")) {
					t.Errorf("torch-arch verdict %+v", v)
				}
			}
		},
	},
	{
		name: "RTX 5090, torch cu128, driver 560: driver too old", fixture: "rtx5090-cu128-old-driver.json",
		want: []string{"driver-too-old", "torch-cuda-unavailable"}, wantNot: []string{"torch-arch-unsupported", "driver-minor-compat"},
		errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "driver-too-old")
			for _, s := range []string{"570.26", "560.35.03", "GPU 0 (NVIDIA GeForce RTX 5090, sm_120)", "torch 2.7.1+cu128 (CUDA 12.8)"} {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message lacks %q: %s", s, f.Message)
				}
			}
			if !strings.Contains(f.Fix, "R570+") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "RTX PRO 6000 pair, P2P reported, IOMMU translating", fixture: "rtxpro6000-pair-p2p-iommu.json",
		want: []string{"p2p-unsafe-iommu"}, wantNot: []string{"p2p-unverified", "p2p-unsupported", "nccl-old-sm120", "nccl-broken-sm120", "torch-arch-unsupported", "driver-too-old"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "p2p-unsafe-iommu")
			if f.Severity != "warning" || !strings.Contains(f.Message, "0-1") || !strings.Contains(f.Message, "DMA-FQ") {
				t.Errorf("finding: %+v", f)
			}
			for _, s := range []string{"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", "bandwidth", "iommu=pt"} {
				if !strings.Contains(f.Fix, s) {
					t.Errorf("fix lacks %q: %s", s, f.Fix)
				}
			}
			if got := r.RecommendedEnv["NCCL_P2P_DISABLE"].Value; got != "1" {
				t.Errorf("NCCL_P2P_DISABLE = %q", got)
			}
			if got := r.RecommendedEnv["GOCL_P2P_DISABLE"].Value; got != "0" {
				t.Errorf("GOCL_P2P_DISABLE = %q", got)
			}
			if _, ok := r.RecommendedEnv["NCCL_SHM_DISABLE"]; ok {
				t.Error("NCCL_SHM_DISABLE must stay a fallback, not a recommendation")
			}
		},
	},
	{
		name: "no GPU is clean", fixture: "no-gpu.json",
		want: []string{"nvml-missing"},
		check: func(t *testing.T, r *Report) {
			for _, f := range r.Findings {
				if f.Severity != "info" {
					t.Errorf("unexpected %s %s", f.Severity, f.ID)
				}
			}
			if len(r.RecommendedEnv) != 0 {
				t.Errorf("recommended env on a machine without GPU: %v", r.RecommendedEnv)
			}
		},
	},
	{
		name: "GeForce 5090 pair with NCCL 2.26.2, JAX cuda12 and a hand-made environment", fixture: "rtx5090-pair-geforce-jax.json",
		want:    []string{"nccl-old-sm120", "p2p-unsupported", "jax-cuda12-old-ptxas", "jax-blackwell-autotune", "jax-memory-sharing", "nccl-shm-disabled", "nccl-p2p-disable-noop"},
		wantNot: []string{"p2p-unsafe-iommu", "nccl-broken-sm120", "torch-arch-unsupported", "fork-start-method"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "nccl-old-sm120")
			if !strings.Contains(f.Fix, `"torch==2.10.0+cu128"`) {
				t.Errorf("NCCL fix should move to a torch with NCCL >= 2.27: %s", f.Fix)
			}
			if got := r.RecommendedEnv["XLA_FLAGS"]; got.Value != "--xla_dump_to=/tmp/xla --xla_gpu_autotune_level=0" || got.UserValue == nil {
				t.Errorf("XLA_FLAGS advice %+v", got)
			}
			if got := r.RecommendedEnv["NCCL_SOCKET_IFNAME"].Value; got != "lo" {
				t.Errorf("NCCL_SOCKET_IFNAME = %q", got)
			}
			if got := r.RecommendedEnv["XLA_PYTHON_CLIENT_PREALLOCATE"].Value; got != "false" {
				t.Errorf("XLA_PYTHON_CLIENT_PREALLOCATE = %q", got)
			}
			a := finding(t, r, "jax-blackwell-autotune")
			for _, s := range []string{"0 = no autotuning", "4 = also check", "--xla_gpu_enable_triton_gemm=false"} {
				if !strings.Contains(a.Explanation+a.Fix, s) {
					t.Errorf("autotune advice lacks %q", s)
				}
			}
		},
	},
	{
		name: "NCCL 2.25.1 on sm_120", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) {
			f.Torch.Version, f.Torch.CUDA, f.Torch.NCCLVersion = "2.7.0.dev20250301+cu128", "12.8", "2.25.1"
			f.Torch.ArchList = []string{"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"}
		},
		want: []string{"nccl-broken-sm120"}, wantNot: []string{"torch-arch-unsupported"}, errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "nccl-broken-sm120")
			if !strings.Contains(f.Fix, `"torch==2.10.0+cu128"`) || !strings.Contains(f.Fix, ">= 2.27") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "PTX only", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) { f.Torch.ArchList = append(f.Torch.ArchList, "compute_90") },
		want:   []string{"torch-arch-ptx-only"}, wantNot: []string{"torch-arch-unsupported"},
	},
	{
		name: "arch-specific cubin does not carry over", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) { f.Torch.ArchList = []string{"sm_90a", "sm_100a", "compute_100a"} },
		want:   []string{"torch-arch-unsupported"}, errors: true,
	},
	{
		name: "CPU build of torch on a GPU machine", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) { f.Torch.Version, f.Torch.CUDA, f.Torch.ArchList = "2.7.1+cpu", "", nil },
		want:   []string{"torch-cpu-build"}, wantNot: []string{"torch-arch-unsupported"},
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "torch-cpu-build"); !strings.Contains(f.Fix, "whl/cu128") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "torch import fails on a missing library", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) {
			f.Torch = &Torch{Error: "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory"}
		},
		want: []string{"torch-import-failed"}, errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "torch-import-failed")
			if !strings.Contains(f.Fix, "libcudnn.so.9") || !strings.Contains(f.Fix, "--index-url https://download.pytorch.org/whl/cu126") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "jax import fails", fixture: "rtx5090-pair-geforce-jax.json",
		mutate: func(f *Facts) {
			f.JAX = &JAX{Plugins: map[string]string{"jax-cuda12-plugin": "0.6.2"}, Error: "RuntimeError: jaxlib version 0.6.0 is older than jax's minimum 0.6.2"}
		},
		want: []string{"jax-import-failed"}, errors: true,
	},
	{
		name: "gocl without its native library", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.Python.GoclPath, f.Python.GoclNativeLib = "/opt/conda/lib/python3.11/site-packages/gocl", ""
		},
		want: []string{"libgocl-missing"},
	},
	{
		name: "NVML without libcuda", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) { f.Libraries["libcuda.so.1"] = "" },
		want:   []string{"libcuda-missing"}, errors: true,
	},
	{
		name: "two Go runtimes in the Python process", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.GoRuntimes.Objects = append(f.GoRuntimes.Objects, GoObject{Path: "/opt/conda/lib/python3.11/site-packages/other/_other.so", BuildMode: "c-shared"})
		},
		want: []string{"go-runtimes-multiple"}, errors: true,
	},
	{
		name: "CUDA_VISIBLE_DEVICES hides every GPU", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) { f.Env["CUDA_VISIBLE_DEVICES"] = "2,0" },
		want:   []string{"cuda-visible-devices-hides-all"},
	},
	{
		name: "CUDA_VISIBLE_DEVICES by UUID prefix is fine", fixture: "rtx5090-torch271-cu126.json",
		mutate:  func(f *Facts) { f.Env["CUDA_VISIBLE_DEVICES"] = "GPU-5a0c1b2e" },
		wantNot: []string{"cuda-visible-devices-hides-all"}, errors: true,
	},
	{
		name: "GOCL_ typo", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.Env["GOCL_SOCKET_IFNAM"] = "eth0"
			f.Env["GOCL_MASTER_PORT"] = "29600"
			f.Env["GOCL_SOMETHING_UNRELATED"] = "1"
		},
		want: []string{"gocl-env-typo"},
		check: func(t *testing.T, r *Report) {
			n := 0
			for _, f := range r.Findings {
				if f.ID == "gocl-env-typo" {
					n++
					if !strings.Contains(f.Message, "GOCL_SOCKET_IFNAME") {
						t.Errorf("message: %s", f.Message)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d typo findings, want 1", n)
			}
		},
	},
	{
		name: "Hugging Face on CPU: the route that runs over gocl", fixture: "no-gpu.json",
		mutate: func(f *Facts) {
			if f.Packages == nil {
				f.Packages = map[string]string{}
			}
			f.Packages["transformers"], f.Packages["accelerate"] = "5.25.0", "1.16.0"
		},
		want: []string{"hf-trainer-route"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "hf-trainer-route")
			for _, s := range []string{"transformers 5.25.0", "accelerate 1.16.0", "Your assigned backend gocl is not available, please use gloo"} {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message %q lacks %q", f.Message, s)
				}
			}
			if !strings.Contains(f.Fix, `init_process_group("gocl") before TrainingArguments`) || strings.Contains(f.Message, "CUDA") {
				t.Errorf("finding: %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "no Hugging Face: the check skips", fixture: "no-gpu.json",
		wantNot: []string{"hf-trainer-route"},
		check: func(t *testing.T, r *Report) {
			if v := verdict(t, r, "hf-trainer"); v.Status != "skip" {
				t.Errorf("verdict %+v", v)
			}
		},
	},
	{
		name: "driver below the toolkit minimum, same major", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) { f.DriverVersion, f.CUDADriverVersion = "550.54.15", 12040 },
		want:   []string{"driver-minor-compat"}, wantNot: []string{"driver-too-old"},
	},
	{
		name: "cu130 wheel on an R570 driver", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.Torch.Version, f.Torch.CUDA = "2.9.1+cu130", "13.0"
			f.Torch.ArchList = []string{"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"}
		},
		want: []string{"driver-too-old"}, errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "driver-too-old")
			if !strings.Contains(f.Message, "580.65.06") || !strings.Contains(f.Fix, "whl/cu12") {
				t.Errorf("finding: %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "jax[cuda13] on an R570 driver", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.JAX = &JAX{JAX: "0.7.2", JAXLib: "0.7.2", Plugins: map[string]string{"jax-cuda13-plugin": "0.7.2"}, Backend: "cpu"}
			f.Env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = ".5"
		},
		want: []string{"jax-driver-too-old", "jax-no-gpu"}, errors: true,
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "jax-driver-too-old"); !strings.Contains(f.Fix, `"jax[cuda12]"`) {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "jax without a CUDA plugin on a GPU machine", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) { f.JAX = &JAX{JAX: "0.7.2", JAXLib: "0.7.2", Backend: "cpu"} },
		want:   []string{"jax-no-gpu"}, wantNot: []string{"jax-memory-sharing", "jax-blackwell-autotune"},
	},
	{
		name: "JAX on CPU by choice (JAX_PLATFORMS=cpu)", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.JAX = &JAX{JAX: "0.7.2", JAXLib: "0.7.2", Backend: "cpu"}
			f.Env["JAX_PLATFORMS"] = "cpu"
		},
		wantNot: []string{"jax-no-gpu"},
	},
	{
		name: "JAX on CPU with gocl's MPI ABI selected", fixture: "cpu-jax-gocl-mpi-abi.json",
		wantNot: jaxCollectivesRules,
		check: func(t *testing.T, r *Report) {
			v := verdict(t, r, "jax-collectives")
			if v.Status != "pass" || v.Detail != "gocl's MPI ABI ("+goclMPIABI+")" {
				t.Errorf("verdict %+v", v)
			}
		},
	},
	{
		name: "JAX's default collectives: gloo, and how to switch", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			delete(f.Env, "JAX_CPU_COLLECTIVES_IMPLEMENTATION")
			delete(f.Env, "MPITRAMPOLINE_LIB")
			f.MPILibrary = nil
		},
		want: []string{"jax-collectives-gloo"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "jax-collectives-gloo")
			for _, s := range []string{"gloo (JAX's default)", "gocl run use gocl's MPI ABI"} {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message lacks %q: %s", s, f.Message)
				}
			}
			for _, s := range []string{"export JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi MPITRAMPOLINE_LIB=$(gocl mpi-abi)", "gocl run -n N", goclMPIABI} {
				if !strings.Contains(f.Fix, s) {
					t.Errorf("fix lacks %q: %s", s, f.Fix)
				}
			}
			if strings.Contains(f.Fix, "unset") || f.Severity != "info" || verdict(t, r, "jax-collectives").Status != "note" {
				t.Errorf("finding %+v", f)
			}
		},
	},
	{
		name: "gloo chosen, MPITRAMPOLINE_LIB left set", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) { f.Env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo" },
		want:   []string{"jax-collectives-gloo"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "jax-collectives-gloo")
			if !strings.Contains(f.Message, "JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo") || !strings.Contains(f.Message, "runs no collective over it unless") ||
				!strings.Contains(f.Fix, "unset JAX_CPU_COLLECTIVES_IMPLEMENTATION") {
				t.Errorf("finding %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "mpi selected, MPITRAMPOLINE_LIB unset", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) { delete(f.Env, "MPITRAMPOLINE_LIB"); f.MPILibrary = nil },
		want:   []string{"jax-collectives-mpi-no-lib"}, errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "jax-collectives-mpi-no-lib")
			if !strings.Contains(f.Message, "MPITRAMPOLINE_LIB is not set") || !strings.Contains(f.Fix, "export MPITRAMPOLINE_LIB=$(gocl mpi-abi)") {
				t.Errorf("finding %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "mpi selected, MPITRAMPOLINE_LIB names a missing file", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			f.Env["MPITRAMPOLINE_LIB"] = "/opt/old/libgocl_mpiabi.so"
			f.MPILibrary = &MPILibrary{Path: "/opt/old/libgocl_mpiabi.so"}
		},
		want: []string{"jax-collectives-mpi-lib-unusable"}, errors: true,
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "jax-collectives-mpi-lib-unusable"); !strings.Contains(f.Message, "/opt/old/libgocl_mpiabi.so, which does not exist") {
				t.Errorf("message: %s", f.Message)
			}
		},
	},
	{
		name: "mpi selected, MPITRAMPOLINE_LIB names the MPI itself", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			f.Env["MPITRAMPOLINE_LIB"] = "/usr/lib/x86_64-linux-gnu/libmpi.so.40"
			f.MPILibrary = &MPILibrary{Path: "/usr/lib/x86_64-linux-gnu/libmpi.so.40", Exists: true}
		},
		want: []string{"jax-collectives-mpi-lib-unusable"}, errors: true,
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "jax-collectives-mpi-lib-unusable"); !strings.Contains(f.Message, "not a library with MPItrampoline's MPI ABI") {
				t.Errorf("message: %s", f.Message)
			}
		},
	},
	{
		name: "gloo, but MPITRAMPOLINE_LIB names a missing file: import jax exits", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			delete(f.Env, "JAX_CPU_COLLECTIVES_IMPLEMENTATION")
			f.Env["MPITRAMPOLINE_LIB"] = "/opt/old/libgocl_mpiabi.so"
			f.MPILibrary = &MPILibrary{Path: "/opt/old/libgocl_mpiabi.so"}
			// the JAX probe itself exited: MPItrampoline loads the library with jaxlib
			f.JAX = nil
			f.MarkMissing("jax", `jax probe with /home/ada/venv/bin/python: exit status 1: MPItrampoline: Could not dlopen library "/opt/old/libgocl_mpiabi.so"`)
		},
		want: []string{"jax-collectives-mpi-lib-unusable"}, wantNot: []string{"jax-collectives-gloo"}, errors: true,
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "jax-collectives-mpi-lib-unusable")
			if !strings.Contains(f.Message, "import jax exits 1") || !strings.Contains(f.Message, "even though") || !strings.Contains(f.Fix, "or unset MPITRAMPOLINE_LIB") {
				t.Errorf("finding %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "mpi over another MPI wrapper", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			f.Env["MPITRAMPOLINE_LIB"] = "/opt/mpiwrapper/lib/libmpiwrapper.so"
			f.MPILibrary = &MPILibrary{Path: "/opt/mpiwrapper/lib/libmpiwrapper.so", Exists: true, MPIABI: true}
		},
		want: []string{"jax-collectives-other-mpi"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "jax-collectives-other-mpi")
			if !strings.Contains(f.Message, "another MPI library, /opt/mpiwrapper/lib/libmpiwrapper.so") ||
				!strings.Contains(f.Fix, "export MPITRAMPOLINE_LIB=$(gocl mpi-abi) (gocl mpi-abi prints "+goclMPIABI+")") {
				t.Errorf("finding %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "JAX_CPU_COLLECTIVES_IMPLEMENTATION jax does not accept", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			f.Env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "MPI"
			f.JAX = &JAX{Error: `ValueError: Invalid value "MPI" for JAX flag jax_cpu_collectives_implementation`}
		},
		want: []string{"jax-collectives-invalid", "jax-import-failed"}, errors: true,
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "jax-collectives-invalid"); !strings.Contains(f.Message, "=MPI is not a value jax accepts (gloo, mpi, megascale)") {
				t.Errorf("message: %s", f.Message)
			}
		},
	},
	{
		name: "no jax: nothing said of its collectives", fixture: "cpu-jax-gocl-mpi-abi.json",
		mutate: func(f *Facts) {
			f.JAX = nil
			delete(f.Packages, "jax")
			f.MarkMissing("jax", "jax is not installed in /home/ada/venv/bin/python")
		},
		wantNot: jaxCollectivesRules,
		check: func(t *testing.T, r *Report) {
			if v := verdict(t, r, "jax-collectives"); v.Status != "skip" || !strings.Contains(v.Detail, "not installed") {
				t.Errorf("verdict %+v", v)
			}
		},
	},
	{
		name: "NVML error other than a missing library", fixture: "h100-torch-cu126.json",
		mutate: func(f *Facts) {
			f.NVML = &NVMLInfo{Status: "ERROR_LIB_RM_VERSION_MISMATCH", Error: "RM has detected an NVML/RM version mismatch."}
		},
		want: []string{"nvml-error"},
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "nvml-error"); !strings.Contains(f.Fix, "reboot") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "no NVML but device nodes and torch devices", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) {
			f.NVML = &NVMLInfo{Status: "ERROR_LIBRARY_NOT_FOUND"}
			f.GPUs, f.DriverVersion, f.CUDADriverVersion = nil, "", 0
		},
		want: []string{"nvml-missing-with-gpu", "torch-arch-unsupported"}, wantNot: []string{"nvml-missing"}, errors: true,
	},
	{
		name: "HMM/KASLR failure in dmesg", fixture: "rtxpro6000-pair-p2p-iommu.json",
		mutate: func(f *Facts) { f.Kernel.UVMHMMError = bools(true) },
		want:   []string{"uvm-hmm", "p2p-unsafe-iommu"}, errors: true,
	},
	{
		name: "P2P reported, IOMMU and ACS unknown", fixture: "rtxpro6000-pair-p2p-iommu.json",
		mutate: func(f *Facts) {
			for i := range f.GPUs {
				f.GPUs[i].IOMMUGroupType = ""
			}
			f.Kernel.IOMMU = "unknown"
		},
		want: []string{"p2p-unverified"}, wantNot: []string{"p2p-unsafe-iommu"},
	},
	{
		name: "P2P reported, IOMMU passthrough but ACS redirecting", fixture: "rtxpro6000-pair-p2p-iommu.json",
		mutate: func(f *Facts) {
			for i := range f.GPUs {
				f.GPUs[i].IOMMUGroupType = "identity"
			}
			f.Kernel.IOMMU, f.Kernel.ACSReadable = "passthrough", bools(true)
			f.Kernel.ACS = []ACSPort{{Device: "0000:40:01.1", GPU: 0, Flags: []string{"SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"}}}
		},
		want: []string{"p2p-unsafe-iommu"},
		check: func(t *testing.T, r *Report) {
			f := finding(t, r, "p2p-unsafe-iommu")
			if !strings.Contains(f.Message, "0000:40:01.1") || !strings.Contains(f.Fix, "ACS") {
				t.Errorf("finding: %s / %s", f.Message, f.Fix)
			}
		},
	},
	{
		name: "P2P safe: passthrough and no ACS redirect", fixture: "rtxpro6000-pair-p2p-iommu.json",
		mutate: func(f *Facts) {
			for i := range f.GPUs {
				f.GPUs[i].IOMMUGroupType = "identity"
			}
			f.Kernel.IOMMU, f.Kernel.ACSReadable = "passthrough", bools(true)
			f.Kernel.ACS = []ACSPort{{Device: "0000:40:01.1", GPU: 0, Flags: []string{"SrcValid"}}}
		},
		wantNot: []string{"p2p-unsafe-iommu", "p2p-unverified"},
	},
	{
		name: "recommendation respects the Python version", fixture: "rtx5090-torch271-cu126.json",
		mutate: func(f *Facts) { f.Python.Version = "3.14.0" },
		want:   []string{"torch-arch-unsupported"}, errors: true,
		check: func(t *testing.T, r *Report) {
			// torch 2.7 has no Python 3.14 wheels: the newest release is picked.
			if f := finding(t, r, "torch-arch-unsupported"); !strings.Contains(f.Fix, `"torch==2.10.0+cu128"`) || strings.Contains(f.Fix, "2.7.1+cu128") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
	{
		name: "no wheel fits an old driver", fixture: "rtx5090-cu128-old-driver.json",
		mutate: func(f *Facts) {
			f.Torch.ArchList = []string{"sm_80", "sm_90"}
			f.Torch.Version, f.Torch.CUDA = "2.7.1+cu126", "12.6"
		},
		want: []string{"torch-arch-unsupported", "driver-too-old"}, errors: true,
		check: func(t *testing.T, r *Report) {
			if f := finding(t, r, "torch-arch-unsupported"); !strings.Contains(f.Fix, "under driver 560.35.03") {
				t.Errorf("fix: %s", f.Fix)
			}
		},
	},
}

func TestVerdicts(t *testing.T) {
	kb := DefaultKB()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			f := load(t, sc.fixture)
			if f.Env == nil {
				f.Env = map[string]string{}
			}
			if sc.mutate != nil {
				sc.mutate(f)
			}
			r := Judge(f, kb)
			got := ids(r)
			for _, w := range sc.want {
				if !slices.Contains(got, w) {
					t.Errorf("missing %s; findings %v", w, got)
				}
			}
			for _, w := range sc.wantNot {
				if slices.Contains(got, w) {
					t.Errorf("unexpected %s: %s", w, finding(t, r, w).Message)
				}
			}
			if r.HasErrors() != sc.errors {
				t.Errorf("HasErrors = %v, want %v; findings %v", r.HasErrors(), sc.errors, got)
			}
			for _, fd := range r.Findings {
				if fd.ID == "doctor-internal" {
					t.Errorf("internal finding: %s", fd.Message)
				}
				if fd.Message == "" || fd.Fix == "" || strings.Contains(fd.Message+fd.Fix, "<no value>") {
					t.Errorf("%s renders badly: %q / %q", fd.ID, fd.Message, fd.Fix)
				}
			}
			if sc.check != nil {
				sc.check(t, r)
			}
		})
	}
}

var jaxCollectivesRules = []string{"jax-collectives-gloo", "jax-collectives-mpi-no-lib", "jax-collectives-mpi-lib-unusable",
	"jax-collectives-other-mpi", "jax-collectives-invalid"}

// goclMPIABI is gocl's MPI ABI library in cpu-jax-gocl-mpi-abi.json.
const goclMPIABI = "/home/ada/venv/lib/python3.11/site-packages/gocl/_native/libgocl_mpiabi.so"

func verdict(t *testing.T, r *Report, check string) Verdict {
	t.Helper()
	for _, v := range r.Checks {
		if v.Check == check {
			return v
		}
	}
	t.Fatalf("no verdict for check %s", check)
	return Verdict{}
}

// Every rule of the knowledge base must be reachable: some scenario fires it.
func TestEveryRuleIsCovered(t *testing.T) {
	fired := map[string]bool{}
	for _, sc := range scenarios {
		f := load(t, sc.fixture)
		if f.Env == nil {
			f.Env = map[string]string{}
		}
		if sc.mutate != nil {
			sc.mutate(f)
		}
		for _, id := range ids(Judge(f, nil)) {
			fired[id] = true
		}
	}
	for _, r := range DefaultKB().Rules {
		if !fired[r.ID] {
			t.Errorf("rule %s is fired by no scenario", r.ID)
		}
	}
}

func TestEveryCheckHasCode(t *testing.T) {
	kb := DefaultKB()
	for _, c := range kb.Checks {
		if checks[c.ID] == nil {
			t.Errorf("check %s has no code", c.ID)
		}
	}
	for id := range checks {
		if kb.CheckTitle(id) == id {
			t.Errorf("code for check %s that the knowledge base does not list", id)
		}
	}
	for _, c := range kb.Checks {
		n := 0
		for _, r := range kb.Rules {
			if r.Check == c.ID {
				n++
			}
		}
		if n == 0 {
			t.Errorf("check %s has no rule", c.ID)
		}
	}
}

func TestKBRejectsDefects(t *testing.T) {
	for name, patch := range map[string][2]string{
		"bad severity":   {`"severity": "error"`, `"severity": "fatal"`},
		"unknown check":  {`"check": "nvml"`, `"check": "nope"`},
		"bad template":   {`{{.Status}}`, `{{.Status`},
		"startup GOCL_":  {`{ "name": "GOCL_P2P_DISABLE", "value": "0" }`, `{ "name": "GOCL_P2P_DISABLE", "value": "0", "startup": true }`},
		"startup append": {`"value": "--xla_gpu_autotune_level=0", "mode": "append"`, `"value": "--xla_gpu_autotune_level=0", "mode": "append", "startup": true`},
	} {
		data := strings.Replace(string(kbJSON), patch[0], patch[1], 1)
		if _, err := LoadKB([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The startup settings of a report: applied where unset, kept where the
// user set them, and only from rules marked so in the knowledge base.
func TestStartupDefaults(t *testing.T) {
	r := Judge(load(t, "rtxpro6000-pair-p2p-iommu.json"), nil)
	unset := func(string) (string, bool) { return "", false }
	apply, kept := StartupDefaults(r, nil, unset)
	if len(apply) != 1 || apply[0].Name != "NCCL_P2P_DISABLE" || apply[0].Value != "1" ||
		apply[0].Rule != "p2p-unsafe-iommu" || !strings.Contains(apply[0].Reason, "IOMMU") || len(kept) != 0 {
		t.Fatalf("apply %+v kept %+v", apply, kept)
	}
	userSet := func(n string) (string, bool) { return "0", n == "NCCL_P2P_DISABLE" }
	if apply, kept := StartupDefaults(r, nil, userSet); len(apply) != 0 || len(kept) != 1 || kept[0].User != "0" {
		t.Fatalf("user's value: apply %+v kept %+v", apply, kept)
	}
	for _, fx := range []string{"rtx5090-pair-geforce-jax.json", "h100-torch-cu126.json", "no-gpu.json", "rtx5090-torch271-cu126.json"} {
		if apply, _ := StartupDefaults(Judge(load(t, fx), nil), nil, unset); len(apply) != 0 {
			t.Errorf("%s: %+v", fx, apply)
		}
	}
}

// A rule whose template asks for a variable its check does not supply is a
// knowledge-base defect: it shows as an internal finding, never a crash.
func TestMissingTemplateVariableIsVisible(t *testing.T) {
	data := strings.Replace(string(kbJSON), `NVML is not available ({{.Status}})`, `NVML is not available ({{.NoSuchVar}})`, 1)
	kb, err := LoadKB([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	r := Judge(load(t, "no-gpu.json"), kb)
	if !slices.Contains(ids(r), "doctor-internal") || !r.HasErrors() {
		t.Errorf("findings %v", ids(r))
	}
}

// The JSON report is the public schema: it must survive a round trip, and
// judging the saved facts again must give the same findings.
func TestJSONRoundTrip(t *testing.T) {
	for _, name := range []string{"rtx5090-torch271-cu126.json", "h100-torch-cu126.json", "rtx5090-cu128-old-driver.json", "rtxpro6000-pair-p2p-iommu.json", "no-gpu.json", "rtx5090-pair-geforce-jax.json"} {
		t.Run(name, func(t *testing.T) {
			r1 := Judge(load(t, name), nil)
			var buf bytes.Buffer
			if err := r1.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var generic map[string]any
			if err := json.Unmarshal(buf.Bytes(), &generic); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"schema", "facts", "findings", "checks", "recommended_env"} {
				if _, ok := generic[k]; !ok {
					t.Errorf("top-level %q missing", k)
				}
			}
			for _, fd := range generic["findings"].([]any) {
				m := fd.(map[string]any)
				for _, k := range []string{"id", "severity", "message", "fix"} {
					if s, _ := m[k].(string); s == "" {
						t.Errorf("finding lacks %s: %v", k, m)
					}
				}
				if s := m["severity"]; s != "error" && s != "warning" && s != "info" {
					t.Errorf("severity %v", s)
				}
			}
			facts := generic["facts"].(map[string]any)
			if gpus, ok := facts["gpus"].([]any); ok {
				for _, g := range gpus {
					m := g.(map[string]any)
					for _, k := range []string{"index", "name", "compute_capability"} {
						if _, ok := m[k]; !ok {
							t.Errorf("gpu lacks %s", k)
						}
					}
				}
			}
			f2, err := ParseReport(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			r2 := Judge(f2, nil)
			if !slices.Equal(ids(r1), ids(r2)) {
				t.Errorf("findings changed: %v -> %v", ids(r1), ids(r2))
			}
			var again bytes.Buffer
			r2.WriteJSON(&again)
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Errorf("JSON differs after a round trip")
			}
		})
	}
}

func TestParseReportRefusesForeignSchema(t *testing.T) {
	if _, err := ParseReport([]byte(`{"schema": "other/1", "facts": {}}`)); err == nil {
		t.Error("foreign schema accepted")
	}
	if _, err := ParseReport([]byte(`[1, 2]`)); err == nil {
		t.Error("non-object accepted")
	}
	f, err := ParseReport([]byte(`{"schema": "gocl-doctor/2", "facts": {"driver_version": "580.1", "future_field": 1}}`))
	if err != nil || f.DriverVersion != "580.1" {
		t.Errorf("newer schema of the same family: %v %v", f, err)
	}
}
