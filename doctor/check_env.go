package doctor

import (
	"sort"
	"strconv"
	"strings"

	"gocl/runtime/config"
)

// extraGoclVars are GOCL_ variables read outside the runtime's table (by
// the Python package, the tests, the doctor).
var extraGoclVars = []string{"GOCL_LIBRARY", "GOCL_DOCTOR", "GOCL_MASTER_PORT", "GOCL_TORCH_IMPL"}

// checkEnv is check "env" of kb.json: environment variables.
func (j *judge) checkEnv() outcome {
	if j.f.Env == nil {
		return skip("no environment facts")
	}
	var o outcome
	env := j.f.Env
	if cvd, ok := env["CUDA_VISIBLE_DEVICES"]; ok && j.nvmlOK() && len(j.f.GPUs) > 0 && !firstVisibleValid(cvd, j.f.GPUs) {
		o.add("cuda-visible-devices-hides-all", map[string]any{"Value": strconv.Quote(cvd), "Count": len(j.f.GPUs)})
	}
	known := map[string]bool{}
	var table []string
	for _, v := range config.Table() {
		known["GOCL_"+v.Name] = true
		table = append(table, "GOCL_"+v.Name)
	}
	for _, n := range extraGoclVars {
		known[n] = true
		table = append(table, n)
	}
	var names []string
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !strings.HasPrefix(k, "GOCL_") || known[k] || strings.HasPrefix(k, "GOCL_TEST_") {
			continue
		}
		// Only likely typos are reported: other GOCL_ names may belong to
		// tools this doctor does not know.
		if s := closest(k, table); s != "" {
			o.add("gocl-env-typo", map[string]any{"Name": k, "Suggestion": s, "Value": config.Shown(k, env[k])})
		}
	}
	p2pOff := truthy(env["NCCL_P2P_DISABLE"])
	noP2P := j.noP2PAnywhere()
	if truthy(env["NCCL_SHM_DISABLE"]) {
		_, ifname := env["NCCL_SOCKET_IFNAME"]
		o.add("nccl-shm-disabled", map[string]any{"P2POff": p2pOff || noP2P, "NoIfname": !ifname})
	}
	if p2pOff && noP2P {
		if _, gocl := env["GOCL_P2P_DISABLE"]; !gocl {
			o.add("nccl-p2p-disable-noop", map[string]any{"Value": env["NCCL_P2P_DISABLE"], "Why": "NVML reports no P2P between any pair"})
		}
	}
	if len(o.hits) > 0 {
		return o
	}
	var set []string
	for _, k := range names {
		set = append(set, k)
	}
	if len(set) == 0 {
		return pass("no NCCL_/GOCL_/XLA_ variables set")
	}
	return pass("%d variable(s) set: %s", len(set), strings.Join(set, " "))
}

func truthy(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "1" || s == "true" || s == "yes" || s == "on"
}

// noP2PAnywhere: at least two GPUs and NVML reports no P2P on any pair.
func (j *judge) noP2PAnywhere() bool {
	p := j.f.P2P
	if p == nil || len(p.Read) < 2 {
		return false
	}
	for a := range p.Read {
		for b := range p.Read[a] {
			if a != b && p.Read[a][b] == "OK" {
				return false
			}
		}
	}
	return true
}

// firstVisibleValid mirrors CUDA's parsing of CUDA_VISIBLE_DEVICES: the list
// is cut at the first invalid entry, so an invalid first entry hides all.
func firstVisibleValid(cvd string, gpus []GPU) bool {
	first := strings.TrimSpace(strings.Split(cvd, ",")[0])
	if first == "" {
		return false
	}
	if strings.HasPrefix(first, "GPU-") || strings.HasPrefix(first, "MIG-") {
		for _, g := range gpus {
			if g.UUID == "" || strings.HasPrefix(g.UUID, first) || strings.HasPrefix(first, "MIG-") {
				return true
			}
		}
		return false
	}
	n, err := strconv.Atoi(first)
	return err == nil && n >= 0 && n < len(gpus)
}

// closest returns the name in table within edit distance 2 of s, if any.
func closest(s string, table []string) string {
	best, bestD := "", 3
	for _, t := range table {
		if d := editDistance(s, t); d < bestD {
			best, bestD = t, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
