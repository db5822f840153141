"""gocl.jax.initialize (issue 40): jax.distributed.initialize that also runs
JAX's own collectives over gocl's MPI ABI library, its world from the
launcher; and that library's world under each launcher (mpirun's, srun's and
Kubernetes' variables, without RANK/WORLD_SIZE).

Each JAX run is 2 processes of jax_initialize_rank.py checking a jitted
shard_map psum and psum_scatter against numpy; gocl's metrics files are the
evidence that gocl carried them (a fall-back to gloo writes none).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gocl.tools.launcher import free_port, mpi_abi_path

ROOT = Path(__file__).resolve().parents[2]
RANK_SCRIPT = ROOT / "tests" / "python" / "jax_initialize_rank.py"

pytestmark = pytest.mark.skipif(not mpi_abi_path().is_file(), reason="libgocl_mpiabi.so not built (make venv)")

LAUNCHER_VARS = ("GOCL_METRICS", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_RANK", "MASTER_", "GOCL_MASTER_PORT",
                 "GOCL_WORLD_SIZE", "JAX_", "MPITRAMPOLINE_", "OMPI_", "PMIX_", "PMI_", "SLURM_",
                 "JOB_COMPLETION_INDEX")


def clean_env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)} | {"JAX_PLATFORMS": "cpu"} | extra


def gocl_run(n: int, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gocl", "run", "-n", str(n), "--", sys.executable, str(RANK_SCRIPT)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def all_reduces(tmp_path: Path) -> dict[int, int]:
    """rank -> AllReduce calls in gocl's metrics files (of communicators of 2
    ranks: gocl's world came from the launcher, not a world of one each)."""
    seen: dict[int, int] = {}
    for f in tmp_path.glob("m-*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("coll_perf", {}).get("coll") == "AllReduce" and rec["header"]["n_ranks"] == 2:
                r = rec["header"]["rank"]
                seen[r] = seen.get(r, 0) + 1
    return seen


def metrics_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(GOCL_METRICS_FILE=str(tmp_path / "m-%p-r%r.jsonl"), **extra)


def test_gocl_run_2_processes_initialize_without_arguments(tmp_path):
    r = gocl_run(2, metrics_env(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(2):
        assert f"jax_initialize_rank: OK rank {i} of 2" in r.stdout, r.stdout + r.stderr
    assert set(all_reduces(tmp_path)) == {0, 1}, all_reduces(tmp_path)


@pytest.mark.parametrize("args,names", [
    ({"num_processes": 3}, ["num_processes=3", "$WORLD_SIZE=2"]),
    ({"process_id": "flip"}, ["$RANK="]),  # rank r passes 1 - r: "process_id=1 ... ($RANK=0)" and the reverse
])
def test_arguments_that_disagree_with_the_launcher_fail_naming_both(args, names, tmp_path):
    r = gocl_run(2, metrics_env(tmp_path, JAX_INIT_ARGS=json.dumps(args)), timeout=120)
    out = r.stdout + r.stderr
    # every rank disagrees, so every rank raises before anything waits (a rank
    # whose arguments agreed would wait in JAX's coordinator for the others,
    # until `gocl run` stops it when they exit with the error)
    errors = [ln for ln in r.stdout.splitlines() if "jax_initialize_rank: ERROR InvalidArgumentError" in ln]
    assert len(errors) == 2 and all(all(n in e for n in names) for e in errors), out
    if args.get("process_id") == "flip":
        assert any("process_id=1" in e and "($RANK=0)" in e for e in errors), out
        assert any("process_id=0" in e and "($RANK=1)" in e for e in errors), out


def test_a_permutation_of_ranks_between_jax_and_the_launcher_is_harmless(tmp_path):
    # plain jax.distributed.initialize with process_id = 1 - RANK: XLA's splits
    # key by the rank in the clique, so gocl's communicators follow JAX's order
    r = gocl_run(2, metrics_env(tmp_path, JAX_INIT_MODE="plain-flipped", JAX_INIT_PORT=str(free_port())))
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(2):
        assert f"jax_initialize_rank: OK rank {i} of 2" in r.stdout, r.stdout + r.stderr
    assert set(all_reduces(tmp_path)) == {0, 1}, all_reduces(tmp_path)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _job_with_free_ports() -> int:
    """A job number whose derived gocl port (15000 + 2 * (job % 5000)) and
    JAX coordinator port (+ 10001) are free here."""
    for job in range(os.getpid() % 5000, os.getpid() % 5000 + 5000):
        port = 15000 + 2 * (job % 5000)
        if _free(port) and _free(port + 10001):
            return job
    pytest.skip("no free derived port")


def _launcher_env(launcher: str, rank: int, job: int) -> dict[str, str]:
    """What mpirun, srun or a Kubernetes Indexed Job sets for rank `rank` of 2
    (no RANK/WORLD_SIZE; rank 0 on this host)."""
    if launcher == "mpirun":
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": str(job),
                "OMPI_MCA_orte_hnp_uri": f"{job}.0;tcp://127.0.0.1:1"}
    if launcher == "srun":
        return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank), "SLURM_STEP_ID": "0",
                "SLURM_JOB_ID": str(job), "SLURM_STEP_NODELIST": "127.0.0.[1]", "SLURM_STEP_TASKS_PER_NODE": "2"}
    # this host's name has no pod index: the fix the error names is MASTER_ADDR
    return {"JOB_COMPLETION_INDEX": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "GOCL_MASTER_PORT": str(15000 + 2 * (job % 5000))}


