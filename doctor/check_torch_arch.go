package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"gocl/doctor/internal/textutil"
)

// checkTorchArch is check "torch-arch" of kb.json: torch has kernels for every GPU.
func (j *judge) checkTorchArch() outcome {
	t := j.f.Torch
	if t == nil || t.Version == "" {
		return skip("%s", orDefault(j.f.Missing["torch"], "torch not installed"))
	}
	if len(j.gpus) == 0 {
		return skip("no GPU")
	}
	var o outcome
	if t.CUDA == "" {
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: j.ncclNeed()})
		o.add("torch-cpu-build", map[string]any{"Torch": t.Version, "Count": len(j.gpus), "Names": names(j.gpus), "Command": best.command})
		return o
	}
	if len(t.ArchList) == 0 {
		return skip("torch.cuda.get_arch_list() is empty or missing")
	}
	var fine []string
	for _, group := range j.models() {
		g := group[0]
		v := ArchRunnable(t.ArchList, g.cc)
		if v.Parsed == 0 {
			return skip("arch list %v is not CUDA's (ROCm build?)", t.ArchList)
		}
		vars := map[string]any{
			"GPU": indices(group), "Name": g.Name, "SM": g.cc.SM(), "CC": g.cc.String(),
			"SMMajor": g.cc.Major, "Minor": g.cc.Minor, "Torch": t.Version,
			"ArchList": strings.Join(t.ArchList, " "), "By": v.By,
		}
		switch {
		case !v.Runnable:
			best, alt := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: j.ncclNeed()})
			vars["Command"], vars["PipCommand"], vars["Constraint"] = best.command, best.pip, best.constraint
			vars["Alternative"] = ""
			if alt != nil {
				vars["Alternative"] = alt.command
			}
			o.add("torch-arch-unsupported", vars)
		case v.ViaPTX:
			best, _ := j.recommendTorch(torchNeeds{caps: []Capability{g.cc}, useDriver: true, minNCCL: j.ncclNeed()})
			vars["Command"] = ""
			if best.wheel.Torch != "" {
				if v2 := ArchRunnable(best.wheel.ArchList, g.cc); !v2.ViaPTX {
					vars["Command"] = best.command
				}
			}
			o.add("torch-arch-ptx-only", vars)
		default:
			fine = append(fine, fmt.Sprintf("%s by %s", g.cc.SM(), v.By))
		}
	}
	if t.CUDAAvailable != nil && !*t.CUDAAvailable && j.nvmlOK() && len(j.f.GPUs) > 0 {
		why := "torch.cuda.is_available() is False"
		if t.Error != "" {
			why += ": " + textutil.FirstLine(t.Error)
		}
		cvd, set := j.f.Env["CUDA_VISIBLE_DEVICES"]
		if !set {
			cvd = "unset"
		} else {
			cvd = strconv.Quote(cvd)
		}
		o.add("torch-cuda-unavailable", map[string]any{"Torch": t.Version, "CUDA": t.CUDA, "Count": len(j.f.GPUs), "Why": why, "CVD": cvd, "Python": j.python()})
	}
	if len(o.hits) > 0 {
		return o
	}
	return pass("%s runs %s", j.torchLabel(), strings.Join(fine, "; "))
}
