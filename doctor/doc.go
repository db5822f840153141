// Package doctor is gocl doctor's judgement: the facts of a machine
// (Facts, the JSON schema of SCHEMA.md), the knowledge base as data
// (kb.json: checks, rules with severity, message, fix and references,
// version tables), Judge, which runs every check over the facts and returns
// a Report of verdicts and findings, and StartupDefaults, the settings
// libgocl.so applies itself when a rule flags the machine.
//
// The package runs no program and renders no text, so libgocl.so links it
// (doctor/defaults). Gathering facts lives apart: doctor/sysfs reads the
// kernel's files (libgocl.so uses it too), doctor/collect runs the Python
// probes, ldconfig and dmesg, doctor/nvmlprobe reads NVML through go-nvml,
// and doctor/render writes the text report; only cmd/gocl-doctor imports
// those three. Each check is one file, check_<id>.go, named after its id
// in kb.json.
package doctor
