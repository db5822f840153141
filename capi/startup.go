package main

import "gocl/runtime/defaults"

// startup applies the machine's known-good defaults once per process,
// before its first communicator (runtime/defaults), reading the GPUs with
// libgocl's own NVML reader.
func startup() { defaults.Apply(nvmlFacts) }
