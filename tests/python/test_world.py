"""gocl.world: every launcher's variables, read in one place (environment
fixtures, odd ones included), and real runs under the engines this machine
has: mpirun -np 4 with Communicator.from_env and with `gocl run` as the
task."""

from __future__ import annotations

import json
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


# ------------------------------------------- the spec: tests/testdata/launcher_worlds.json
#
# One table of environments and the world (or error) each gives, run through
# both readers: world.read here and the MPI ABI library's C reader
# (mpiabi/launcher_world.c, through tests/c/mpiabi_test.c --world), so
# gocl's Python and JAX-over-MPI ranks can never take different worlds.

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "tests" / "testdata" / "launcher_worlds.json").read_text())["cases"]
FIELDS = ("rank", "size", "local_rank", "local_size", "addr", "port", "source")


def case_env(case: dict, tmp_path: Path) -> dict[str, str]:
    for name, text in case.get("files", {}).items():
        (tmp_path / name).write_text(text)
    return {k: v.replace("{tmp}", str(tmp_path)) for k, v in case["env"].items()}


def test_the_table_covers_every_launcher_and_both_outcomes():
    sources = {c["world"]["source"] for c in TABLE if c.get("world")}
    assert sources == {"RANK/WORLD_SIZE", "Slurm", "OpenMPI", "MPICH (PMI)", "Kubernetes (JOB_COMPLETION_INDEX)"}
    assert any("error" in c for c in TABLE) and any(c.get("world", 0) is None for c in TABLE)
    assert len({c["name"] for c in TABLE}) == len(TABLE)


@pytest.mark.parametrize("case", TABLE, ids=[c["name"] for c in TABLE])
def test_python_reader_follows_the_table(case, tmp_path):
    env = case_env(case, tmp_path)
    if "error" in case:
        with pytest.raises(gocl.InvalidArgumentError) as e:
            world.read(env, who="test")
        assert case["error"] in str(e.value), str(e.value)
        return
    w = world.read(env, who="test")
    got = None if w is None else {f: getattr(w, f) for f in FIELDS}
    assert got == case["world"]


@pytest.fixture(scope="module")
def mpiabi_world(tmp_path_factory):
    """tests/c/mpiabi_test.c built, run as `--world HOSTNAME` against gocl's
    MPI ABI library: the C reader's answer for an environment."""
    from gocl.tools.launcher import mpi_abi_path
    lib = mpi_abi_path()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not lib.is_file() or cc is None:
        pytest.skip(f"{lib} not built (make venv) or no C compiler")
    exe = tmp_path_factory.mktemp("mpiabi") / "mpiabi_test"
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", str(ROOT / "tests" / "c" / "mpiabi_test.c"), "-ldl",
                    "-lpthread", "-lm", "-o", str(exe)], check=True)

    def read(env: dict[str, str]) -> dict:
        # the case's environment and nothing else: HOSTNAME stands for the pod's name
        r = subprocess.run([str(exe), str(lib), str(ROOT / "mpiabi" / "mpiabi_names.txt"), "--world",
                            env.get("HOSTNAME", "")], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode in (0, 3) and r.stdout.startswith("{"), r.stdout + r.stderr
        return json.loads(r.stdout)
    return read


@pytest.mark.parametrize("case", TABLE, ids=[c["name"] for c in TABLE])
def test_mpi_abi_librarys_reader_follows_the_table(case, tmp_path, mpiabi_world):
    got = mpiabi_world(case_env(case, tmp_path))
    if "error" in case:
        assert case["error"] in got.get("error", ""), got
    elif case["world"] is None:
        assert got == {"world": None}
    else:
        assert got == case["world"]


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


def test_what_importing_gocl_and_torch_does_is_visible_at_info():
    """import gocl installs an import hook and import torch writes the
    scheduler's world into os.environ: GOCL_DEBUG=INFO says both, once, and
    without it nothing is printed."""
    pytest.importorskip("torch")
    code = "import os, gocl, torch; print(os.environ.get('RANK'), os.environ.get('MASTER_ADDR'))"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_", "RANK", "WORLD_SIZE",
                                                                      "MASTER_", "LOCAL_", "GOCL_DEBUG"))}
    r = subprocess.run([sys.executable, "-c", code], env={**base, **SRUN, "GOCL_DEBUG": "INFO"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "node01"]
    lines = [ln for ln in r.stderr.splitlines() if " GOCL INFO " in ln]
    assert sum("import hook installed" in ln for ln in lines) == 1, r.stderr
    assert sum("registered torch.distributed backend 'gocl'" in ln for ln in lines) == 1, r.stderr
    env_lines = [ln for ln in lines if "set for torch's env://" in ln]
    assert len(env_lines) == 1 and "RANK=2" in env_lines[0] and "MASTER_ADDR=node01" in env_lines[0], r.stderr
    quiet = subprocess.run([sys.executable, "-c", code], env={**base, **SRUN}, capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and "GOCL INFO" not in quiet.stderr, quiet.stderr


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
