package doctor

import (
	"fmt"
	"strings"
)

// checkProcess is check "process" of kb.json: process model (fork, Go runtimes).
func (j *judge) checkProcess() outcome {
	var o outcome
	var notes []string
	if p := j.f.Python; p != nil && p.StartMethodDefault != "" {
		if p.StartMethodDefault == "fork" {
			o.add("fork-start-method", map[string]any{"Python": j.python(), "Version": p.Version, "Method": p.StartMethodDefault})
		} else {
			notes = append(notes, "multiprocessing default: "+p.StartMethodDefault)
		}
	}
	if g := j.f.GoRuntimes; g != nil && g.Error == "" {
		if len(g.Objects) > 1 {
			var paths []string
			for _, obj := range g.Objects {
				paths = append(paths, obj.Path)
			}
			o.add("go-runtimes-multiple", map[string]any{"PID": g.PID, "Count": len(g.Objects), "Objects": strings.Join(paths, ", ")})
		} else {
			notes = append(notes, fmt.Sprintf("%d Go runtime(s) in process %d", len(g.Objects), g.PID))
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(notes) == 0 {
		return skip("no Python or process facts")
	}
	return pass("%s", strings.Join(notes, "; "))
}
