"""gocl behind JAX's MPI door (issue 40): libgocl_mpiabi.so, MPItrampoline's
MPI ABI over gocl.

- every symbol MPItrampoline resolves (its function and constant tables,
  mpiabi/mpiabi_names.txt) resolves in the library, dlopened as
  MPItrampoline does; a world of one runs what XLA calls;
- the same C program as 3 ranks of `gocl run` (worker threads, splits, the
  reductions gocl does not do itself, XLA's permute and all-to-all
  patterns), with gocl's metrics as evidence;
- an unchanged JAX program on 2 processes of `gocl run` (which sets
  JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and MPITRAMPOLINE_LIB): shard_map
  psum/pmax/pmin, all_gather, psum_scatter, ppermute, all_to_all against
  numpy, and gocl's metrics files show the calls (a fall-back to gloo
  writes none);
- the same on 4 processes, and a 2x2 mesh's axis collectives over
  sub-communicators; 1000 psum_scatter calls on the 2x2 mesh, each checked;
- a peer that exits fails the survivor's next call, naming it;
- splits that only a JAX world other than the launcher's would make (two
  JAX worlds in one launcher's world, a JAX world larger than it) fail on
  every rank naming both (a permutation of ranks is harmless:
  test_jax_initialize.py).
make test-mpiabi runs the file 3 times in a row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gocl.tools.launcher import free_port, mpi_abi_path

ROOT = Path(__file__).resolve().parents[2]
NAMES = ROOT / "mpiabi" / "mpiabi_names.txt"
LIB = mpi_abi_path()

pytestmark = pytest.mark.skipif(not LIB.is_file(), reason=f"{LIB} not built (make venv)")


@pytest.fixture(scope="module")
def mpiabi_test(tmp_path_factory) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("mpiabi") / "mpiabi_test"
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", str(ROOT / "tests" / "c" / "mpiabi_test.c"), "-ldl",
                    "-lpthread", "-lm", "-o", str(exe)], check=True)
    return exe


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("GOCL_METRICS", "RANK", "WORLD_SIZE", "MASTER_", "GOCL_MASTER_PORT", "JAX_", "MPITRAMPOLINE_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | extra


def gocl_run(n: int, cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gocl", "run", "-n", str(n), "--", *cmd], capture_output=True,
                          text=True, timeout=timeout, env=env)


def metrics(tmp_path: Path, n: int) -> Counter:
    """(op, rank) -> calls gocl's metrics files record (coll name, or Send/Recv)."""
    files = sorted(tmp_path.glob("m-*.jsonl"))
    seen = Counter()
    for f in files:
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            rank = rec["header"]["rank"]
            if "coll_perf" in rec:
                seen[rec["coll_perf"]["coll"]] += 1
                assert "coll_error" not in rec["coll_perf"], rec
            elif "p2p_perf" in rec:
                seen[rec["p2p_perf"]["p2p"]] += 1
            assert 0 <= rank < rec["header"]["n_ranks"] <= n, rec
    return seen


