"""Packaging: the sdist carries the Go sources, its wheel is py3-none-<platform>
with libgocl.so inside, and that wheel installs and loads in a fresh venv."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import gocl

REPO = Path(__file__).resolve().parents[2]


def uv_command() -> list[str]:
    for cmd in ([sys.executable, "-m", "uv"], ["python3", "-m", "uv"], [shutil.which("uv") or "uv"]):
        try:
            if subprocess.run([*cmd, "--version"], capture_output=True, timeout=30).returncode == 0:
                return cmd
        except (OSError, subprocess.TimeoutExpired):
            continue
    pytest.skip("uv is not installed (make venv installs it)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`uv build`: the sdist, then a wheel built from that sdist (not from the tree)."""
    if shutil.which("go") is None:
        pytest.skip("building libgocl.so needs Go")
    uv = uv_command()
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([*uv, "build", "--out-dir", str(out), str(REPO)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return uv, out


def test_wheel_is_python_version_independent(built):
    _, out = built
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheels[0].name == f"gocl-{gocl.__version__}-py3-none-{platform}.whl"
    with zipfile.ZipFile(wheels[0]) as z:
        names = set(z.namelist())
        assert "gocl/_native/libgocl.so" in names
        if (REPO / "cmd" / "gocl-doctor").is_dir():
            assert "gocl/_native/gocl-doctor" in names
            assert z.getinfo("gocl/_native/gocl-doctor").external_attr >> 16 & 0o111, "gocl-doctor not executable"
        assert "gocl/_native/gocl-perf" in names
        assert z.getinfo("gocl/_native/gocl-perf").external_attr >> 16 & 0o111, "gocl-perf not executable"
        assert not any(n.endswith("libgocl.h") for n in names)
        assert {"gocl/__init__.py", "gocl/comm.py", "gocl/tools/launcher.py", "gocl/testing/plugin.py"} <= names
        info = f"gocl-{gocl.__version__}.dist-info"
        wheel_meta = z.read(f"{info}/WHEEL").decode()
        assert f"Tag: py3-none-{platform}" in wheel_meta and "Root-Is-Purelib: false" in wheel_meta
        eps = configparser.ConfigParser()
        eps.read_string(z.read(f"{info}/entry_points.txt").decode())
        assert eps["console_scripts"]["gocl"] == "gocl.tools.cli:main"
        assert eps["torch.backends"]["gocl"] == "gocl.torch_backend:_autoload"
        assert eps["pytest11"]["gocl"] == "gocl.testing.plugin"
        meta = z.read(f"{info}/METADATA").decode()
        for extra in ("torch", "jax", "test", "plot"):
            assert f"Provides-Extra: {extra}" in meta


def test_sdist_carries_the_go_sources(built):
    _, out = built
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"go.mod", "hatch_build.py", "pyproject.toml", "capi/gocl.h", "python/gocl/__init__.py"} <= names
    assert any(n.startswith("runtime/comm/") and n.endswith(".go") for n in names)
    assert {"jaxffi/handlers.c", "jaxffi/xla_ffi.h", "jaxffi/jaxffi.go"} <= names  # linked into libgocl.so
    assert not any(n.startswith("python/gocl/_native/") for n in names)


def test_wheel_installs_and_loads_in_a_fresh_venv(built, tmp_path):
    uv, out = built
    (wheel,) = out.glob("*.whl")
    venv = tmp_path / "venv"
    r = subprocess.run([*uv, "venv", "--python", sys.executable, str(venv)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    r = subprocess.run([*uv, "pip", "install", "--python", str(py), "--no-deps", str(wheel)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # No numpy in this venv: import gocl and the C library work without it.
    code = ("import gocl, gocl._lib as l; assert not l.loaded(); print(gocl.library_version()); "
            "print(l.library_path())")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    version, path = r.stdout.split()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version) and path.startswith(str(venv))
    r = subprocess.run([str(venv / "bin" / "gocl"), "version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"libgocl {version} ({path})" in r.stdout, r.stdout
    # gocl-perf finds the libgocl.so beside it (rpath $ORIGIN), wherever the wheel went.
    r = subprocess.run([str(venv / "bin" / "gocl"), "perf", "all_reduce", "-g", "2", "-e", "64", "-n", "1", "-w", "0"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, LD_LIBRARY_PATH=""))
    assert r.returncode == 0 and "# Avg bus bandwidth" in r.stdout, r.stdout + r.stderr
    if (REPO / "cmd" / "gocl-doctor").is_dir():
        r = subprocess.run([str(venv / "bin" / "gocl"), "doctor", "--help"], capture_output=True, text=True,
                           timeout=60)
        assert "usage: gocl-doctor" in r.stdout + r.stderr, r.stdout + r.stderr
