"""Check a gocl wheel the way a package index and a user's machine meet it.

    python packaging/check_wheel.py dist/gocl-*-manylinux_2_17_aarch64.whl ...

For each wheel: its platform tag names an architecture, and every ELF file in
gocl/_native/ (libgocl.so, gocl-doctor, ...) is built for it, needs only
libraries on the manylinux allow-list, asks for no glibc symbol version newer
than the tag allows, and libgocl.so exports the C API (every gocl* function
gocl.h declares). Then ``auditwheel show`` must call the wheel consistent with
the tag it carries. Needs pyelftools and auditwheel (`make wheel-tools`).
Exit status 1 with one line per problem.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

REPO = Path(__file__).resolve().parents[1]
# ELF e_machine per wheel architecture.
MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
# PEP 599/600: the libraries a manylinux wheel may take from the system. libgocl
# dlopen()s libnvidia-ml.so.1, so it never shows up here.
ALLOWED = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libresolv.so.2",
    "libutil.so.1", "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


def declared_api() -> set[str]:
    """Every function gocl.h declares (goclFoo(...);)."""
    header = (REPO / "capi" / "gocl.h").read_text()
    return set(re.findall(r"^\w[\w\s\*]*?\b(gocl[A-Z]\w*)\(", header, re.M))


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def check_elf(name: str, data: bytes, machine: str, glibc: tuple[int, int],
              shipped: frozenset[str] = frozenset()) -> list[str]:
    """shipped: the libraries in the wheel's gocl/_native/ (found there through
    rpath $ORIGIN, as gocl-perf finds libgocl.so), allowed besides the list."""
    elf = ELFFile(io.BytesIO(data))
    problems = []
    if elf["e_machine"] != machine:
        problems.append(f"{name}: ELF machine {elf['e_machine']}, want {machine}")
    needed = set()
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            needed |= {t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
        if isinstance(section, GNUVerNeedSection):
            for _, aux in section.iter_versions():
                for a in aux:
                    m = re.fullmatch(r"GLIBC_([\d.]+)", a.name)
                    if m and _version(m[1]) > glibc:
                        problems.append(f"{name}: needs {a.name}, newer than the tag's glibc "
                                        f"{'.'.join(map(str, glibc))}")
    if outside := needed - ALLOWED - shipped:
        problems.append(f"{name}: needs {sorted(outside)}, outside the manylinux allow-list")
    if Path(name).name == "libgocl.so":  # the C API's library (libgocl_mpiabi.so exports the MPI ABI)
        symbols = elf.get_section_by_name(".dynsym")
        exported = {s.name for s in symbols.iter_symbols()
                    if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["type"] == "STT_FUNC"}
        if missing := declared_api() - exported:
            problems.append(f"{name}: does not export {sorted(missing)} (declared in gocl.h)")
    return problems


def check_wheel(path: Path) -> list[str]:
    m = re.search(r"-py3-none-manylinux_(\d+)_(\d+)_(\w+)\.whl$", path.name)
    if not m or m[3] not in MACHINES:
        return [f"{path.name}: not a py3-none-manylinux_2_N_{{{','.join(MACHINES)}}} wheel"]
    glibc, machine = (int(m[1]), int(m[2])), MACHINES[m[3]]
    problems = []
    with zipfile.ZipFile(path) as z:
        native = [n for n in z.namelist() if n.startswith("gocl/_native/")]
        for want in ("gocl/_native/libgocl.so", "gocl/_native/gocl-doctor", "gocl/_native/gocl-perf"):
            if want not in native:
                problems.append(f"{path.name}: {want} is missing")
        shipped = frozenset(Path(n).name for n in native if n.endswith(".so"))
        for n in native:
            data = z.read(n)
            if data[:4] == b"\x7fELF":
                problems += [f"{path.name}: {p}" for p in check_elf(n, data, machine, glibc, shipped)]
    # auditwheel names the most compatible tag the wheel satisfies; any tag up to
    # the one it carries is fine (manylinux_2_5 files also satisfy manylinux_2_17).
    tag = f"manylinux_{m[1]}_{m[2]}_{m[3]}"
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(path)],
                          capture_output=True, text=True)
    print(show.stdout.strip() + show.stderr.strip())
    said = re.search(r'platform tag:\s*"manylinux_(\d+)_(\d+)_(\w+)"', show.stdout)
    if show.returncode != 0 or not said or said[3] != m[3] or (int(said[1]), int(said[2])) > glibc:
        problems.append(f"{path.name}: auditwheel show does not call it consistent with {tag}")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    problems = [p for w in argv for p in check_wheel(Path(w))]
    for p in problems:
        print("FAIL " + p, file=sys.stderr)
    if not problems:
        print(f"ok: {len(argv)} wheel(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
