"""libgocl's own NVML reader (capi/nvml.c: dlopen of libnvidia-ml.so.1).

Each case loads libgocl.so in a fresh Python process (so LD_LIBRARY_PATH and
the FAKE_NVML_* variables apply when the libraries load) and prints what the
internal test entry goclgoNVMLFactsJSON returns. A fake libnvidia-ml.so.1
(tests/c/fake_nvml.c, built by `make build/fake-nvml/libnvidia-ml.so.1`)
stands in for the driver; it aborts on any call without a successful
nvmlInit_v2, so a reader that calls NVML after a failed init crashes here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gocl import _lib


PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
TWO_PRO6000 = f"{PRO6000}|12.0|13|00000000:41:00.0;{PRO6000}|12.0|13|00000000:81:00.0"

# Runs in the child: load libgocl, read the facts twice (init/shutdown must
# pair up), print them.
PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]
fn = lib.goclgoNVMLFactsJSON
fn.restype = ctypes.c_void_p
out = []
for _ in range(2):
    p = fn()
    out.append(ctypes.string_at(p).decode())
    libc.free(p)
assert out[0] == out[1], out
print(out[0])
"""


@pytest.fixture(scope="module")
def libgocl() -> Path:
    path = _lib.library_path()
    if not path.is_file():
        pytest.fail(f"{path} is missing: make pylib (or make venv)")
    return path


def child_env(library_dir: Path | None, **fake: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    if library_dir is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(library_dir), env.get("LD_LIBRARY_PATH")]))
    env.update(fake)
    return env


def probe(libgocl: Path, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, str(libgocl)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def fake_probe(libgocl: Path, fake_nvml_dir: Path, **fake: str) -> dict:
    return probe(libgocl, child_env(fake_nvml_dir, **fake))


def test_no_undefined_nvml_symbols(libgocl):
    if shutil.which("nm") is None:
        pytest.skip("nm is not installed")
    r = subprocess.run(["nm", "-D", "--undefined-only", str(libgocl)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if " nvml" in line] == []


def test_no_driver(libgocl, tmp_path):
    env = child_env(tmp_path)  # an empty folder first on the path
    real = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"],
                          capture_output=True, timeout=60, env=env)
    if real.returncode == 0:
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    facts = probe(libgocl, env)
    assert facts["nvml"]["status"] == "ERROR_LIBRARY_NOT_FOUND"
    assert "libnvidia-ml.so.1" in facts["nvml"]["error"]
    assert facts["missing"] == {"nvml": "libnvidia-ml.so.1 not found (no NVIDIA driver)"}
    assert "gpus" not in facts and "p2p" not in facts and "driver_version" not in facts


def test_two_rtx_pro_6000(libgocl, fake_nvml_dir):
    facts = fake_probe(libgocl, fake_nvml_dir, FAKE_NVML_GPUS=TWO_PRO6000)
    assert facts == {
        "nvml": {"status": "ok"},
        "driver_version": "580.82.07",
        "cuda_driver_version": 13000,
        "gpus": [
            {"index": 0, "name": PRO6000, "compute_capability": "12.0", "pci_bus_id": "0000:41:00.0",
             "brand": "nvidia_rtx", "source": "nvml"},
            {"index": 1, "name": PRO6000, "compute_capability": "12.0", "pci_bus_id": "0000:81:00.0",
             "brand": "nvidia_rtx", "source": "nvml"},
        ],
        "p2p": {"read": [["X", "OK"], ["OK", "X"]], "write": [["X", "OK"], ["OK", "X"]]},
    }


def test_versions_from_env(libgocl, fake_nvml_dir):
    facts = fake_probe(libgocl, fake_nvml_dir, FAKE_NVML_GPUS=TWO_PRO6000, FAKE_NVML_DRIVER="575.51.03",
                       FAKE_NVML_CUDA="12090")
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("575.51.03", 12090)


@pytest.mark.parametrize(("fake", "cell"), [
    ({"FAKE_NVML_P2P": "5"}, "NOT_SUPPORTED"),
    ({"FAKE_NVML_P2P": "1"}, "CHIPSET_NOT_SUPPORTED"),
    ({"FAKE_NVML_P2P_RC": "3"}, "ERR"),  # NVML could not answer
])
def test_p2p_status(libgocl, fake_nvml_dir, fake, cell):
    gpus = ";".join([f"{PRO6000}|12.0|13|00000000:{b}:00.0" for b in ("41", "61", "81")])
    facts = fake_probe(libgocl, fake_nvml_dir, FAKE_NVML_GPUS=gpus, **fake)
    expect = [["X" if i == j else cell for j in range(3)] for i in range(3)]
    assert facts["p2p"] == {"read": expect, "write": expect}


@pytest.mark.parametrize(("rc", "status"), [
    ("9", "ERROR_DRIVER_NOT_LOADED"),
    ("18", "ERROR_LIB_RM_VERSION_MISMATCH"),
    ("42", "ERROR_42"),
])
def test_init_fails(libgocl, fake_nvml_dir, rc, status):
    # The fake aborts on any call after a failed init: exit 0 proves none came.
    facts = fake_probe(libgocl, fake_nvml_dir, FAKE_NVML_GPUS=TWO_PRO6000, FAKE_NVML_INIT_RC=rc)
    assert facts["nvml"]["status"] == status
    assert facts["missing"] == {"nvml": f"nvmlInit_v2: {status}"}
    assert "gpus" not in facts and "p2p" not in facts and "driver_version" not in facts


def test_one_gpu_has_no_p2p(libgocl, fake_nvml_dir):
    facts = fake_probe(libgocl, fake_nvml_dir, FAKE_NVML_GPUS="NVIDIA GeForce RTX 5090|12.0|15|00000000:01:00.0")
    assert facts["gpus"] == [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0",
                              "pci_bus_id": "0000:01:00.0", "brand": "geforce_rtx", "source": "nvml"}]
    assert "p2p" not in facts and "missing" not in facts


def test_no_gpus(libgocl, fake_nvml_dir):
    facts = fake_probe(libgocl, fake_nvml_dir)
    assert facts == {"nvml": {"status": "ok"}, "driver_version": "580.82.07", "cuda_driver_version": 13000}
