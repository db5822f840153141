// Package defaults applies the known-good settings of gocl doctor's
// knowledge base when gocl starts on a machine one of its rules flags. On
// a workstation whose GPUs report PCIe P2P behind an IOMMU or ACS, NCCL's
// first all_reduce hangs over P2P; a process that runs gocl next to NCCL
// (torch's "cpu:gocl,cuda:nccl", XLA) gets NCCL_P2P_DISABLE=1 from gocl
// unless the user set the variable. Each setting is logged at INFO with
// its reason; GOCL_DEFAULTS=0 turns them all off.
//
// Only variables for the other libraries of the process are set (the
// knowledge base rejects startup GOCL_ entries), and gocl's own settings
// never fall back to them (config.MarkSetByGocl).
package defaults

import (
	"sync"

	"gocl/doctor"
	"gocl/doctor/sysfs"
	"gocl/runtime/config"
	"gocl/runtime/debuglog"
)

var once sync.Once

// Apply judges this machine once per process, before its first
// communicator, and sets the startup defaults its findings call for. nvml
// reads the GPU facts (nil: none).
func Apply(nvml doctor.NVMLCollector) {
	once.Do(func() {
		// A defect here must not fail the communicator's init.
		defer func() {
			if r := recover(); r != nil {
				debuglog.Warnf(debuglog.Env, -1, "machine defaults skipped: internal error: %v", r)
			}
		}()
		apply(nvml, sysfs.System{Root: "/"})
	})
}

// apply is Apply on a given machine; it returns what it set and what it
// left as the user set it (for tests).
func apply(nvml doctor.NVMLCollector, sys sysfs.System) (set, kept []doctor.StartupDefault) {
	if !config.Bool("DEFAULTS") {
		debuglog.Infof(debuglog.Env, -1, "GOCL_DEFAULTS=0: no machine defaults")
		return nil, nil
	}
	// Only the cheap, local facts: no subprocess (torch, JAX, ldconfig) runs
	// inside a communicator's init.
	set, kept = doctor.StartupDefaults(doctor.Judge(sys.LocalFacts(nvml, nil), nil), nil, config.LookupEnv)
	for _, d := range set {
		if err := config.Setenv(d.Name, d.Value); err != nil {
			debuglog.Warnf(debuglog.Env, -1, "machine default %s=%s not set: %v", d.Name, d.Value, err)
			continue
		}
		config.MarkSetByGocl(d.Name)
		debuglog.Infof(debuglog.Env, -1, "%s=%s set by gocl for this process (machine default, rule %s): %s Export %s yourself to choose; GOCL_DEFAULTS=0 sets nothing.",
			d.Name, d.Value, d.Rule, d.Reason, d.Name)
	}
	for _, d := range kept {
		debuglog.Infof(debuglog.Env, -1, "%s=%q kept as you set it; rule %s would set %s: %s",
			d.Name, d.User, d.Rule, d.Value, d.Reason)
	}
	return set, kept
}
