package collect

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"gocl/doctor"
	"gocl/runtime/config"
)

//go:embed probe.py
var probeScript []byte

const probeMark = "GOCL_DOCTOR_FACTS "

// PythonProbe gathers torch, JAX and package facts by running an
// interpreter in subprocesses: importing torch initialises CUDA, prints
// warnings and can hang, none of which may reach the doctor itself.
type PythonProbe struct {
	Python  string        // interpreter path or name on PATH
	Timeout time.Duration // per section; all sections run at once
	Env     []string      // environment of the subprocesses (default: the process environment now)
}

// sectionResult is what one probe run prints.
type sectionResult struct {
	Python     *doctor.Python    `json:"python"`
	Packages   map[string]string `json:"packages"`
	Torch      *doctor.Torch     `json:"torch"`
	JAX        *doctor.JAX       `json:"jax"`
	Missing    string            `json:"missing"`
	ProbeError string            `json:"probe_error"`
}

// Collect fills f.Python, f.Packages, f.Torch and f.JAX, marking what it
// could not learn as missing.
func (p PythonProbe) Collect(ctx context.Context, f *doctor.Facts) {
	exe, err := exec.LookPath(p.Python)
	if err != nil {
		f.MarkMissing("python", fmt.Sprintf("interpreter %q not found: %v", p.Python, err))
		f.MarkMissing("torch", "no Python interpreter to probe")
		f.MarkMissing("jax", "no Python interpreter to probe")
		return
	}
	sections := []string{"base", "torch", "jax"}
	results := make([]sectionResult, len(sections))
	errs := make([]error, len(sections))
	var wg sync.WaitGroup
	for i, s := range sections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = p.run(ctx, exe, s)
		}()
	}
	wg.Wait()
	for i, s := range sections {
		r, err := results[i], errs[i]
		fact := s
		if s == "base" {
			fact = "python"
		}
		switch {
		case err != nil:
			f.MarkMissing(fact, err.Error())
			if s == "base" {
				f.Python = &doctor.Python{Executable: exe, Error: err.Error()}
			}
			continue
		case r.ProbeError != "":
			f.MarkMissing(fact, "probe failed: "+r.ProbeError)
			continue
		case r.Missing != "":
			f.MarkMissing(fact, r.Missing)
			continue
		}
		switch s {
		case "base":
			f.Python = r.Python
			if len(r.Packages) > 0 {
				f.Packages = r.Packages
			}
		case "torch":
			f.Torch = r.Torch
		case "jax":
			f.JAX = r.JAX
		}
	}
	if f.Python != nil && f.Python.Executable == "" {
		f.Python.Executable = exe
	}
}

func (p PythonProbe) run(ctx context.Context, exe, section string) (sectionResult, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-", section)
	cmd.Stdin = bytes.NewReader(probeScript)
	env := p.Env
	if env == nil {
		env = config.Environ()
	}
	if section == "jax" {
		// The probe only lists devices; it must not take 75% of a GPU
		// that a training job may be using.
		env = append(append([]string(nil), env...), "XLA_PYTHON_CLIENT_PREALLOCATE=false")
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	killGroup(cmd)
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return sectionResult{}, fmt.Errorf("%s probe timed out after %s (an import or CUDA initialisation hung)%s", section, timeout, tail(stderr.String()))
	}
	line := ""
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, probeMark) {
			line = strings.TrimPrefix(l, probeMark)
		}
	}
	if line == "" {
		why := "no result"
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				why = ee.String()
			} else {
				why = err.Error()
			}
		}
		return sectionResult{}, fmt.Errorf("%s probe with %s: %s%s", section, exe, why, tail(stderr.String()))
	}
	var r sectionResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return sectionResult{}, fmt.Errorf("%s probe: bad output: %w", section, err)
	}
	return r, nil
}

// tail keeps the last lines of a subprocess's stderr for an error message.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return ": " + strings.Join(lines, " | ")
}
