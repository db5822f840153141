"""The examples run as users run them: under torchrun and `gocl run`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]


def _run(cmd, timeout=240):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_hello_under_torchrun():
    out = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(REPO / "examples" / "hello_gocl.py")])
    assert "gocl: 2 ranks, all_reduce gave [1.0, 1.0, 1.0, 1.0]" in out, out
    assert "hello from rank 1" in out


@pytest.mark.slow
def test_ddp_train_both_backends():
    gocl = shutil.which("gocl", path=str(Path(sys.executable).parent))
    launcher = [gocl, "run", "-n", "2"] if gocl else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                       "--nproc-per-node", "2"]
    out = _run([*launcher, sys.executable, str(REPO / "examples" / "ddp_train.py"), "--steps", "6", "--warmup", "2",
                "--hidden", "64", "--width", "32"])
    assert "losses of the two runs match" in out, out
    assert "gloo/gocl step-time ratio" in out
