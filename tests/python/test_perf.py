"""`gocl perf`: every collective on 2 ranks (threads of one process, and one
process per rank under `gocl run`), results checked (-c 1), the nccl-tests
table, its footer, --json's schema and busbw factors, --plot, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from gocl.tools import perf

COLLECTIVES = ["all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter", "alltoall", "sendrecv"]
# nccl-tests' busbw factors at n ranks (doc/PERFORMANCE.md).
FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
NO_IN_PLACE = {"alltoall", "sendrecv"}
# Tiny sizes: 8 B .. 4 KiB (every collective has a non-zero count from 16 B on 2 ranks).
SWEEP = ["-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-c", "1"]
HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
          "#wrong")
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)" + r"\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)" * 2 + r"\s*$")


def gocl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gocl", *args], capture_output=True, text=True, timeout=timeout)


def check_table(out: str, coll: str, redop: str, root: int, dtype: str = "float") -> list[tuple]:
    """The rows of a gocl perf table, after checking its layout."""
    lines = out.splitlines()
    assert HEADER in lines, out
    rows = [ROW.match(ln).groups() for ln in lines if not ln.startswith("#") and ROW.match(ln)]
    assert [int(r[0]) for r in rows] == sorted({int(r[0]) for r in rows}) and len(rows) >= 3, out
    for size, count, typ, op, rt, *phases in rows:
        assert (typ, op, int(rt)) == (dtype, redop, root), out
        assert int(count) >= 1 and int(size) >= int(count)
        oop, ip = phases[:4], phases[4:]
        assert oop[3] == "0", f"{coll}: wrong elements out of place:\n{out}"
        if coll in NO_IN_PLACE:
            assert ip == ["N/A"] * 4, out
        else:
            assert ip[3] == "0", f"{coll}: wrong elements in place:\n{out}"
    assert "# Out of bounds values : 0 OK" in lines, out
    assert re.search(r"^# Avg bus bandwidth    : [0-9.e+-]+ ?$", out, re.M), out
    return rows


@pytest.mark.parametrize("coll", COLLECTIVES)
def test_threads(coll):
    r = gocl("perf", coll, "-g", "2", *SWEEP)
    assert r.returncode == 0, r.stdout + r.stderr
    redop = "sum" if coll in ("all_reduce", "reduce", "reduce_scatter") else "none"
    check_table(r.stdout, coll, redop, 0 if coll in ("broadcast", "reduce") else -1)


@pytest.mark.parametrize("coll", COLLECTIVES)
def test_processes_under_gocl_run(coll):
    # Root 1 and max for the rooted and reducing collectives: the options reach every rank.
    extra = ["-r", "1", "-o", "max"] if coll in ("broadcast", "reduce", "all_reduce") else []
    r = gocl("run", "-n", "2", "--", sys.executable, "-m", "gocl", "perf", coll, *SWEEP, *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    rank0 = "\n".join(ln[len("[rank 0] "):] for ln in r.stdout.splitlines() if ln.startswith("[rank 0] "))
    assert not any(ln.startswith("[rank 1] ") for ln in r.stdout.splitlines()), "only rank 0 prints:\n" + r.stdout
    assert f"# gocl {coll}: nranks 2 (processes 2 x ranks per process 1)" in rank0, rank0
    redop = {"all_reduce": "max", "reduce": "max", "reduce_scatter": "sum"}.get(coll, "none")
    check_table(rank0, coll, redop, 1 if coll in ("broadcast", "reduce") else -1)


def test_processes_started_by_gocl_perf():
    r = gocl("perf", "reduce", "-P", "2", "-g", "2", "-r", "3", "-o", "prod", "-d", "int32", *SWEEP)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# gocl reduce: nranks 4 (processes 2 x ranks per process 2)" in r.stdout, r.stdout
    check_table(r.stdout, "reduce", "prod", 3, dtype="int32")


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "alltoall"])
def test_json_schema_and_busbw_factors(coll, tmp_path):
    r = gocl("perf", coll, "-g", "2", *SWEEP, "-d", "bfloat16", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    run = json.loads(r.stdout)  # JSON instead of the table: nothing else on stdout
    assert {k: run[k] for k in ("tool", "schema", "library", "collective", "nranks", "nprocs", "ranks_per_proc",
                                "type", "check", "out_of_bounds")} == {
        "tool": "gocl-perf", "schema": 1, "library": "gocl", "collective": coll, "nranks": 2, "nprocs": 1,
        "ranks_per_proc": 2, "type": "bfloat16", "check": 1, "out_of_bounds": 0}
    assert run["busbw_factor"] == pytest.approx(FACTORS[coll](2))
    assert len(run["rows"]) >= 3
    busbws = []
    for row in run["rows"]:
        assert set(row) == {"size", "count", "out_of_place", "in_place"}
        for phase in (row["out_of_place"], row["in_place"]):
            if phase is None:
                assert coll in NO_IN_PLACE and row["in_place"] is None
                continue
            assert set(phase) == {"time_us", "algbw", "busbw", "wrong"} and phase["wrong"] == 0
            assert phase["algbw"] == pytest.approx(row["size"] / phase["time_us"] / 1e3, rel=1e-4)
            assert phase["busbw"] == pytest.approx(phase["algbw"] * FACTORS[coll](2), rel=1e-4)
            busbws.append(phase["busbw"])
    assert run["avg_busbw"] == pytest.approx(sum(busbws) / len(busbws), rel=1e-4)
    # Counts follow nccl-tests: all_gather and alltoall count per rank, size the whole buffer.
    per_rank = coll in ("all_gather", "alltoall")
    assert all(row["size"] == row["count"] * 2 * (2 if per_rank else 1) for row in run["rows"])


def test_json_file_keeps_the_table_and_plot_draws_it_with_others(tmp_path):
    pytest.importorskip("matplotlib")
    first = tmp_path / "first.json"
    r = gocl("perf", "reduce_scatter", "-g", "2", *SWEEP, f"--json={first}")
    assert r.returncode == 0 and "# Avg bus bandwidth" in r.stdout, r.stdout + r.stderr
    assert perf.load_runs(first)[0]["collective"] == "reduce_scatter"
    png = tmp_path / "busbw.png"
    r = gocl("perf", "broadcast", "-g", "2", *SWEEP, "--plot", str(png), str(first))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"# plot: {png}" in r.stdout and "# Out of bounds values : 0 OK" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    only = tmp_path / "only.png"
    r = gocl("perf", "--plot", str(only), str(first))  # no collective: just the files
    assert r.returncode == 0 and only.read_bytes()[:4] == b"\x89PNG", r.stdout + r.stderr


def test_plot_without_matplotlib_names_the_install(tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    assert perf.main(["all_reduce", "-g", "2", "--plot", str(tmp_path / "x.png")]) == 2
    with pytest.raises(ImportError, match=r"pip install 'gocl\[plot\]'"):
        perf.plot([], tmp_path / "x.png")


def test_gocl_library_picks_the_library(tmp_path, monkeypatch):
    from gocl import _lib

    real = _lib.library_path()
    monkeypatch.setenv("GOCL_LIBRARY", str(tmp_path / "libother.so"))
    r = gocl("perf", "all_reduce", "-g", "2", "-e", "8")
    assert r.returncode == 2 and "GOCL_LIBRARY=" in r.stderr and "named libgocl.so" in r.stderr, r.stderr
    copy = tmp_path / "libgocl.so"
    copy.write_bytes(real.read_bytes())
    monkeypatch.setenv("GOCL_LIBRARY", str(copy))
    monkeypatch.setenv("LD_DEBUG", "libs")  # the loader says which file it opened
    r = gocl("perf", "all_reduce", "-g", "2", "-e", "8", "-n", "1", "-w", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"calling init: {copy}" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("args, message", [
    (["all_reduces"], "unknown collective all_reduces: use all_reduce"),
    (["all_reduce", "-d", "f32"], "-d (datatype) f32: use float"),
    (["all_reduce", "-o", "mean"], "-o (op) mean: use sum"),
    (["all_reduce", "-b", "1M", "-e", "1K"], "-e (maxbytes)"),
    (["broadcast", "-g", "2", "-r", "2"], "-r (root) 2: there are only 2 ranks"),
    (["all_reduce", "results.json"], "results files are drawn with --plot"),
])
def test_bad_input_names_the_argument(args, message):
    r = gocl("perf", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
