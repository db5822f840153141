"""Hatchling build hook: compiles libgocl.so from the Go sources.

Runs ``go build -buildmode=c-shared -trimpath`` into python/gocl/_native/
(the path gocl._lib loads), drops cgo's generated header (gocl.h is the
API), and tags the wheel ``py3-none-<platform>``: the library is loaded with
ctypes, so the wheel does not depend on the Python version or ABI.

It also builds the ``gocl-doctor`` executable (./cmd/gocl-doctor, NVML through
go-nvml, kept out of libgocl.so on purpose) next to it, which ``gocl doctor``
runs; GOCL_BUILD_DOCTOR=0 skips it. And ``gocl-perf`` (bench/gocl_perf.c, C
over gocl.h, linked to the libgocl.so beside it through rpath $ORIGIN), which
``gocl perf`` runs; CC picks the compiler.

Editable installs (``uv pip install -e .``) build both in place; the package
directory is put on sys.path, so the fresh library is what loads. Needs Go
(and a C compiler for cgo) on the machine; GO overrides the go binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

NATIVE = Path("python") / "gocl" / "_native"
LIBRARY = "libgocl.so"
DOCTOR = "gocl-doctor"
PERF = "gocl-perf"
PERF_SOURCES = ["bench/gocl_perf.c", "tests/c/launch.c"]


def platform_tag() -> str:
    """linux_x86_64, macosx_11_0_arm64, ...: the wheel's platform tag."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _go() -> str:
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise RuntimeError(
            "gocl: building libgocl.so needs Go (https://go.dev/dl/, 1.26 or newer) on PATH, "
            "or GO=/path/to/go; a C compiler is needed too (cgo)")
    return go


def _go_build(root: Path, target: Path, args: list[str], env: dict) -> None:
    """go build ... -o <beside target>, then rename over target: a process
    that has the old file mapped keeps its (unlinked) copy instead of
    crashing on a rewritten one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.stem}.{os.getpid()}.tmp{target.suffix}"
    cmd = [_go(), "build", *args[:-1], "-o", str(tmp), args[-1]]
    print("gocl: " + " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, cwd=root, env=dict(os.environ, **env), check=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        # cgo writes its own header next to a c-shared library: internal, not the API.
        for h in (tmp.with_suffix(".h"), target.with_suffix(".h")):
            h.unlink(missing_ok=True)


def build_library(root: Path) -> Path:
    target = root / NATIVE / LIBRARY
    _go_build(root, target, ["-buildmode=c-shared", "-trimpath", "./capi"], {"CGO_ENABLED": "1"})
    return target


def build_doctor(root: Path) -> Path | None:
    """The gocl-doctor executable, or None where the tree has none or it is switched off."""
    if os.environ.get("GOCL_BUILD_DOCTOR", "1") == "0" or not (root / "cmd" / DOCTOR).is_dir():
        return None
    target = root / NATIVE / DOCTOR
    # go-nvml's header marks many NVML calls deprecated; those warnings say nothing about gocl.
    cflags = os.environ.get("CGO_CFLAGS", "-O2 -g") + " -Wno-deprecated-declarations"
    _go_build(root, target, ["-trimpath", f"./cmd/{DOCTOR}"], {"CGO_ENABLED": "1", "CGO_CFLAGS": cflags})
    return target


def build_perf(root: Path) -> Path | None:
    """The gocl-perf executable (needs libgocl.so built), or None where the tree has no sources for it."""
    if not all((root / src).is_file() for src in PERF_SOURCES):
        return None
    target = root / NATIVE / PERF
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("gocl: building gocl-perf needs a C compiler (cc or gcc on PATH, or CC=...)")
    tmp = target.parent / f".{PERF}.{os.getpid()}.tmp"
    cmd = [cc, "-O2", "-Wall", "-Icapi", "-Itests/c", *PERF_SOURCES, f"-L{NATIVE}", "-lgocl", "-lpthread", "-lm",
           "-Wl,-rpath,$ORIGIN", "-o", str(tmp)]
    print("gocl: " + " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, cwd=root, check=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class GoBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return  # the sdist ships the Go sources; its wheel builds them
        root = Path(self.root)
        built = [build_library(root), build_doctor(root)]
        built.append(build_perf(root))
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag()}"
        if version != "editable":
            # _native/ is git-ignored (a build output), so include it explicitly.
            for path in filter(None, built):
                build_data["force_include"][str(path)] = f"gocl/_native/{path.name}"
