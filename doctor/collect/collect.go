// Package collect gathers every fact gocl-doctor judges: sysfs's local
// facts (NVML, kernel, environment), then the Python probes (torch, JAX,
// packages: subprocesses, so a hanging CUDA import cannot hang the doctor),
// the driver libraries ldconfig knows, the kernel log and the Go runtimes
// mapped into a process. Only cmd/gocl-doctor imports it.
package collect

import (
	"context"
	"time"

	"gocl/doctor"
	"gocl/doctor/sysfs"
	"gocl/runtime/config"
)

// Options select what Collect gathers.
type Options struct {
	NVML          doctor.NVMLCollector // nil: NVML facts are marked missing
	Python        string               // interpreter to probe; "" skips torch/JAX/packages
	PythonTimeout time.Duration        // per probe section (default 120 s)
	PID           int                  // process to scan for Go runtimes; 0 skips
	Environ       []string             // default: the process environment now
	System        sysfs.System         // default root "/"
	NoDmesg       bool                 // do not read the kernel log
	NoLibraries   bool                 // do not look for libcuda/libnvidia-ml (runs ldconfig -p)
}

// Collect gathers the facts of this machine: sysfs's local facts, then
// what costs a subprocess or a file scan. It never fails: whatever cannot
// be learned is named in Facts.Missing.
func Collect(ctx context.Context, o Options) *doctor.Facts {
	if o.System.Root == "" {
		o.System.Root = "/"
	}
	environ := o.Environ
	if environ == nil {
		environ = config.Environ()
	}

	// The Python probe runs while NVML and the kernel are read; it fills
	// its own Facts, merged at the end.
	done := make(chan struct{})
	pf := &doctor.Facts{}
	if o.Python != "" {
		go func() {
			defer close(done)
			PythonProbe{Python: o.Python, Timeout: o.PythonTimeout, Env: environ}.Collect(ctx, pf)
		}()
	} else {
		close(done)
		pf.MarkMissing("python", "no interpreter given (--python)")
		pf.MarkMissing("torch", "no interpreter given (--python)")
		pf.MarkMissing("jax", "no interpreter given (--python)")
	}

	f := o.System.LocalFacts(o.NVML, environ)
	if !o.NoDmesg && f.NVML != nil && f.NVML.Status == "ok" && len(f.GPUs) > 1 {
		f.Kernel.UVMHMMError = UVMHMMError(ctx)
	}
	if !o.NoLibraries {
		f.Libraries = Libraries(o.System, []string{"libnvidia-ml.so.1", "libcuda.so.1"}, f.Env["LD_LIBRARY_PATH"])
	}
	if lib := f.Env["MPITRAMPOLINE_LIB"]; lib != "" {
		f.MPILibrary = MPILibrary(o.System, lib)
	}
	if o.PID > 0 {
		f.GoRuntimes = GoRuntimesIn(o.System, o.PID)
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
