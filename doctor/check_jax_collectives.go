package doctor

import "strings"

// checkJAXCollectives is check "jax-collectives" of kb.json: which
// cross-process CPU collectives a JAX process started in this environment
// would use (JAX_CPU_COLLECTIVES_IMPLEMENTATION; for mpi, the library
// MPITRAMPOLINE_LIB names), and how to switch to gocl's.
func (j *judge) checkJAXCollectives() outcome {
	x := j.f.JAX
	if (x == nil || x.JAX == "" && x.Error == "") && j.pkg("jax") == "" {
		return skip("%s", orDefault(j.f.Missing["jax"], "jax not installed"))
	}
	env := j.f.Env
	if env == nil {
		return skip("no environment facts")
	}
	impl, set := env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"]
	lib := env["MPITRAMPOLINE_LIB"]
	gocl := ""
	if p := j.f.Python; p != nil {
		gocl = p.GoclMPIABILib
	}
	vars := map[string]any{"Value": impl, "Set": set && impl != "", "Lib": lib, "GoclLib": gocl,
		"MPI": impl == "mpi" || impl == "" && j.kb.JAXCollectives.Default == "mpi"}
	use := impl
	if use == "" {
		use = j.kb.JAXCollectives.Default
	}
	m := j.f.MPILibrary
	if m != nil && (lib == "" || m.Path != lib) {
		m = nil // examined for another value: not these facts
	}
	var o outcome
	switch {
	case !j.kb.JAXCollectives.known(impl):
		// import jax itself raises (jax-import-failed names the ValueError)
		vars["Known"] = strings.Join(j.kb.JAXCollectives.Known, ", ")
		o.add("jax-collectives-invalid", vars)
	case m != nil && (!m.Exists || m.Error != "" || !m.MPIABI):
		// jaxlib's MPItrampoline loads it when jaxlib loads, whatever the choice
		switch {
		case !m.Exists:
			vars["Why"] = "does not exist"
		case m.Error != "":
			vars["Why"] = "cannot be read as a shared library (" + m.Error + ")"
		default:
			vars["Why"] = "is not a library with MPItrampoline's MPI ABI (it defines no mpiwrapper_version_major and MPIABI_Init)"
		}
		o.add("jax-collectives-mpi-lib-unusable", vars)
	case x == nil || x.JAX == "":
		return skip("%s", orDefault(j.f.Missing["jax"], "import jax failed"))
	case use == "gloo":
		o.add("jax-collectives-gloo", vars)
	case use != "mpi":
		return pass("%s (JAX_CPU_COLLECTIVES_IMPLEMENTATION=%s)", use, impl)
	case lib == "":
		o.add("jax-collectives-mpi-no-lib", vars)
	case m == nil:
		return pass("MPI through MPItrampoline: %s (not examined)", lib)
	case m.Gocl:
		return pass("gocl's MPI ABI (%s)", lib)
	default:
		o.add("jax-collectives-other-mpi", vars)
	}
	return o
}
