package doctor

// StartupDefault is one setting of the knowledge base that libgocl applies
// by itself when it starts on a machine a rule flags (an env entry marked
// "startup"): a safe transport setting, never one the user made.
type StartupDefault struct {
	Name   string // the variable, e.g. NCCL_P2P_DISABLE
	Value  string // what gocl sets (Apply) or recommends (Kept)
	Rule   string // the finding's rule id
	Reason string // the finding's message: why this machine needs it
	User   string // the user's own value (Kept only)
}

// StartupDefaults splits the startup settings of r's findings into those to
// apply (the variable is unset) and those kept as the user set them. lookup
// reads the environment (config.LookupEnv).
func StartupDefaults(r *Report, kb *KB, lookup func(string) (string, bool)) (apply, kept []StartupDefault) {
	if kb == nil {
		kb = DefaultKB()
	}
	seen := map[string]bool{}
	for _, fd := range r.Findings {
		rule := kb.Rule(fd.ID)
		if rule == nil {
			continue
		}
		for _, e := range rule.Env {
			if !e.Startup || seen[e.Name] {
				continue
			}
			seen[e.Name] = true
			d := StartupDefault{Name: e.Name, Value: e.Value, Rule: fd.ID, Reason: fd.Message}
			if v, ok := lookup(e.Name); ok {
				d.User = v
				kept = append(kept, d)
				continue
			}
			apply = append(apply, d)
		}
	}
	return apply, kept
}
