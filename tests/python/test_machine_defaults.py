"""libgocl's known-good defaults, end to end: a process that starts gocl on a
machine the doctor's knowledge base flags gets the safe transport settings
it left unset, logged at INFO, and nothing else changes.

The GPUs come from a fake libnvidia-ml.so.1 (tests/c/fake_nvml.c) found
through LD_LIBRARY_PATH by libgocl's own dlopen; the IOMMU comes from this
machine, or from a private mount namespace whose /sys/kernel/iommu_groups
says the IOMMU translates DMA (root and unshare(1) needed, else skipped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition|12.0|13|00000000:{}:00.0"

# Two in-process ranks start gocl; the child prints what NCCL would read
# (the C environment: os.environ is Python's copy) and gocl's own log.
CHILD = textwrap.dedent("""
    import ctypes, numpy as np, gocl
    comms = gocl.Communicator.local(2)
    xs = [np.ones(5, np.float32) for _ in comms]
    with gocl.group():
        for c, x in zip(comms, xs):
            c.all_reduce(x)
    assert [x.tolist() for x in xs] == [[2.0] * 5] * 2
    for c in comms:
        c.destroy()
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    v = libc.getenv(b"NCCL_P2P_DISABLE")
    print("NCCL_P2P_DISABLE=" + (v.decode() if v is not None else "<unset>"))
""")


def run_child(nvml_dir: Path, tmp_path: Path, env: dict[str, str], iommu: str | None = None) -> tuple[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GOCL_"))}
    full.update({
        "LD_LIBRARY_PATH": str(nvml_dir),
        "FAKE_NVML_GPUS": ";".join(PRO6000.format(b) for b in ("41", "81")),
        "GOCL_DEBUG": "INFO", "GOCL_DEBUG_SUBSYS": "ENV,INIT",
        "GOCL_DEBUG_FILE": str(tmp_path / "gocl.log"), "GOCL_TIMEOUT": "60",
    })
    full.update(env)
    cmd = [sys.executable, "-c", CHILD]
    if iommu is not None:
        groups = tmp_path / "iommu_groups"
        for g in ("0", "1"):
            (groups / g).mkdir(parents=True)
            (groups / g / "type").write_text(iommu + "\n")
        script = 'mount --bind "$0" /sys/kernel/iommu_groups && exec "$@"'
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(groups), *cmd]
    p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, (tmp_path / "gocl.log").read_text()


def can_mount_namespace() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return p.returncode == 0


needs_ns = pytest.mark.skipif(not can_mount_namespace(), reason="needs root and unshare -m")


@needs_ns
def test_p2p_behind_iommu_gets_nccl_p2p_disable(fake_nvml_dir, tmp_path):
    out, log = run_child(fake_nvml_dir, tmp_path, {}, iommu="DMA")
    assert "NCCL_P2P_DISABLE=1" in out
    line = next(ln for ln in log.splitlines() if "NCCL_P2P_DISABLE=1 set by gocl" in ln)
    assert "GOCL INFO" in line and "p2p-unsafe-iommu" in line and "IOMMU" in line
    # gocl's own in-process path is kept: its ranks still read each other's memory.
    assert "via inproc" in log, log
    assert "via socket" not in log, log


@needs_ns
def test_user_setting_is_kept(fake_nvml_dir, tmp_path):
    out, log = run_child(fake_nvml_dir, tmp_path, {"NCCL_P2P_DISABLE": "0"}, iommu="DMA")
    assert "NCCL_P2P_DISABLE=0" in out
    assert 'NCCL_P2P_DISABLE="0" kept as you set it' in log


@needs_ns
def test_gocl_defaults_off(fake_nvml_dir, tmp_path):
    out, log = run_child(fake_nvml_dir, tmp_path, {"GOCL_DEFAULTS": "0"}, iommu="DMA")
    assert "NCCL_P2P_DISABLE=<unset>" in out
    assert "GOCL_DEFAULTS=0: no machine defaults" in log


@needs_ns
def test_iommu_passthrough_is_not_flagged(fake_nvml_dir, tmp_path):
    out, log = run_child(fake_nvml_dir, tmp_path, {}, iommu="identity")
    assert "NCCL_P2P_DISABLE=<unset>" in out
    assert "set by gocl" not in log


def test_this_machine_is_not_flagged(fake_nvml_dir, tmp_path):
    # This host's IOMMU state as it is (here: off, or unreadable ACS): at most
    # the doctor's "unverified" note, which sets nothing.
    out, log = run_child(fake_nvml_dir, tmp_path, {})
    if "set by gocl" in log:
        pytest.skip("this host's IOMMU translates DMA: the flagged case, covered above")
    assert "NCCL_P2P_DISABLE=<unset>" in out


def test_no_driver_sets_nothing(tmp_path):
    empty = tmp_path / "nolib"
    empty.mkdir()
    out, log = run_child(empty, tmp_path, {})
    assert "NCCL_P2P_DISABLE=<unset>" in out
