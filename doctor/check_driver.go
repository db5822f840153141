package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"gocl/doctor/internal/textutil"
)

type driverNeed struct {
	what string
	min  Version
	hard bool   // the software cannot work at all with an older driver
	why  string // for hard needs
	cuda string // the wheel's CUDA, for soft needs
}

// checkDriver is check "driver" of kb.json: driver new enough for the installed CUDA wheels.
func (j *judge) checkDriver() outcome {
	if j.driver == nil {
		if len(j.gpus) == 0 {
			return skip("no driver, no GPU")
		}
		return skip("driver version unknown (NVML missing)")
	}
	var needs []driverNeed
	for _, group := range j.models() {
		g := group[0]
		if min, ok := j.kb.ArchMinimumDriver.minimum(g.cc.String()); ok && j.driver.Less(min) {
			needs = append(needs, driverNeed{
				what: fmt.Sprintf("GPU %s (%s, %s)", indices(group), g.Name, g.cc.SM()), min: min, hard: true,
				why: fmt.Sprintf("%s GPUs are supported from driver %s on.", g.cc.SM(), min.Raw),
			})
		}
	}
	var torchSoft *driverNeed
	if t := j.f.Torch; t != nil && t.CUDA != "" {
		if min, _, ok := j.kb.driverMinimumFor(t.CUDA); ok && j.driver.Less(min) {
			wheel := MustVersion(t.CUDA)
			n := driverNeed{what: j.torchLabel(), min: min, cuda: t.CUDA}
			floor, known := j.kb.DriverMinorCompat.minimum(strconv.Itoa(wheel.Major()))
			switch {
			case !known || j.driver.Less(floor):
				n.hard = true
				n.why = fmt.Sprintf("A driver older than %s cannot run any CUDA %d.x program: torch reports 'The NVIDIA driver on your system is too old' and torch.cuda.is_available() is False.", floorRaw(floor, known), wheel.Major())
			case len(needs) > 0: // the GPU itself already needs a newer driver
				n.hard = true
			}
			if n.hard {
				needs = append(needs, n)
			} else {
				torchSoft = &n
			}
		}
	}
	var o outcome
	if len(needs) > 0 {
		var whats, whys []string
		min := needs[0].min
		torchHard := false
		for _, n := range needs {
			whats = append(whats, n.what)
			if n.why != "" {
				whys = appendOnce(whys, n.why)
			}
			if min.Less(n.min) {
				min = n.min
			}
			torchHard = torchHard || n.cuda != ""
		}
		downgrade := ""
		if torchHard && len(j.gpus) > 0 && j.driverCUDA() != "" {
			if best, _ := j.recommendTorch(torchNeeds{caps: j.caps(j.gpus), useDriver: true, maxCUDA: j.driverCUDA(), minNCCL: j.ncclNeed()}); best.command != "" {
				downgrade = best.command
			}
		}
		o.add("driver-too-old", map[string]any{
			"What": strings.Join(whats, " and "), "Min": min.Raw, "Driver": j.driver.Raw,
			"DriverCUDA": textutil.OrUnknown(j.driverCUDA()), "Why": strings.Join(whys, " "),
			"Branch": strconv.Itoa(min.Major()), "Downgrade": downgrade,
		})
	}
	if torchSoft != nil {
		wheel := MustVersion(torchSoft.cuda)
		floor, _ := j.kb.DriverMinorCompat.minimum(strconv.Itoa(wheel.Major()))
		o.add("driver-minor-compat", map[string]any{
			"What": torchSoft.what, "CUDA": torchSoft.cuda, "Min": torchSoft.min.Raw, "Driver": j.driver.Raw,
			"DriverCUDA": textutil.OrUnknown(j.driverCUDA()), "Branch": strconv.Itoa(torchSoft.min.Major()),
			"Major": wheel.Major(), "Floor": floor.Raw,
		})
	}
	if len(o.hits) > 0 {
		return o
	}
	detail := fmt.Sprintf("driver %s (CUDA %s)", j.driver.Raw, textutil.OrUnknown(j.driverCUDA()))
	if t := j.f.Torch; t != nil && t.CUDA != "" {
		if min, _, ok := j.kb.driverMinimumFor(t.CUDA); ok {
			detail += fmt.Sprintf(" >= %s needed by torch's CUDA %s", min.Raw, t.CUDA)
		}
	}
	return pass("%s", detail)
}

func floorRaw(v Version, ok bool) string {
	if !ok {
		return "the CUDA major's first release"
	}
	return v.Raw
}
