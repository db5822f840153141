package doctor

import (
	"strings"
)

// envPrefixes select the environment variables worth reporting.
var envPrefixes = []string{"NCCL_", "GOCL_", "XLA_PYTHON_CLIENT_", "XLA_CLIENT_", "TORCH_NCCL_"}
var envNames = []string{"XLA_FLAGS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "JAX_PLATFORMS",
	"PYTORCH_CUDA_ALLOC_CONF", "LD_LIBRARY_PATH", "CUDA_HOME", "GODEBUG", "GOTRACEBACK",
	"JAX_CPU_COLLECTIVES_IMPLEMENTATION", "MPITRAMPOLINE_LIB"}

// FilterEnv keeps the variables the doctor reports from KEY=VALUE pairs.
func FilterEnv(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		keep := false
		for _, p := range envPrefixes {
			keep = keep || strings.HasPrefix(k, p)
		}
		for _, n := range envNames {
			keep = keep || k == n
		}
		if keep {
			out[k] = v
		}
	}
	return out
}
