package doctor

// checkHF is check "hf-trainer" of kb.json: with Hugging Face's
// transformers or accelerate installed, which route runs their Trainer and
// Accelerator over gocl. On CPU, accelerate accepts a backend only by the
// names gloo and mpi (accelerate/state.py, PartialState._prepare_backend),
// so naming gocl there fails; the route that works initialises gocl first.
func (j *judge) checkHF() outcome {
	tf, acc := j.pkg("transformers"), j.pkg("accelerate")
	if tf == "" && acc == "" {
		return skip("neither transformers nor accelerate is installed")
	}
	var o outcome
	o.add("hf-trainer-route", map[string]any{"Transformers": tf, "Accelerate": acc, "GPUs": len(j.f.GPUs)})
	return o
}
