"""gocl.world: every launcher's variables, read in one place (environment
fixtures, odd ones included), and real runs under the engines this machine
has: mpirun -np 4 with Communicator.from_env and with `gocl run` as the
task."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import launched
import pytest

import gocl
from gocl import world

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("spec,hosts", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("login1", ["login1"]),
    ("a,b[8-10],c", ["a", "b8", "b9", "b10", "c"]),
    ("r[1-2]n[09-10]-ib", ["r1n09-ib", "r1n10-ib", "r2n09-ib", "r2n10-ib"]),
    ("gpu[007]", ["gpu007"]),
])
def test_slurm_host_lists(spec, hosts):
    assert world.expand_hostlist(spec) == hosts


@pytest.mark.parametrize("spec", ["node[01-03", "node01-03]", "node[a-b]"])
def test_bad_host_lists_name_the_list(spec):
    with pytest.raises(gocl.InvalidArgumentError, match=r"host list"):
        world.expand_hostlist(spec)


SRUN = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": "node[01-03,07]", "SLURM_JOB_ID": "41234", "SLURM_STEP_TASKS_PER_NODE": "1(x4)"}


def test_slurm_jobs_in_a_row_and_their_steps_get_ports_of_their_own():
    ports = [world.read({**SRUN, "SLURM_JOB_ID": str(j), "SLURM_STEP_ID": str(s)}).port
             for j in (1, 11, 12, 41234) for s in (0, 1)]
    assert len(set(ports)) == len(ports) and all(p % 2 == 0 for p in ports), ports  # torch's store: p + 1


def test_srun_arbitrary_distribution_takes_rank_0s_host_from_the_hostfile(tmp_path):
    (tmp_path / "hosts").write_text("node07\nnode01\nnode02\nnode03\n")
    env = {**SRUN, "SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": str(tmp_path / "hosts")}
    assert world.read(env).addr == "node07"


@pytest.mark.parametrize("env,want", [
    # torchrun / gocl run
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h0",
      "MASTER_PORT": "29400"}, (3, 4, 1, 2, "h0", 29400, "RANK/WORLD_SIZE")),
    # no LOCAL_RANK: the rank is its own local rank
    ({"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h0"}, (3, 4, 3, None, "h0", 29500, "RANK/WORLD_SIZE")),
    # srun
    (SRUN, (2, 4, 0, 1, "node01", 15000 + 2 * (41234 % 5000), "Slurm")),
    # srun, MASTER_ADDR/PORT win; uneven tasks per node: no local size
    ({**SRUN, "MASTER_ADDR": "login", "MASTER_PORT": "31000", "SLURM_STEP_TASKS_PER_NODE": "2,1(x2)"},
     (2, 4, 0, None, "login", 31000, "Slurm")),
    # OpenMPI 4 under mpirun
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_orte_hnp_uri": "2345678.0;tcp://10.0.0.1,192.168.1.2:45678"},
     (1, 4, 1, 2, "10.0.0.1", 18560, "OpenMPI")),
    # OpenMPI 5 (PMIx): the server's URI names mpirun's host
    ({"PMIX_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "PMIX_NAMESPACE": "prterun-h-812@1",
      "PMIX_SERVER_URI41": "prterun-h-812@0.0;tcp4://10.1.2.3:40101"},
     (0, 2, 0, None, "10.1.2.3", 17400, "OpenMPI")),
    # MPICH / Hydra
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "PMI_PORT": "hostA:33333"},
     (3, 4, 1, 2, "hostA", 15000 + 2 * (33333 % 5000), "MPICH (PMI)")),
    # Kubernetes Indexed Job behind a headless service
    ({"JOB_COMPLETION_INDEX": "3", "WORLD_SIZE": "4", "HOSTNAME": "train-3.workers.ns.svc.cluster.local"},
     (3, 4, 0, 1, "train-0.workers.ns.svc.cluster.local", 29500, "Kubernetes (JOB_COMPLETION_INDEX)")),
    # torchrun inside an srun task (a node per task): torchrun's RANK wins, MASTER_* as given
    ({**SRUN, "RANK": "9", "WORLD_SIZE": "16", "GROUP_RANK": "2", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"},
     (9, 16, 9, None, "node01", 29500, "RANK/WORLD_SIZE")),
    # mpirun inside an allocation's batch script: the MPI world, not the batch step
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7", "OMPI_COMM_WORLD_RANK": "2",
      "OMPI_COMM_WORLD_SIZE": "4", "MASTER_ADDR": "h"}, (2, 4, 2, None, "h", 15000, "OpenMPI")),
])
def test_each_launchers_world(env, want):
    w = world.read(env)
    assert (w.rank, w.size, w.local_rank, w.local_size, w.addr, w.port, w.source) == want


def test_a_batch_script_is_not_a_rank():
    """sbatch's script has SLURM_PROCID=0 and the job's SLURM_NTASKS but no
    step: it is where `gocl run -n` or srun start ranks, not rank 0 of them."""
    assert world.read({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}) is None
    assert world.read({}) is None


@pytest.mark.parametrize("env,message", [
    ({**SRUN, "RANK": "0", "WORLD_SIZE": "4"}, r"RANK=0, WORLD_SIZE=4 are set, but Slurm starts this process as rank 2 of 4"),
    ({"RANK": "1"}, r"\$RANK is set but \$WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, r"\$RANK is not set but \$WORLD_SIZE is"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, r"RANK=4 is not in \[0, WORLD_SIZE=4\)"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, r"\$RANK='x' is not an integer"),
    ({"JOB_COMPLETION_INDEX": "1"}, r"set WORLD_SIZE \(or GOCL_WORLD_SIZE\) in the pod spec"),
    ({"OMPI_COMM_WORLD_RANK": "1"}, r"no world size"),
    ({"SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, r"no \$SLURM_NTASKS"),
])
def test_bad_or_clashing_worlds_say_why(env, message):
    with pytest.raises(gocl.InvalidArgumentError, match=message):
        world.read(env, who="test")


def test_from_env_without_a_launcher_names_them(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("RANK", "WORLD_SIZE", "SLURM_", "OMPI_", "PMI_", "PMIX_", "JOB_COMPLETION")):
            monkeypatch.delenv(k)
    with pytest.raises(gocl.InvalidArgumentError, match=r"\$RANK is not set, nor any launcher's rank: .*mpirun"):
        gocl.Communicator.from_env(timeout=1)


# ------------------------------------------------------------ real runs under mpirun

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (make mpi installs Debian's OpenMPI)")

def _mpirun(n: int, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "GOCL_", "OMPI_", "PMIX_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    return subprocess.run([MPIRUN, "-np", str(n), "--bind-to", "none", *argv], env=env, capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)


@needs_mpirun
def test_mpirun_np_4_from_env(tmp_path):
    """mpirun -np 4 python prog.py: from_env takes OpenMPI's world (rank 0's
    host from mpirun's URI, a port from its job id) with no MASTER_ADDR."""
    prog = tmp_path / "prog.py"
    prog.write_text(launched.RANK_PROGRAM)
    r = _mpirun(4, [sys.executable, str(prog)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # mpirun forwards the ranks' output interleaved, lines sometimes run together
    assert sorted(int(m) for m in re.findall(r"OK (\d+) of 4 local", r.stdout)) == [0, 1, 2, 3], r.stdout + r.stderr


@needs_mpirun
def test_gocl_run_under_mpirun_runs_each_task_as_a_rank(tmp_path):
    """mpirun -np 4 gocl run prog.py (no -n): each task is one rank with
    torchrun's variables, LOCAL_RANK from OpenMPI."""
    prog = tmp_path / "prog.py"
    prog.write_text(launched.RANK_PROGRAM)
    r = _mpirun(4, [str(BIN / "gocl"), "run", str(prog)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    oks = sorted(re.findall(r"OK (\d+) of 4 local (\d+)", r.stdout))
    assert oks == [(str(i), str(i)) for i in range(4)], r.stdout + r.stderr


def test_gocl_run_without_n_outside_a_scheduler_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "SLURM_", "OMPI_", "PMI"))}
    r = subprocess.run([str(BIN / "gocl"), "run", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-n N is required" in r.stderr, r.stderr


@pytest.mark.parametrize("env,want", [
    # an srun task: torch's env:// gets the scheduler's world, its store one port above gocl's
    (SRUN, {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "2",
            "MASTER_ADDR": "node01",
            "MASTER_PORT": "17469", "GOCL_MASTER_PORT": "17468"}),
    # what is set stays as it is
    ({**SRUN, "MASTER_ADDR": "login", "MASTER_PORT": "31000"},
     {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "2"}),
    # mpirun, 2 ranks per host: rank 3 is the second of node 1
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_orte_hnp_uri": "2345678.0;tcp://10.0.0.1:45678"},
     {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1",
      "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "18561", "GOCL_MASTER_PORT": "18560"}),
    # torchrun or gocl run already set the world, or nothing launched this process
    ({**SRUN, "RANK": "2", "WORLD_SIZE": "4"}, {}),
    ({"PATH": "/bin"}, {}),
    # a scheduler that does not say where rank 0 is: nothing to fill (from_env's error says what to set)
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, {}),
])
def test_torch_env_fills_what_the_scheduler_gives(env, want):
    assert world.torch_env(env) == want


@needs_mpirun
def test_mpirun_torch_init_process_group_without_master_addr(tmp_path):
    """mpirun -np 4 python train.py with dist.init_process_group("gocl") and
    no torchrun: DDP's losses step by step are gloo's under the same mpirun."""
    prog = tmp_path / "train.py"
    prog.write_text(launched.TORCH_PROGRAM)
    losses = {}
    for backend in ("gocl", "gloo"):
        r = _mpirun(4, [sys.executable, str(prog), backend], tmp_path)
        assert r.returncode == 0, backend + ": " + r.stdout + r.stderr
        losses[backend] = launched.losses(r.stdout, ranks=4)
    assert losses["gocl"] == pytest.approx(losses["gloo"], rel=1e-6), losses
