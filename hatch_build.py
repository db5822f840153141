"""Hatchling build hook: compiles libgocl.so from the Go sources.

Runs ``go build -buildmode=c-shared -trimpath`` into python/gocl/_native/
(the path gocl._lib loads), drops cgo's generated header (gocl.h is the
API), and tags the wheel ``py3-none-<platform>``: the library is loaded with
ctypes, so the wheel does not depend on the Python version or ABI.

Editable installs (``uv pip install -e .``) build the library in place; the
package directory is put on sys.path, so the fresh library is what loads.
Needs Go (and a C compiler for cgo) on the machine; GO overrides the go binary.
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


def platform_tag() -> str:
    """linux_x86_64, macosx_11_0_arm64, ...: the wheel's platform tag."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def build_library(root: Path) -> Path:
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise RuntimeError(
            "gocl: building libgocl.so needs Go (https://go.dev/dl/, 1.26 or newer) on PATH, "
            "or GO=/path/to/go; a C compiler is needed too (cgo)")
    out_dir = root / NATIVE
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY
    # Build next to the target and rename over it: a process that has the old
    # library mapped keeps its (unlinked) copy instead of crashing on a
    # truncated file.
    tmp = out_dir / f".{LIBRARY}.{os.getpid()}.tmp.so"
    env = dict(os.environ, CGO_ENABLED="1")
    cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", str(tmp), "./capi"]
    print("gocl: " + " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, cwd=root, env=env, check=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        # cgo writes its own header next to the library: internal, not the API.
        for h in (tmp.with_suffix(".h"), target.with_suffix(".h")):
            h.unlink(missing_ok=True)
    return target


class GoBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return  # the sdist ships the Go sources; its wheel builds them
        lib = build_library(Path(self.root))
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag()}"
        if version != "editable":
            # _native/ is git-ignored (a build output), so include it explicitly.
            build_data["force_include"][str(lib)] = f"gocl/_native/{LIBRARY}"
