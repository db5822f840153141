"""PyTorch Lightning on gocl: ``Trainer(strategy=DDPStrategy(process_group_backend="gocl"),
accelerator="cpu", devices=2)``, started as a user starts it (``python script.py``;
Lightning's subprocess script launcher starts the second rank), trains exactly as
it does on torch's gloo, and ``Trainer.fit`` ends cleanly.

Needs lightning (``make test-lightning`` makes .venv-lightning). Without it the
tests skip, unless GOCL_TEST_LIGHTNING=1 (set by the make target) makes a
missing lightning a failure.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("GOCL_TEST_LIGHTNING") == "1":
    import lightning  # noqa: F401
else:
    pytest.importorskip("lightning")

SCRIPT = Path(__file__).resolve().with_name("lightning_train.py")
RANKS = 2
STEPS = 16  # 256 samples / 2 ranks / batch 16 = 8 steps per epoch, 2 epochs
RUN_TIMEOUT = 240  # s: far above a normal run (about 10 s); a hang fails here

# Launcher variables a surrounding job may have set: the script must start as a
# plain `python script.py` does, so Lightning's launcher sets them itself.
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "PL_GLOBAL_SEED")


def _run(backend: str, out: Path, *extra: str) -> dict:
    """Runs the script as a user would; returns its exit code, output and each rank's results."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", GOCL_TIMEOUT="60", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--backend", backend, "--out", str(out), *extra],
                            cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the session this test started: the script and its rank 1
        output, _ = proc.communicate()
        pytest.fail(f"{backend}: the Lightning run did not end within {RUN_TIMEOUT} s:\n{output[-6000:]}")
    ranks = {}
    for r in range(RANKS):
        f = out / f"rank{r}.json"
        ranks[r] = json.loads(f.read_text()) if f.is_file() else None
    return {"rc": proc.returncode, "output": output, "ranks": ranks}


def _check_ran(run: dict, backend: str) -> None:
    assert run["rc"] == 0, f"{backend}: exit code {run['rc']}:\n{run['output'][-6000:]}"
    assert "Traceback" not in run["output"], run["output"][-6000:]
    for r, res in run["ranks"].items():
        assert res is not None, f"{backend}: rank {r} wrote no results:\n{run['output'][-6000:]}"
        assert res["world_size"] == RANKS and res["rank"] == r
        assert res["group_backend"] == backend  # the group Lightning made is really this backend
        assert len(res["local_losses"]) == STEPS and len(res["synced_losses"]) == STEPS
        assert all(math.isfinite(x) for x in res["local_losses"])
        # Rank 0 saved it (a broadcast of the path, then a barrier); rank 0 may still be removing epoch 0's.
        assert f"epoch=1-step={STEPS}.ckpt" in res["checkpoints"], res["checkpoints"]
    assert run["ranks"][0]["child_returncodes"] == [0], "the rank Lightning started did not exit with 0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """One run on gloo and one on gocl (one after the other: 2 processes each)."""
    base = tmp_path_factory.mktemp("lightning")
    return {backend: _run(backend, base / backend) for backend in ("gloo", "gocl")}


def test_gloo_reference_run(runs):
    _check_ran(runs["gloo"], "gloo")


def test_gocl_trains_like_gloo_step_by_step(runs):
    _check_ran(runs["gloo"], "gloo")
    _check_ran(runs["gocl"], "gocl")
    gloo, gocl = runs["gloo"]["ranks"], runs["gocl"]["ranks"]
    tight = {"rel_tol": 1e-6, "abs_tol": 1e-8}
    for r in range(RANKS):
        for key in ("local_losses", "synced_losses", "val_losses", "params"):
            a, b = gocl[r][key], gloo[r][key]
            assert len(a) == len(b), (r, key)
            bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if not math.isclose(x, y, **tight)]
            assert not bad, f"rank {r} {key}: gocl and gloo differ at (index, gocl, gloo) {bad[:5]}"
    # The ranks trained on different shards and DDP kept their replicas equal.
    assert gocl[0]["local_losses"] != gocl[1]["local_losses"]
    assert gocl[0]["params"] == gocl[1]["params"]
    # sync_dist=True: Lightning's mean over the ranks, an all_reduce through gocl.
    for step, (x0, x1, synced) in enumerate(zip(gocl[0]["local_losses"], gocl[1]["local_losses"],
                                                gocl[0]["synced_losses"])):
        assert math.isclose(synced, (x0 + x1) / 2, rel_tol=1e-6), step
    assert gocl[0]["synced_losses"] == gocl[1]["synced_losses"]


def test_gocl_fit_ends_cleanly_and_destroy_releases_the_communicator(runs):
    run = runs["gocl"]
    _check_ran(run, "gocl")
    for r, res in run["ranks"].items():
        # Lightning leaves a non-NCCL group alive after fit; the script then destroys it.
        assert res["initialized_after_fit"] and res["gocl_comm_live_after_fit"], r
        assert not res["initialized_at_end"], r
        assert not res["gocl_comm_live_at_end"], f"rank {r}: destroy_process_group left the gocl communicator"


def test_gocl_exits_cleanly_without_destroy(tmp_path):
    """Lightning itself never destroys a gloo or gocl group: the processes end
    with a live communicator, and must still exit with 0 and promptly."""
    run = _run("gocl", tmp_path, "--no-destroy")
    _check_ran(run, "gocl")
    for r, res in run["ranks"].items():
        assert res["initialized_at_end"] and res["gocl_comm_live_at_end"], r
