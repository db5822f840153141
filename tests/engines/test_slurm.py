"""gocl under a real Slurm: srun tasks as ranks, on a throwaway one-host
cluster (tests/engines/slurm_cluster.sh: munged, slurmctld and slurmd from
Debian's slurm-wlm, started for this module and stopped after it).

- ``srun -n 4 python rank.py``: ``Communicator.from_env()`` takes srun's
  world (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST,
  a port derived from the job and step); all_reduce / all_gather checked
  against numpy on every rank.
- ``srun -n 4 python ddp.py``: ``dist.init_process_group("gocl")`` with no
  RANK or MASTER_ADDR set (gocl fills torch's env:// variables from srun's
  at ``import torch``); a small DDP model's losses equal gloo's under the
  same srun.
- ``srun -n 2 gocl run python rank.py``: gocl run inside an srun task runs
  the program as that task's rank.

Needs srun/slurmctld/slurmd/munged (``make slurm``) and root (slurmd starts
the jobs); skipped without them unless GOCL_REQUIRE_SLURM=1, which turns a
skip into a failure. GOCL_SLURM_EXISTING=1 runs the tests on the cluster
that SLURM_CONF (or /etc/slurm) already describes instead of starting one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gocl import world

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLUSTER = HERE / "slurm_cluster.sh"
BIN = Path(sys.executable).parent  # the venv's bin: python, gocl
TIMEOUT = 240

# What a launcher or an outer allocation may have left in this process's
# environment; srun copies the environment into its tasks, and a RANK or
# MASTER_ADDR there would be what the test claims is not needed.
_SCRUB_PREFIXES = ("SLURM_", "SRUN_", "SALLOC_", "SBATCH_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "TORCHELASTIC_",
                   "PET_")
_SCRUB = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
          "GOCL_MASTER_PORT", "GOCL_WORLD_SIZE", "NODE_RANK", "JOB_COMPLETION_INDEX", "ROLE_RANK", "ROLE_WORLD_SIZE"}


def _skip_or_fail(why: str):
    if os.environ.get("GOCL_REQUIRE_SLURM") == "1":
        pytest.fail(f"GOCL_REQUIRE_SLURM=1 but {why}")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment (SLURM_CONF) that points srun at a running cluster."""
    for tool in ("srun", "sinfo", "scancel"):
        if shutil.which(tool) is None:
            _skip_or_fail(f"no {tool} on PATH (make slurm installs Debian's slurm-wlm)")
    if os.environ.get("GOCL_SLURM_EXISTING") == "1":
        yield {k: v for k, v in os.environ.items() if k == "SLURM_CONF"}
        return
    if os.geteuid() != 0:
        _skip_or_fail("starting slurmd needs root (it starts the jobs as their user)")
    state = tmp_path_factory.mktemp("slurm")
    env = dict(os.environ, GOCL_SLURM_DIR=str(state), GOCL_SLURM_CTLD_PORT=str(_free_port()),
               GOCL_SLURM_SLURMD_PORT=str(_free_port()), GOCL_SLURM_CPUS="4", GOCL_SLURM_NODES="2")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(CLUSTER), "start", str(state)], env=env, capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], env=env, timeout=60)
        pytest.fail(f"the Slurm cluster did not start (rc {r.returncode}):\n{r.stdout}\n{r.stderr}")
    print(f"slurm cluster up in {time.monotonic() - t0:.1f}s: {r.stdout.strip()}")
    try:
        yield {"SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], env=env, timeout=60)


def _task_env(slurm: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)}
    env.update(slurm)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env["GOCL_TIMEOUT"] = "120"
    env.update(extra)
    return env


