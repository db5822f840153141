package doctor

// checkNCCL is check "nccl" of kb.json: NCCL version on Blackwell (sm_120).
func (j *judge) checkNCCL() outcome {
	sm12 := j.sm12()
	if len(sm12) == 0 {
		return skip("no sm_120 GPU")
	}
	version, source := "", ""
	if t := j.f.Torch; t != nil && t.NCCLVersion != "" {
		version, source = t.NCCLVersion, "torch "+t.Version
	} else {
		for _, p := range []string{"nvidia-nccl-cu13", "nvidia-nccl-cu12"} {
			if v := j.pkg(p); v != "" {
				version, source = v, p
				break
			}
		}
	}
	if version == "" {
		return skip("NCCL version unknown (no torch, no nvidia-nccl-* package)")
	}
	v, err := ParseVersion(version)
	if err != nil {
		return skip("NCCL version %q unreadable", version)
	}
	min, rec := MustVersion(j.kb.NCCL.SM120Minimum), MustVersion(j.kb.NCCL.SM120Recommended)
	vars := map[string]any{"Source": source, "NCCL": version, "GPUs": indices(sm12), "Count": len(sm12), "Recommended": rec.Raw}
	var o outcome
	switch {
	case v.Less(min):
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: rec.Raw})
		vars["Command"] = best.command
		o.add("nccl-broken-sm120", vars)
	case v.Less(rec) && len(sm12) >= 2:
		best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, minNCCL: rec.Raw})
		vars["Command"] = best.command
		o.add("nccl-old-sm120", vars)
	default:
		return pass("NCCL %s (%s) on sm_120", version, source)
	}
	return o
}
