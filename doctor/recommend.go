package doctor

import (
	"fmt"
	"strings"
)

// torchNeeds is what a recommended torch wheel must satisfy.
type torchNeeds struct {
	caps       []Capability // every GPU must run natively (or, failing that, via PTX)
	minNCCL    string       // "" for any
	useDriver  bool         // filter by the installed driver
	maxCUDA    string       // "" for any: only wheels with CUDA <= this
	skipSameAs string       // a wheel to leave out ("2.7.1+cu128"), e.g. the installed one
}

// torchAdvice is a recommended install command.
type torchAdvice struct {
	wheel      TorchWheel
	command    string // uv pip install ...
	pip        string // python -m pip install ...
	constraint string // why nothing matched, when command is ""
}

// recommendTorch picks a wheel from the knowledge base's table: the same
// torch minor release as the installed one when such a wheel qualifies
// (the smallest change), else the first qualifying one in table order
// (newest first). alt is the newest qualifying wheel when it differs.
func (j *judge) recommendTorch(n torchNeeds) (best, alt *torchAdvice) {
	var native, ptx []TorchWheel
	var reasons []string
	for _, w := range j.kb.TorchWheels.Wheels {
		if w.Torch+"+"+w.Tag == n.skipSameAs {
			continue
		}
		ok, viaPTX := true, false
		for _, c := range n.caps {
			v := ArchRunnable(w.ArchList, c)
			ok = ok && v.Runnable
			viaPTX = viaPTX || v.ViaPTX
		}
		if !ok {
			continue
		}
		if n.minNCCL != "" && MustVersion(w.NCCL).Less(MustVersion(n.minNCCL)) {
			continue
		}
		if n.maxCUDA != "" && MustVersion(n.maxCUDA).Less(MustVersion(w.CUDA)) {
			reasons = appendOnce(reasons, "CUDA "+n.maxCUDA+" or older")
			continue
		}
		if n.useDriver && j.driver != nil {
			if min, _, ok := j.kb.driverMinimumFor(w.CUDA); ok && j.driver.Less(min) {
				reasons = appendOnce(reasons, "driver "+j.driver.Raw)
				continue
			}
		}
		if py := j.pythonVersion(); py != nil {
			lo, hi := MustVersion(w.Python[0]), MustVersion(w.Python[1])
			mm := MustVersion(py.MajorMinor())
			if mm.Less(lo) || hi.Less(mm) {
				reasons = appendOnce(reasons, "Python "+py.MajorMinor())
				continue
			}
		}
		if viaPTX {
			ptx = append(ptx, w)
		} else {
			native = append(native, w)
		}
	}
	pool := native
	if len(pool) == 0 {
		pool = ptx
	}
	if len(pool) == 0 {
		return &torchAdvice{constraint: strings.Join(reasons, " and ")}, nil
	}
	pick := pool[0]
	if j.f.Torch != nil && j.f.Torch.Version != "" {
		if cur, err := ParseVersion(j.f.Torch.Version); err == nil {
			for _, w := range pool {
				if MustVersion(w.Torch).MajorMinor() == cur.MajorMinor() {
					pick = w
					break
				}
			}
		}
	}
	best = j.torchCommand(pick)
	if pool[0].Torch != pick.Torch || pool[0].Tag != pick.Tag {
		alt = j.torchCommand(pool[0])
	}
	return best, alt
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func (j *judge) pythonVersion() *Version {
	if j.f.Python == nil || j.f.Python.Version == "" {
		return nil
	}
	v, err := ParseVersion(j.f.Python.Version)
	if err != nil || len(v.Parts) < 2 {
		return nil
	}
	return &v
}

// torchCommand writes the exact install command for a wheel, with the
// companions (torchvision, torchaudio) that are installed, pinned to the
// same CUDA tag: uv (and pip) would otherwise keep the old +cuXXX build,
// since "torch==2.7.1" is satisfied by 2.7.1+cu126.
func (j *judge) torchCommand(w TorchWheel) *torchAdvice {
	index := j.kb.TorchIndexURL + w.Tag
	specs := []string{fmt.Sprintf("%q", "torch=="+w.Torch+"+"+w.Tag)}
	for _, name := range []string{"torchvision", "torchaudio"} {
		if v, ok := w.Companions[name]; ok && j.pkg(name) != "" {
			specs = append(specs, fmt.Sprintf("%q", name+"=="+v+"+"+w.Tag))
		}
	}
	py := ""
	if j.f.Python != nil && j.f.Python.Executable != "" {
		py = " --python " + j.f.Python.Executable
	}
	return &torchAdvice{
		wheel:   w,
		command: fmt.Sprintf("uv pip install%s --index-url %s %s", py, index, strings.Join(specs, " ")),
		pip:     fmt.Sprintf("%s -m pip install --index-url %s %s", j.python(), index, strings.Join(specs, " ")),
	}
}