def srun(slurm: dict[str, str], n: int, argv: list[str], cwd: Path, nodes: list[str] = ("--nodes=1",),
         **extra: str) -> tuple[list[dict], str]:
    """Run argv as an n-task srun step in cwd; return the tasks' results
    (result.<rank>.json, which the scripts write) and the whole output. Fails the test on a non-zero exit."""
    cmd = ["srun", f"--ntasks={n}", *nodes, "--kill-on-bad-exit=1", f"--job-name=gocl-test-{cwd.name}",
           "--label", *argv]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env=_task_env(slurm, **extra), cwd=cwd, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        subprocess.run(["scancel", "--quiet", f"--name=gocl-test-{cwd.name}"], env=_task_env(slurm), timeout=30)
        pytest.fail(f"{' '.join(cmd)}: no exit after {TIMEOUT}s\n{e.stdout}\n{e.stderr}")
    out = r.stdout + r.stderr
    print(f"$ {' '.join(cmd)}  ({time.monotonic() - t0:.1f}s, rc {r.returncode})\n{out}")
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{out}"
    # each task writes result.<rank>.json (srun --label cuts lines at 1024 characters)
    results = [json.loads(p.read_text()) for p in cwd.glob("result.*.json")]
    for p in cwd.glob("result.*.json"):
        p.unlink()  # the next srun in this directory starts from none
    return sorted(results, key=lambda d: d["rank"]), out


# ------------------------------------------------------------------ scripts

RANK_PY = textwrap.dedent("""
    import json, os, socket, sys
    import numpy as np
    import gocl
    from gocl import world

    w = world.read()
    comm = gocl.Communicator.from_env()
    r, n = comm.rank, comm.world_size
    x = np.arange(1000, dtype=np.float64) * (r + 1) + 0.25 * r
    summed = comm.all_reduce(x.copy())
    big = comm.all_reduce(np.array([r * 10 + 7, -r], dtype=np.int64), op="max")
    gathered = comm.all_gather(np.arange(6, dtype=np.int32) + 100 * r)
    comm.destroy()
    keys = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
            "SLURM_STEP_ID", "SLURM_JOB_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "GROUP_RANK")
    print(f"rank {r} of {n}: sum[:3]={summed[:3].tolist()} max={big.tolist()} gathered[:, 0]={gathered[:, 0].tolist()}")
    with open(f"result.{r}.json", "w") as f:
        json.dump({
        "rank": r, "size": n, "host": socket.gethostname(), "python": sys.executable,
        "world": {"rank": w.rank, "size": w.size, "local_rank": w.local_rank, "local_size": w.local_size,
                  "addr": w.addr, "port": w.port, "source": w.source},
        "env": {k: os.environ.get(k) for k in keys},
        "sum": summed.tolist(), "max": big.tolist(), "gathered": gathered.tolist()}, f)
""")

DDP_PY = textwrap.dedent("""
    import json, os, sys
    before = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    import torch  # gocl's torch.backends entry point fills RANK, MASTER_ADDR... from srun's variables
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    backend = sys.argv[1]
    after = {k: os.environ.get(k) for k in before}
    dist.init_process_group(backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank and for both backends
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).double()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of the data
    xb = torch.randn(32, 8, generator=g, dtype=torch.float64)
    yb = 0.5 * torch.tanh(xb @ torch.linspace(-1, 1, 8, dtype=torch.float64).unsqueeze(1))
    losses, local = [], []
    for step in range(8):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        opt.step()
        local.append(loss.item())
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / size)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat)
    print(f"rank {rank} ({backend}): mean loss per step {losses}")
    with open(f"result.{rank}.json", "w") as f:
        json.dump({"rank": rank, "size": size, "backend": dist.get_backend(), "before": before, "after": after,
                   "losses": losses, "local": local, "params": flat.tolist(),
                   "in_sync": all(torch.equal(t, flat) for t in gathered)}, f)
    dist.destroy_process_group()
""")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _check_rank_results(results: list[dict], n: int, out: str, per_node: int | None = None) -> None:
    assert [d["rank"] for d in results] == list(range(n)), f"want one RESULT from each of {n} ranks:\n{out}"
    host = socket.gethostname()
    base = np.arange(1000, dtype=np.float64)
    want_sum = sum(base * (r + 1) + 0.25 * r for r in range(n))
    want_max = [10 * (n - 1) + 7, 0]
    want_gather = np.stack([np.arange(6, dtype=np.int32) + 100 * r for r in range(n)])
    for d in results:
        r = d["rank"]
        assert d["size"] == n
        assert str(r) == d["env"]["SLURM_PROCID"], d
        np.testing.assert_allclose(d["sum"], want_sum, rtol=1e-14, err_msg=f"rank {r}'s all_reduce")
        assert d["max"] == want_max, f"rank {r}'s all_reduce(max)"
        np.testing.assert_array_equal(d["gathered"], want_gather, err_msg=f"rank {r}'s all_gather")
        w = d["world"]
        assert w["local_rank"] == int(d["env"]["SLURM_LOCALID"])
        assert w["local_size"] == (per_node or n), f"SLURM_STEP_TASKS_PER_NODE={d['env']['SLURM_STEP_TASKS_PER_NODE']!r}"
        # rank 0's host: the first node of the step (this host; a second node is another slurmd on it)
        assert w["addr"] == host == world.expand_hostlist(d["env"]["SLURM_STEP_NODELIST"])[0]
    # every rank agreed on the rendezvous: one port, from this job and step
    assert len({d["world"]["port"] for d in results}) == 1