def test_every_mpitrampoline_symbol_resolves(mpiabi_test):
    names = [n for n in NAMES.read_text().split() if n]
    assert len(names) == 642 and "MPIABI_Comm_split" in names and "MPIABI_COMM_WORLD" in names
    r = subprocess.run([mpiabi_test, str(LIB), str(NAMES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"resolved {len(names)} symbols" in r.stdout, r.stdout + r.stderr


def test_world_of_one(mpiabi_test):
    r = subprocess.run([mpiabi_test, str(LIB), str(NAMES), "--run"], capture_output=True, text=True, timeout=60,
                       env=clean_env())
    assert r.returncode == 0 and "OK rank 0 of 1" in r.stdout, r.stdout + r.stderr
    # the one function it calls that gocl does not provide, named on stderr
    assert "MPI_Win_create is not provided by gocl's MPI ABI" in r.stderr, r.stderr


def test_gocl_mpi_abi_prints_the_library():
    r = subprocess.run([sys.executable, "-m", "gocl", "mpi-abi"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and Path(r.stdout.strip()) == LIB, r.stdout + r.stderr


def test_c_ranks_over_gocl(mpiabi_test, tmp_path):
    env = clean_env(GOCL_METRICS_FILE=str(tmp_path / "m-%p-r%r.jsonl"))
    r = gocl_run(3, [str(mpiabi_test), str(LIB), str(NAMES), "--run"], env, 120)
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(3):
        assert f"OK rank {i} of 3" in r.stdout, r.stdout + r.stderr
    seen = metrics(tmp_path, 3)
    for op in ("AllReduce", "AllGather", "ReduceScatter", "Send", "Recv"):
        assert seen[op] > 0, (op, seen)


def test_two_jax_worlds_in_one_launchers_world_fail_the_split_naming_both(mpiabi_test):
    # 4 ranks of `gocl run` split as two JAX worlds of 2 would (color 0, keys
    # 0, 1, 0, 1): every rank fails naming the cliques and the launcher's world
    r = gocl_run(4, [str(mpiabi_test), str(LIB), str(NAMES), "--split", "2", "0"], clean_env(), 120)
    assert r.returncode == 0, r.stdout + r.stderr
    fails = [ln for ln in r.stdout.splitlines() if "both asked to lead color 0 (key 0), as two JAX worlds would" in ln]
    assert len(fails) == 4, r.stdout + r.stderr
    assert all("the launcher made 4 ranks (RANK/WORLD_SIZE)" in ln and "num_processes" in ln for ln in fails), fails


def test_a_jax_world_larger_than_the_launchers_fails_the_split_naming_both(mpiabi_test):
    # no launcher (a world of one), but the split asks for key 1, as JAX's
    # process 1 of 2 would
    r = subprocess.run([mpiabi_test, str(LIB), str(NAMES), "--split", "1", "1"], capture_output=True, text=True,
                       timeout=60, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("key 1, for a clique of at least 2 processes, but gocl's world, which the launcher made 1 rank "
            "(no launcher: a world of one)") in r.stdout and "larger than the launcher's" in r.stdout, r.stdout


def run_jax(tmp_path: Path, n: int, timeout: float, **extra: str) -> Counter:
    env = clean_env(GOCL_METRICS_FILE=str(tmp_path / "m-%p-r%r.jsonl"), JAX_MPI_TEST_PORT=str(free_port()),
                    JAX_PLATFORMS="cpu", **extra)
    r = gocl_run(n, [sys.executable, str(ROOT / "tests" / "python" / "jax_mpi_rank.py")], env, timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(n):
        assert f"jax_mpi_rank: OK rank {i} of {n}" in r.stdout, r.stdout + r.stderr
    return metrics(tmp_path, n)


def test_jax_collectives_over_gocl(tmp_path):
    seen = run_jax(tmp_path, 2, 180)
    # psum/pmax/pmin (4 dtypes, complex), all_gather (f32, bool), psum_scatter,
    # ppermute (sends and receives), all_to_all (a ring of sendrecvs)
    assert seen["AllReduce"] >= 2 * 13, seen
    assert seen["AllGather"] >= 2 * 2, seen
    assert seen["ReduceScatter"] >= 2, seen
    assert seen["Send"] >= 2 * 2 and seen["Recv"] >= 2 * 2, seen


def test_jax_collectives_over_gocl_under_torchrun(tmp_path):
    """The README's line for torchrun: the two variables, then torchrun.
    torchrun's agent holds MASTER_PORT on rank 0's host, so the library's id
    exchange takes MASTER_PORT + 2 (it failed binding MASTER_PORT before)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip("torchrun not installed (the torch extra)")
    env = clean_env(GOCL_METRICS_FILE=str(tmp_path / "m-%p-r%r.jsonl"), JAX_MPI_TEST_PORT=str(free_port()),
                    JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="mpi", MPITRAMPOLINE_LIB=str(LIB))
    r = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", str(free_port()),
                        str(ROOT / "tests" / "python" / "jax_mpi_rank.py")],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(2):
        assert f"jax_mpi_rank: OK rank {i} of 2" in r.stdout, r.stdout + r.stderr
    seen = metrics(tmp_path, 2)
    assert seen["AllReduce"] >= 2 * 13 and seen["ReduceScatter"] >= 2, seen


def test_jax_4_processes_and_a_2x2_mesh_over_gocl(tmp_path):
    # the same collectives on 4 processes, then psum over each axis of a 2x2
    # mesh (sub-communicators: rows and columns share first devices)
    seen = run_jax(tmp_path, 4, 300, JAX_MPI_TEST_MESH="2x2")
    assert seen["AllReduce"] >= 4 * 21 and seen["ReduceScatter"] >= 4, seen
    assert seen["Send"] >= 4 * 4 and seen["Recv"] >= 4 * 4, seen


def test_dead_peer_fails_the_survivors_call_naming_it(tmp_path):
    env = clean_env(JAX_MPI_TEST_PORT=str(free_port()), JAX_PLATFORMS="cpu", GOCL_TIMEOUT="60")
    r = gocl_run(2, [sys.executable, str(ROOT / "tests" / "python" / "jax_mpi_dead_rank.py")], env, 180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0: psum failed after" in r.stdout and "naming rank 1" in r.stdout, r.stdout + r.stderr


def test_1000_psum_scatter_on_a_2x2_mesh(tmp_path):
    # each of 1000 calls (over the mesh's two axes in turn) checked on every rank
    seen = run_jax(tmp_path, 4, 400, JAX_MPI_TEST_MESH="2x2", JAX_MPI_TEST_STRESS="1000")
    assert seen["ReduceScatter"] >= 4 * 1000, seen
