package main

import "gocl/doctor/defaults"

// startup applies the machine's known-good defaults once per process,
// before its first communicator (doctor/defaults), reading the GPUs with
// libgocl's own NVML reader.
func startup() { defaults.Apply(nvmlFacts) }
