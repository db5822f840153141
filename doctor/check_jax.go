package doctor

import (
	"fmt"
	"sort"
	"strings"

	"gocl/doctor/internal/textutil"
)

func (j *judge) jaxVariant() string {
	if x := j.f.JAX; x != nil {
		for name := range x.Plugins {
			if strings.Contains(name, "cuda13") {
				return "cuda13"
			}
		}
		for name := range x.Plugins {
			if strings.Contains(name, "cuda12") {
				return "cuda12"
			}
		}
	}
	if j.driver != nil && !j.driver.Less(MustVersion(j.kb.JAX.PluginMinimumDriver["cuda13"])) {
		return "cuda13"
	}
	return "cuda12"
}

// jaxPlugin returns the installed CUDA plugin's distribution and version.
func (j *judge) jaxPlugin() (string, string) {
	x := j.f.JAX
	if x == nil {
		return "", ""
	}
	keys := make([]string, 0, len(x.Plugins))
	for k := range x.Plugins {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.Contains(k, "cuda") {
			return k, x.Plugins[k]
		}
	}
	return "", ""
}

// checkJAX is check "jax" of kb.json: JAX on this GPU.
func (j *judge) checkJAX() outcome {
	x := j.f.JAX
	if x == nil || x.JAX == "" {
		return skip("%s", orDefault(j.f.Missing["jax"], "jax not installed"))
	}
	var o outcome
	plugin, pluginVersion := j.jaxPlugin()
	variant := j.jaxVariant()
	if plugin != "" && j.driver != nil {
		if min, ok := j.kb.JAX.PluginMinimumDriver[variant]; ok && j.driver.Less(MustVersion(min)) {
			other := ""
			if variant == "cuda13" && !j.driver.Less(MustVersion(j.kb.JAX.PluginMinimumDriver["cuda12"])) {
				other = "cuda12"
			}
			o.add("jax-driver-too-old", map[string]any{"Plugin": plugin, "Version": pluginVersion, "Variant": variant,
				"Min": min, "Driver": j.driver.Raw, "Other": other, "Python": j.python()})
		}
	}
	gpuBackend := x.Backend == "gpu" || x.Backend == "cuda"
	platforms, pinned := j.f.Env["JAX_PLATFORMS"]
	cpuByChoice := pinned && !strings.Contains(platforms, "cuda") && !strings.Contains(platforms, "gpu")
	if len(j.f.GPUs) > 0 && !gpuBackend && !cpuByChoice && (plugin == "" || x.Backend != "") {
		o.add("jax-no-gpu", map[string]any{"JAX": x.JAX, "Backend": textutil.OrUnknown(x.Backend), "Count": len(j.f.GPUs),
			"Error": textutil.FirstLineOrEmpty(x.Error), "Python": j.python(), "Variant": variant})
	}
	sm12 := j.sm12()
	if len(sm12) > 0 && plugin != "" {
		if variant == "cuda12" {
			need := MustVersion(j.kb.JAX.SM120MinimumPtxas)
			for _, p := range []string{"nvidia-cuda-nvcc-cu12", "nvidia-nvjitlink-cu12"} {
				if v, err := ParseVersion(j.pkg(p)); err == nil && v.Less(need) {
					o.add("jax-cuda12-old-ptxas", map[string]any{"SM": sm12[0].cc.SM(), "Package": p, "Version": v.Raw, "Python": j.python()})
					break
				}
			}
		}
		if flags := j.f.Env["XLA_FLAGS"]; !strings.Contains(flags, "xla_gpu_autotune_level") {
			o.add("jax-blackwell-autotune", map[string]any{"SM": sm12[0].cc.SM(), "Names": names(sm12),
				"Flags": appendFlag(flags, "--xla_gpu_autotune_level=0")})
		}
	}
	if plugin != "" && len(j.gpus) > 0 && j.f.Torch != nil && j.f.Torch.CUDA != "" {
		set := false
		for _, k := range []string{"XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR"} {
			if _, ok := j.f.Env[k]; ok {
				set = true
			}
		}
		if !set {
			o.add("jax-memory-sharing", map[string]any{})
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	detail := fmt.Sprintf("jax %s on %s", x.JAX, textutil.OrUnknown(x.Backend))
	if plugin != "" {
		detail += fmt.Sprintf(" (%s %s)", plugin, pluginVersion)
	}
	return pass("%s", detail)
}