@pytest.mark.parametrize("launcher", ["mpirun", "srun", "kubernetes"])
def test_launchers_worlds_without_rank_variables(launcher, tmp_path):
    """Two processes with only a scheduler's variables: gocl.jax.initialize()
    takes JAX's world from them (gocl.world), gocl's MPI library takes its own
    (its C reader), and psum runs over gocl."""
    job = _job_with_free_ports()
    procs = [subprocess.Popen([sys.executable, str(RANK_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=metrics_env(tmp_path, **_launcher_env(launcher, r, job)))
             for r in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=180)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    text = "\n".join(outs)
    assert [p.returncode for p in procs] == [0, 0], text
    for i in range(2):
        assert f"jax_initialize_rank: OK rank {i} of 2" in outs[i], text
    assert set(all_reduces(tmp_path)) == {0, 1}, (all_reduces(tmp_path), text)


def _one_process(code: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=clean_env(**extra))


def test_initialize_after_jax_backends_says_to_call_it_first():
    r = _one_process("import gocl.jax as gj, jax\njax.devices()\ngj.initialize()")
    assert r.returncode != 0 and "InvalidUsageError" in r.stderr and "call gocl.jax.initialize() first" in r.stderr, \
        r.stdout + r.stderr


def test_jax_imported_first_without_mpitrampoline_lib_says_how_to_fix_it():
    # jaxlib's MPItrampoline read MPITRAMPOLINE_LIB (unset) at `import jax`:
    # MPI would exit the process at the first collective, so initialize refuses
    r = _one_process("import jax, gocl.jax as gj\ngj.initialize()")
    assert r.returncode != 0 and "Import gocl.jax before jax" in r.stderr, r.stdout + r.stderr
    assert "MPITRAMPOLINE_LIB=$(gocl mpi-abi)" in r.stderr, r.stderr


def test_a_world_of_one_and_the_users_choice_of_collectives_stands():
    code = ("import gocl.jax as gj, jax, os\ngj.initialize()\n"
            "print(jax.process_count(), jax.config.jax_cpu_collectives_implementation, "
            "os.environ.get('MPITRAMPOLINE_LIB', '').endswith('libgocl_mpiabi.so'))")
    r = _one_process(code)
    assert r.returncode == 0 and r.stdout.split() == ["1", "mpi", "True"], r.stdout + r.stderr
    r = _one_process(code, JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo")
    assert r.returncode == 0 and r.stdout.split() == ["1", "gloo", "False"], r.stdout + r.stderr
