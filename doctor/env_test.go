package doctor

import (
	"testing"
)

func TestFilterEnv(t *testing.T) {
	env := FilterEnv([]string{"NCCL_DEBUG=INFO", "GOCL_TIMEOUT=30", "XLA_FLAGS=--a=1", "XLA_PYTHON_CLIENT_PREALLOCATE=false",
		"CUDA_VISIBLE_DEVICES=", "HOME=/root", "AWS_SECRET_ACCESS_KEY=x", "PATH=/bin", "NCCLX=1"})
	want := map[string]string{"NCCL_DEBUG": "INFO", "GOCL_TIMEOUT": "30", "XLA_FLAGS": "--a=1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_VISIBLE_DEVICES": ""}
	if len(env) != len(want) {
		t.Errorf("%v", env)
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("%s = %q (%v)", k, got, ok)
		}
	}
}