# -------------------------------------------------------------------- tests


def test_srun_from_env_numpy(slurm, tmp_path):
    script = _write(tmp_path, "rank.py", RANK_PY)
    results, out = srun(slurm, 4, [sys.executable, str(script)], tmp_path)
    _check_rank_results(results, 4, out)
    for d in results:
        assert d["world"]["source"] == "Slurm"
        assert d["env"]["RANK"] is None and d["env"]["MASTER_ADDR"] is None  # srun's variables only
        assert d["env"]["SLURM_STEP_TASKS_PER_NODE"] == "4"


def test_srun_two_nodes(slurm, tmp_path):
    """srun -N 2 --ntasks-per-node=2: a Slurm host list (vm,vm-2), 2(x2)
    tasks per node, local ranks 0,1,0,1, rank 0's host the first node's."""
    script = _write(tmp_path, "rank.py", RANK_PY)
    results, out = srun(slurm, 4, [sys.executable, str(script)], tmp_path,
                        nodes=["--nodes=2", "--ntasks-per-node=2"])
    _check_rank_results(results, 4, out, per_node=2)
    assert [d["world"]["local_rank"] for d in results] == [0, 1, 0, 1]
    for d in results:
        assert d["env"]["SLURM_STEP_TASKS_PER_NODE"] == "2(x2)"
        assert len(world.expand_hostlist(d["env"]["SLURM_STEP_NODELIST"])) == 2


def test_srun_torch_ddp_gocl_matches_gloo(slurm, tmp_path):
    pytest.importorskip("torch")
    script = _write(tmp_path, "ddp.py", DDP_PY)
    runs = {}
    for backend in ("gloo", "gocl"):
        results, out = srun(slurm, 4, [sys.executable, str(script), backend], tmp_path)
        assert [d["rank"] for d in results] == [0, 1, 2, 3], out
        for d in results:
            assert d["backend"] == backend
            assert d["before"] == {"RANK": None, "WORLD_SIZE": None, "MASTER_ADDR": None, "MASTER_PORT": None}
            assert d["after"]["RANK"] == str(d["rank"]) and d["after"]["WORLD_SIZE"] == "4"
            assert d["after"]["MASTER_ADDR"] == socket.gethostname()
            assert d["in_sync"], f"{backend}: rank {d['rank']}'s parameters differ from another rank's"
            assert d["losses"] == results[0]["losses"], f"{backend}: the ranks' mean losses differ"
        runs[backend] = results
        print(f"{backend} mean loss per step: {results[0]['losses']}")
    gloo, gocl = runs["gloo"], runs["gocl"]
    for a, b in zip(gloo, gocl):
        np.testing.assert_allclose(b["local"], a["local"], rtol=1e-12, atol=0,
                                   err_msg=f"rank {a['rank']}'s local losses: gocl vs gloo")
        np.testing.assert_allclose(b["losses"], a["losses"], rtol=1e-12, atol=0, err_msg="mean losses")
        np.testing.assert_allclose(b["params"], a["params"], rtol=1e-11, atol=1e-14, err_msg="final parameters")
    assert gocl[0]["losses"][-1] < gocl[0]["losses"][0], "the model did not learn: a test that cannot fail?"


