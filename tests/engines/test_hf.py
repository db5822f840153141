"""Hugging Face's Trainer and Accelerate over gocl, 2 processes on CPU, started
as users start them (``gocl run``, ``torchrun``, ``accelerate launch`` with a
config file): the script calls ``dist.init_process_group("gocl")`` and leaves
the backend unset (README: Hugging Face Trainer and Accelerate); each step's
loss equals the same job's over gloo (the library's own default on CPU), and
inside the trainer ``dist.get_backend()`` is "gocl". ``ddp_backend="gocl"``
is refused by accelerate with the message the README quotes. DeepSpeed
takes gocl by name: ``deepspeed.init_distributed(dist_backend="gocl")``,
ZeRO 0, 2 and 3 on CPU, losses equal to gloo's.

Needs transformers and accelerate (``make test-hf`` makes .venv-hf). Without
them the tests skip, unless GOCL_TEST_HF=1 (set by the make target) makes
them a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("GOCL_TEST_HF") == "1":
    import accelerate  # noqa: F401
    import transformers  # noqa: F401
else:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

SCRIPT = Path(__file__).resolve().with_name("hf_train.py")
DS_SCRIPT = Path(__file__).resolve().with_name("ds_train.py")
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUN_TIMEOUT = 300  # s: a run takes about 15 s; a hang fails here
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(launcher: str, mode: str, backend: str, tmp: Path) -> dict:
    out = tmp / f"{launcher}-{mode}-{backend}.json"
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith(("SLURM_", "OMPI_"))}
    env.update(OMP_NUM_THREADS="1", GOCL_TIMEOUT="60", PYTHONUNBUFFERED="1")
    script = [str(SCRIPT), mode, backend, str(out)]
    if mode.startswith("deepspeed"):  # deepspeed-STAGE
        script = [str(DS_SCRIPT), backend, mode.split("-")[1], str(out)]
    if launcher == "gocl run":
        cmd = [sys.executable, "-m", "gocl", "run", "-n", "2", "--", sys.executable, *script]
    elif launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(_port()), *script]
    else:  # accelerate launch: on CPU it starts its processes with mpirun (a hostfile in the config)
        if not shutil.which("mpirun"):
            pytest.skip("accelerate launch runs CPU processes with mpirun, which is not installed here")
        hosts = tmp / "hostfile"
        hosts.write_text("localhost slots=2\n")
        cfg = tmp / "accelerate.yaml"
        cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_machines: 1\n"
                       "num_processes: 2\nmachine_rank: 0\nmixed_precision: 'no'\nuse_cpu: true\n"
                       f"mpirun_config:\n  mpirun_hostfile: {hosts}\n")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = [str(BIN / "accelerate"), "launch", "--config_file", str(cfg), *script]
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{launcher} {mode} {backend}: no end within {RUN_TIMEOUT} s:\n{output[-6000:]}")
    assert proc.returncode == 0 and out.is_file(), f"{launcher} {mode} {backend}: exit {proc.returncode}\n{output[-6000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every (launcher, mode, backend) the tests read, run once."""
    tmp = tmp_path_factory.mktemp("hf")
    cache: dict = {}

    def get(launcher: str, mode: str, backend: str) -> dict:
        key = (launcher, mode, backend)
        if key not in cache:
            cache[key] = _run(launcher, mode, backend, tmp)
        return cache[key]

    return get


def _same_losses(a: dict, b: dict, steps: int = 8) -> None:
    assert len(a["losses"]) == len(b["losses"]) == steps, (a, b)
    for step, (x, y) in enumerate(zip(a["losses"], b["losses"])):
        assert abs(x - y) <= 1e-6 * max(1.0, abs(y)), f"step {step}: {x} over gocl, {y} over gloo"


@pytest.mark.parametrize("mode", ["trainer", "accelerate"])
def test_over_gocl_the_losses_are_gloos_step_by_step(runs, mode):
    g, ref = runs("gocl run", mode, "gocl"), runs("gocl run", mode, "gloo")
    assert g["backend"] == "gocl" and g["world"] == 2, g  # seen inside the trainer / after Accelerator()
    assert ref["backend"] == "gloo" and ref["world"] == 2, ref
    _same_losses(g, ref)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate launch"])
def test_trainer_over_gocl_under_other_launchers(runs, launcher):
    g = runs(launcher, "trainer", "gocl")
    assert g["backend"] == "gocl" and g["world"] == 2, g
    _same_losses(g, runs("gocl run", "trainer", "gloo"))


def test_ddp_backend_gocl_is_refused_with_the_message_the_readme_shows(runs):
    r = runs("gocl run", "refused", "gocl")
    assert r["error"] == "Your assigned backend gocl is not available, please use gloo", r
    readme = (ROOT / "README.md").read_text()
    assert re.search(re.escape(r["error"]), readme), "the README's troubleshooting must quote accelerate's message"


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_deepspeed_over_gocl_matches_gloo(runs, stage):
    """deepspeed.init_distributed(dist_backend="gocl") works as named (no
    route needed): a ZeRO-0/2/3 engine's losses equal gloo's."""
    pytest.importorskip("deepspeed")
    g, ref = runs("gocl run", f"deepspeed-{stage}", "gocl"), runs("gocl run", f"deepspeed-{stage}", "gloo")
    assert g["backend"] == "gocl" and ref["backend"] == "gloo" and g["world"] == 2, (g, ref)
    _same_losses(g, ref, steps=5)
