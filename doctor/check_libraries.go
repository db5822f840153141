package doctor

import (
	"regexp"
	"strconv"
	"strings"

	"gocl/doctor/internal/textutil"
)

var soName = regexp.MustCompile(`(lib[\w.+-]*?\.so(?:\.\d+)*)`)

// checkLibraries is check "libraries" of kb.json: shared libraries load.
func (j *judge) checkLibraries() outcome {
	var o outcome
	var ok []string
	if lib, known := j.f.Libraries["libcuda.so.1"]; known {
		if lib == "" && j.nvmlOK() {
			branch := ""
			if j.driver != nil {
				branch = strconv.Itoa(j.driver.Major())
			}
			o.add("libcuda-missing", map[string]any{"Branch": branch})
		} else if lib != "" {
			ok = append(ok, "libcuda.so.1")
		}
	}
	if t := j.f.Torch; t != nil && t.Version == "" && t.Error != "" {
		lib := ""
		if strings.Contains(t.Error, ".so") {
			if m := soName.FindStringSubmatch(t.Error); m != nil {
				lib = m[1]
			}
		}
		index := ""
		if v, err := ParseVersion(j.pkg("torch")); err == nil && strings.HasPrefix(v.Local, "cu") {
			index = j.kb.TorchIndexURL + v.Local
		}
		o.add("torch-import-failed", map[string]any{"Python": j.python(), "Error": textutil.FirstLine(t.Error), "Library": lib, "IndexURL": index})
	} else if t != nil && t.Version != "" {
		ok = append(ok, "torch")
	}
	if x := j.f.JAX; x != nil && x.JAX == "" && x.Error != "" {
		o.add("jax-import-failed", map[string]any{"Python": j.python(), "Error": textutil.FirstLine(x.Error), "Variant": j.jaxVariant()})
	} else if x != nil && x.JAX != "" {
		ok = append(ok, "jax")
	}
	if p := j.f.Python; p != nil && p.GoclPath != "" {
		if p.GoclNativeLib == "" {
			o.add("libgocl-missing", map[string]any{"Path": p.GoclPath, "Expected": p.GoclPath + "/_native/libgocl.so", "Python": j.python()})
		} else {
			ok = append(ok, "libgocl.so")
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(ok) == 0 {
		return skip("nothing to load here (no driver, torch, jax or gocl found)")
	}
	return pass("%s load", strings.Join(ok, ", "))
}