def test_srun_gocl_run_as_task(slurm, tmp_path):
    script = _write(tmp_path, "rank.py", RANK_PY)
    results, out = srun(slurm, 2, [str(BIN / "gocl"), "run", "python", str(script)], tmp_path)
    _check_rank_results(results, 2, out)
    for d in results:
        # gocl run exec'd python as srun's task: torchrun's variables, from srun's
        assert d["env"]["RANK"] == d["env"]["SLURM_PROCID"] == str(d["rank"])
        assert d["env"]["WORLD_SIZE"] == "2" and d["env"]["LOCAL_RANK"] == d["env"]["SLURM_LOCALID"]
        assert d["env"]["LOCAL_WORLD_SIZE"] == "2"
        assert d["env"]["MASTER_ADDR"] == socket.gethostname()
        assert d["env"]["MASTER_PORT"] == str(d["world"]["port"])
        assert d["world"]["source"] == "RANK/WORLD_SIZE"
        assert Path(d["python"]).parent == BIN, "a cmd 'python' should be found on PATH: the venv's"


MIXED_PY = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import torch
    import torch.distributed as dist
    import gocl

    dist.init_process_group(sys.argv[1])  # torch's store on MASTER_PORT, which gocl filled in
    comm = gocl.Communicator.from_env()  # gocl's own rendezvous: it must not take torch's port
    r = comm.rank
    t = torch.arange(4, dtype=torch.float64) * (r + 1)
    dist.all_reduce(t)
    x = comm.all_reduce(np.arange(4, dtype=np.float64) * (r + 1))
    print(f"rank {r}: torch {t.tolist()} gocl {x.tolist()}")
    with open(f"result.{r}.json", "w") as f:
        json.dump({"rank": r, "torch": t.tolist(), "gocl": x.tolist(),
                   "ports": [os.environ.get("MASTER_PORT"), os.environ.get("GOCL_MASTER_PORT")]}, f)
    comm.destroy()
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("backend", ["gocl", "gloo"])
def test_srun_torch_and_from_env_in_one_task(slurm, tmp_path, backend):
    """A process group and a Communicator.from_env in the same srun task:
    torch's store and gocl's rendezvous on different ports of rank 0's host."""
    pytest.importorskip("torch")
    script = _write(tmp_path, "mixed.py", MIXED_PY)
    results, out = srun(slurm, 2, [sys.executable, str(script), backend], tmp_path)
    assert [d["rank"] for d in results] == [0, 1], out
    want = (np.arange(4) * 3.0).tolist()
    for d in results:
        assert d["torch"] == want and d["gocl"] == want, d
        torch_port, gocl_port = d["ports"]
        assert torch_port is not None and gocl_port is not None and torch_port != gocl_port, d


def test_export_torch_env_keeps_gocl_off_torchs_port(monkeypatch):
    """No cluster needed: what `import torch` sets in an srun task (real
    srun variables, as printed by a task of the cluster above) leaves
    Communicator.from_env on the derived port, torch's store one above."""
    for k in list(os.environ):
        if k in _SCRUB or k.startswith(_SCRUB_PREFIXES):
            monkeypatch.delenv(k)
    real = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
            "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_JOB_ID": "2", "SLURM_JOBID": "2",
            "SLURM_STEP_NODELIST": "vm", "SLURM_JOB_NODELIST": "vm", "SLURM_NODELIST": "vm",
            "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4"}
    for k, v in real.items():
        monkeypatch.setenv(k, v)
    derived = world.read().port
    added = world.export_torch_env()
    want = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "vm",
            "MASTER_PORT": str(derived + 1), "GOCL_MASTER_PORT": str(derived)}
    assert {k: added.get(k) for k in want} == want, added
    assert all(os.environ[k] == v for k, v in added.items())
    w = world.read()
    assert (w.rank, w.size, w.local_rank, w.local_size, w.addr, w.port) == (1, 4, 1, 4, "vm", derived)
