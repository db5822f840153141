// Command gocl-doctor explains CUDA / driver / torch / JAX / NCCL
// mismatches, one verdict per check, with the command that fixes each.
//
//	gocl-doctor [--json] [--facts FILE.json] [--python PY] [--pid PID] [--no-color]
//
// It prints one pasteable block (versions, GPUs, topology and P2P
// matrices, environment), a verdict line per check, the findings with their
// fixes, and the recommended environment. --json writes the same as the
// documented JSON schema (doctor/SCHEMA.md). --facts judges facts saved on
// another machine (the JSON output, or its "facts" object) without looking
// at this one.
//
// Exit status: 0 when no finding is an error (warnings and notes allowed),
// 1 when at least one is, 2 for a usage error or an unreadable facts file.
//
// NVML (github.com/NVIDIA/go-nvml) is used here and only here, never in
// libgocl.so; without a driver the NVML facts are reported as missing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"gocl/doctor"
	"gocl/doctor/collect"
	"gocl/doctor/nvmlprobe"
	"gocl/doctor/render"
	"gocl/runtime/config"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // an error-level finding
	exitUsage = 2 // bad flags, unreadable facts
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, nvmlprobe.System))
}

// run is main without the process: tests call it with their own writers
// and NVML collector.
func run(args []string, stdout, stderr io.Writer, nvml doctor.NVMLCollector) int {
	fs := flag.NewFlagSet("gocl-doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "write the report as JSON ({\"schema\", \"facts\", \"findings\", \"checks\", \"recommended_env\"})")
	factsFile := fs.String("facts", "", "judge the facts in this JSON file (a saved --json report or its facts object) instead of this machine")
	python := fs.String("python", "", "Python interpreter whose torch, JAX and packages to examine (default: python3 on PATH; \"none\" to skip)")
	pid := fs.Int("pid", 0, "process to scan for loaded Go runtimes (gocl.doctor passes the calling Python's pid)")
	noColor := fs.Bool("no-color", false, "no ANSI colours (default: colours when stdout is a terminal and NO_COLOR is unset)")
	timeout := fs.Duration("timeout", 120*time.Second, "time limit for each Python probe (torch and jax imports run in subprocesses)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gocl-doctor [--json] [--facts FILE.json] [--python PY] [--pid PID] [--no-color]\n\n")
		fmt.Fprintf(stderr, "Explains CUDA / driver / torch / JAX / NCCL mismatches with the command that fixes each.\n")
		fmt.Fprintf(stderr, "Exit status: 0 no error-level finding, 1 at least one, 2 usage error or unreadable facts.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gocl-doctor: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	if *version {
		fmt.Fprintf(stdout, "gocl-doctor %s (schema %s, knowledge base %s)\n", doctor.DoctorVersion, doctor.Schema, doctor.DefaultKB().Version)
		return exitOK
	}

	var facts *doctor.Facts
	source := ""
	if *factsFile != "" {
		f, err := doctor.LoadFacts(*factsFile)
		if err != nil {
			fmt.Fprintf(stderr, "gocl-doctor: %v\n", err)
			return exitUsage
		}
		facts, source = f, *factsFile
	} else {
		py := *python
		switch py {
		case "none":
			py = ""
		case "":
			if p, err := exec.LookPath("python3"); err == nil {
				py = p
			}
		}
		facts = collect.Collect(context.Background(), collect.Options{
			NVML: nvml, Python: py, PythonTimeout: *timeout, PID: *pid,
		})
	}
	report := doctor.Judge(facts, nil)
	if *asJSON {
		if err := report.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "gocl-doctor: %v\n", err)
			return exitUsage
		}
	} else {
		color := !*noColor && !noColorEnv() && isTerminal(stdout)
		render.Text(stdout, report, render.TextOptions{Color: color, Source: source})
	}
	if report.HasErrors() {
		return exitError
	}
	return exitOK
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// noColorEnv reports whether NO_COLOR is set and not empty (no-color.org).
func noColorEnv() bool {
	v, _ := config.LookupEnv("NO_COLOR")
	return v != ""
}
