package collect

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gocl/doctor"
	"gocl/doctor/sysfs"
)

// UVMHMMError looks for the nvidia-uvm HMM/KASLR failure in the kernel
// log; nil when the log cannot be read (dmesg_restrict).
func UVMHMMError(ctx context.Context) *bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "dmesg").Output()
	if err != nil {
		return nil
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "request_free_mem_region") && strings.Contains(l, "-34") {
			found = true
		}
	}
	return &found
}

// Libraries finds the driver's libraries the way the dynamic loader would:
// LD_LIBRARY_PATH, then ldconfig's cache, then the usual directories.
func Libraries(s sysfs.System, names []string, ldLibraryPath string) map[string]string {
	cache := map[string]string{}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && s.Root == "/" {
		for _, line := range strings.Split(string(out), "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
			if !ok {
				continue
			}
			if _, path, ok := strings.Cut(rest, "=> "); ok {
				if _, dup := cache[name]; !dup {
					cache[name] = strings.TrimSpace(path)
				}
			}
		}
	}
	dirs := filepath.SplitList(ldLibraryPath)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/lib/wsl/lib")
	out := map[string]string{}
	for _, n := range names {
		out[n] = ""
		for _, d := range dirs {
			if d != "" && fileExists(filepath.Join(s.Path(d), n)) {
				out[n] = filepath.Join(d, n)
				break
			}
		}
		if out[n] == "" {
			out[n] = cache[n]
		}
	}
	return out
}

// GoRuntimesIn lists the Go-built files mapped into process pid: each is a
// Go runtime (a c-shared library, or the executable itself).
func GoRuntimesIn(s sysfs.System, pid int) *doctor.GoRuntimes {
	g := &doctor.GoRuntimes{PID: pid, Objects: []doctor.GoObject{}}
	data, err := os.ReadFile(s.Path(fmt.Sprintf("/proc/%d/maps", pid)))
	if err != nil {
		g.Error = err.Error()
		return g
	}
	seen := map[string]bool{}
	var paths []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || seen[f[5]] {
			continue
		}
		seen[f[5]] = true
		paths = append(paths, f[5])
	}
	sort.Strings(paths)
	for _, p := range paths {
		if obj, ok := goObject(s.Path(p)); ok {
			obj.Path = p
			g.Objects = append(g.Objects, obj)
		}
	}
	return g
}

// goObject reports whether an ELF file was built by Go (it has a
// .go.buildinfo section) and reads its build information.
func goObject(path string) (doctor.GoObject, bool) {
	ef, err := elf.Open(path)
	if err != nil {
		return doctor.GoObject{}, false
	}
	isGo := ef.Section(".go.buildinfo") != nil
	ef.Close()
	if !isGo {
		return doctor.GoObject{}, false
	}
	var o doctor.GoObject
	if bi, err := buildinfo.ReadFile(path); err == nil {
		o.GoVersion = bi.GoVersion
		o.Module = bi.Path
		for _, st := range bi.Settings {
			if st.Key == "-buildmode" {
				o.BuildMode = st.Value
			}
		}
	}
	return o, true
}

// MPILibrary examines the library MPITRAMPOLINE_LIB names (what jaxlib's
// MPItrampoline dlopens for JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi):
// whether it is there, whether it has MPItrampoline's ABI (it defines
// mpiwrapper_version_major, the first symbol MPItrampoline resolves, and
// MPIABI_Init), and whether it is gocl's (gocl_mpiabi_unsupported).
func MPILibrary(s sysfs.System, path string) *doctor.MPILibrary {
	m := &doctor.MPILibrary{Path: path}
	p := path
	if filepath.IsAbs(p) {
		p = s.Path(p)
	}
	if _, err := os.Stat(p); err != nil {
		return m
	}
	m.Exists = true
	ef, err := elf.Open(p)
	if err != nil {
		m.Error = err.Error()
		return m
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		m.Error = "dynamic symbols: " + err.Error()
		return m
	}
	defined := map[string]bool{}
	for _, sym := range syms {
		if sym.Section != elf.SHN_UNDEF {
			defined[sym.Name] = true
		}
	}
	m.MPIABI = defined["mpiwrapper_version_major"] && defined["MPIABI_Init"]
	m.Gocl = m.MPIABI && defined["gocl_mpiabi_unsupported"]
	return m
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
