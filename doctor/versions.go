package doctor

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a dotted numeric version such as a driver's "570.124.06", a
// CUDA "12.8" or an NCCL "2.26.2". A local part ("+cu126") and pre-release
// tails ("rc1", ".dev20250101") are kept aside and do not take part in
// comparisons.
type Version struct {
	Parts []int
	Local string // after "+", e.g. "cu126"
	Raw   string
}

// ParseVersion reads the leading dotted numbers of s. It fails when s does
// not start with a number.
func ParseVersion(s string) (Version, error) {
	v := Version{Raw: s}
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		v.Local = s[i+1:]
		s = s[:i]
	}
	for _, field := range strings.Split(s, ".") {
		n := 0
		for n < len(field) && field[n] >= '0' && field[n] <= '9' {
			n++
		}
		if n == 0 {
			break
		}
		x, err := strconv.Atoi(field[:n])
		if err != nil {
			return Version{}, fmt.Errorf("version %q: %w", v.Raw, err)
		}
		v.Parts = append(v.Parts, x)
		if n < len(field) { // "0rc1": the numeric part counts, the tail ends it
			break
		}
	}
	if len(v.Parts) == 0 {
		return Version{}, fmt.Errorf("version %q: no leading number", v.Raw)
	}
	return v, nil
}

// MustVersion is ParseVersion for constants of the knowledge base.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Compare returns -1, 0 or +1; missing parts count as zero, so "12.8"
// equals "12.8.0".
func (v Version) Compare(w Version) int {
	n := max(len(v.Parts), len(w.Parts))
	for i := range n {
		a, b := 0, 0
		if i < len(v.Parts) {
			a = v.Parts[i]
		}
		if i < len(w.Parts) {
			b = w.Parts[i]
		}
		if a != b {
			if a < b {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Less reports v < w.
func (v Version) Less(w Version) bool { return v.Compare(w) < 0 }

// MajorMinor is "X.Y".
func (v Version) MajorMinor() string {
	if len(v.Parts) == 1 {
		return fmt.Sprintf("%d.0", v.Parts[0])
	}
	return fmt.Sprintf("%d.%d", v.Parts[0], v.Parts[1])
}

// Major is the first number.
func (v Version) Major() int { return v.Parts[0] }

func (v Version) String() string {
	s := make([]string, len(v.Parts))
	for i, p := range v.Parts {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ".")
}

// CUDAVersionFromInt turns NVML's or cudaDriverGetVersion's integer (12080)
// into "12.8".
func CUDAVersionFromInt(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", n/1000, (n%1000)/10)
}

// Capability is a compute capability such as 12.0 (sm_120).
type Capability struct{ Major, Minor int }

// ParseCapability reads "12.0" (or "12.0a", the suffix ignored).
func ParseCapability(s string) (Capability, error) {
	maj, min, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok {
		return Capability{}, fmt.Errorf("compute capability %q: want MAJOR.MINOR", s)
	}
	a, err1 := strconv.Atoi(maj)
	min = strings.TrimRight(min, "abcdefghijklmnopqrstuvwxyz")
	b, err2 := strconv.Atoi(min)
	if err1 != nil || err2 != nil {
		return Capability{}, fmt.Errorf("compute capability %q: want MAJOR.MINOR", s)
	}
	return Capability{a, b}, nil
}

func (c Capability) String() string { return fmt.Sprintf("%d.%d", c.Major, c.Minor) }

// SM is the "sm_XY" name.
func (c Capability) SM() string { return fmt.Sprintf("sm_%d%d", c.Major, c.Minor) }

// LE reports c <= d.
func (c Capability) LE(d Capability) bool {
	return c.Major < d.Major || (c.Major == d.Major && c.Minor <= d.Minor)
}

// ArchEntry is one element of torch.cuda.get_arch_list(): a cubin ("sm_86")
// or PTX ("compute_90"), possibly arch-specific ("sm_90a") or
// family-specific ("sm_100f").
type ArchEntry struct {
	PTX    bool
	Cap    Capability
	Suffix string // "", "a" or "f"
	Raw    string
}

// ParseArch reads "sm_120", "compute_90", "sm_90a", "sm_100f".
func ParseArch(s string) (ArchEntry, error) {
	e := ArchEntry{Raw: s}
	var num string
	switch {
	case strings.HasPrefix(s, "sm_"):
		num = s[3:]
	case strings.HasPrefix(s, "compute_"):
		num, e.PTX = s[8:], true
	default:
		return e, fmt.Errorf("arch %q: want sm_XY or compute_XY", s)
	}
	if n := len(num); n > 0 && (num[n-1] == 'a' || num[n-1] == 'f') {
		e.Suffix, num = num[n-1:], num[:n-1]
	}
	if len(num) < 2 {
		return e, fmt.Errorf("arch %q: want at least two digits", s)
	}
	x, err := strconv.Atoi(num)
	if err != nil || x < 0 {
		return e, fmt.Errorf("arch %q: want sm_XY or compute_XY", s)
	}
	e.Cap = Capability{x / 10, x % 10}
	return e, nil
}

// RunsOn reports whether code built for this entry can run on a GPU of
// capability c, by CUDA's rules:
//   - a cubin runs on the same major with a minor at most the GPU's (sm_86
//     runs on 8.9; sm_90 does not run on 12.0);
//   - an arch-specific cubin or PTX ("a") only on exactly that capability;
//   - a family-specific one ("f") on the same major, minor at most the GPU's;
//   - PTX is JIT-compiled for any GPU of equal or higher capability.
func (e ArchEntry) RunsOn(c Capability) bool {
	switch {
	case e.Suffix == "a":
		return e.Cap == c
	case e.PTX && e.Suffix == "":
		return e.Cap.LE(c)
	default: // cubin, or family-specific code
		return e.Cap.Major == c.Major && e.Cap.Minor <= c.Minor
	}
}

// ArchVerdict says whether an arch list can run on a capability, and why.
type ArchVerdict struct {
	Runnable bool
	By       string // the entry that makes it runnable ("sm_86", "compute_90")
	ViaPTX   bool   // only through JIT compilation of PTX (slow first start)
	Parsed   int    // how many entries were understood
}

// ArchRunnable decides, from an arch list alone, whether a GPU of
// capability c can run the code. A cubin match wins over PTX.
func ArchRunnable(list []string, c Capability) ArchVerdict {
	var v ArchVerdict
	for _, s := range list {
		e, err := ParseArch(s)
		if err != nil {
			continue
		}
		v.Parsed++
		if !e.RunsOn(c) {
			continue
		}
		switch {
		case !e.PTX && (!v.Runnable || v.ViaPTX):
			v.Runnable, v.By, v.ViaPTX = true, e.Raw, false
		case e.PTX && !v.Runnable:
			v.Runnable, v.By, v.ViaPTX = true, e.Raw, true
		}
	}
	return v
}
