package doctor

import (
	"context"
	"runtime"
	"time"

	"gocl/runtime/config"
)

// DoctorVersion is gocl-doctor's version (reported in facts.doctor).
const DoctorVersion = "0.1.0"

// NVMLCollector fills the NVML facts (NVML, DriverVersion,
// CUDADriverVersion, GPUs, P2P, Topology). gocl/doctor/nvmlprobe provides
// one over go-nvml; the doctor package itself has no cgo.
type NVMLCollector func(f *Facts)

// Options select what Collect gathers.
type Options struct {
	NVML          NVMLCollector // nil: NVML facts are marked missing
	Python        string        // interpreter to probe; "" skips torch/JAX/packages
	PythonTimeout time.Duration // per probe section (default 120 s)
	PID           int           // process to scan for Go runtimes; 0 skips
	Environ       []string      // default: the process environment now
	System        System        // default root "/"
	NoDmesg       bool          // do not read the kernel log
	NoLibraries   bool          // do not look for libcuda/libnvidia-ml (runs ldconfig -p)
}

// Collect gathers the facts of this machine. It never fails: whatever
// cannot be learned is named in Facts.Missing.
func Collect(ctx context.Context, o Options) *Facts {
	if o.System.Root == "" {
		o.System.Root = "/"
	}
	environ := o.Environ
	if environ == nil {
		environ = config.Environ()
	}
	f := &Facts{Doctor: &DoctorInfo{Version: DoctorVersion, CollectedAt: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version()}}
	f.Env = FilterEnv(environ)
	f.OS = o.System.OS()

	// The Python probe runs while NVML and the kernel are read; it fills
	// its own Facts, merged at the end.
	done := make(chan struct{})
	pf := &Facts{}
	if o.Python != "" {
		go func() {
			defer close(done)
			PythonProbe{Python: o.Python, Timeout: o.PythonTimeout, Env: environ}.Collect(ctx, pf)
		}()
	} else {
		close(done)
		f.MarkMissing("python", "no interpreter given (--python)")
		f.MarkMissing("torch", "no interpreter given (--python)")
		f.MarkMissing("jax", "no interpreter given (--python)")
	}

	if o.NVML != nil {
		o.NVML(f)
	} else {
		f.MarkMissing("nvml", "gocl-doctor was built without NVML (cgo disabled)")
	}
	f.Kernel = o.System.Kernel(f.GPUs)
	if !o.NoDmesg && f.NVML != nil && f.NVML.Status == "ok" && len(f.GPUs) > 1 {
		f.Kernel.UVMHMMError = UVMHMMError(ctx)
	}
	if !o.NoLibraries {
		f.Libraries = o.System.Libraries([]string{"libnvidia-ml.so.1", "libcuda.so.1"}, f.Env["LD_LIBRARY_PATH"])
	}
	if o.PID > 0 {
		f.GoRuntimes = o.System.GoRuntimesIn(o.PID)
	} else {
		f.MarkMissing("go_runtimes", "no process given (--pid)")
	}
	<-done
	f.Python, f.Packages, f.Torch, f.JAX = pf.Python, pf.Packages, pf.Torch, pf.JAX
	for k, v := range pf.Missing {
		f.MarkMissing(k, v)
	}
	return f
}
