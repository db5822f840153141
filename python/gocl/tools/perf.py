"""``gocl perf``: nccl-tests' benchmark for every gocl collective.

The timed loop is C (the ``gocl-perf`` executable next to libgocl.so, built
from cmd/gocl-perf/gocl_perf.c over the public C API), so what it measures is the
library, not Python. This module finds it and execs it; with ``--plot`` it
runs it as a child instead, then draws busbw against size with matplotlib.

* ``gocl perf all_reduce -b 8 -e 128M -f 2 -g 2``: two ranks, threads of one process.
* ``gocl run -n 4 -- gocl perf all_gather ...``: one rank per process (RANK,
  WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 prints.
* ``--json`` prints the run as JSON instead of the table; ``--json=FILE``
  writes it to FILE as well.
* ``--hosts N [--ranks-per-host K] [--rate 1gbit]``: across N hosts made on
  this machine (network namespaces on shaped links; root): gocl.tools.perf_hosts.
* ``--plot FILE.png [RESULTS.json ...]``: busbw against size for this run and
  for every results file given (a ``--json`` output, a list of them, or
  ``{"runs": [...]}`` as bench/compare.py writes); without a collective only
  the files are drawn.

``$GOCL_PERF`` overrides the executable's path. gocl-perf loads the
libgocl.so beside it (rpath $ORIGIN), or ``$GOCL_LIBRARY``'s when that is
set (its folder goes first on LD_LIBRARY_PATH, so the file must be named
libgocl.so). Nothing here loads libgocl.so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from .. import _locate

__all__ = ["binary_path", "load_runs", "main", "plot"]

EXIT_USAGE = 2
PLOT_INSTALL = "pip install 'gocl[plot]'  (or: pip install matplotlib)"


def binary_path() -> Path:
    """Where the gocl-perf executable is: $GOCL_PERF, else _native/ here."""
    return _locate.path("gocl-perf", "GOCL_PERF")


def _binary() -> Path:
    return _locate.executable("gocl-perf", "GOCL_PERF", "make pylib")


def _env() -> dict[str, str]:
    """gocl-perf's environment: its name for messages, and $GOCL_LIBRARY's library."""
    env = dict(os.environ, GOCL_PERF_PROG="gocl perf")
    lib = os.environ.get("GOCL_LIBRARY")
    if lib:
        path = Path(lib)
        if path.name != "libgocl.so" or not path.is_file():
            raise FileNotFoundError(
                f"gocl perf: GOCL_LIBRARY={lib}: gocl-perf links a file named libgocl.so; point GOCL_LIBRARY "
                "at an existing libgocl.so, or unset it to use the one installed with gocl")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(path.resolve().parent),
                                                                os.environ.get("LD_LIBRARY_PATH")]))
    return env


def load_runs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The runs in a results file: one gocl-perf --json object, a list of
    them, or an object with "runs" (bench/compare.py). Each run has "rows"
    of {"size", "out_of_place": {"busbw", ...}, ...}."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"gocl perf: cannot read results file {path}: {e}") from e
    runs = data.get("runs") if isinstance(data, dict) and "runs" in data else data
    runs = [runs] if isinstance(runs, dict) else runs
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("rows"), list) for r in runs):
        raise ValueError(f"gocl perf: {path} is not a gocl-perf results file (no \"rows\"): "
                         "give a --json output or bench/results.json")
    for r in runs:
        for row in r["rows"]:
            if not isinstance(row, dict) or "size" not in row or "out_of_place" not in row:
                raise ValueError(f"gocl perf: {path}: a row lacks \"size\" or \"out_of_place\": {row!r}")
    return runs


def _label(run: dict[str, Any]) -> str:
    if run.get("label"):
        return str(run["label"])
    return (f"{run.get('library', '?')} {run.get('collective', '?')}, {run.get('nranks', '?')} ranks, "
            f"{run.get('type', '?')}")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or an ImportError naming the install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"gocl perf --plot needs matplotlib: {PLOT_INSTALL}") from None
    return plt


def plot(runs: Sequence[dict[str, Any]], out: str | os.PathLike, title: str | None = None,
         per_link: float | None = None) -> Path:
    """Draws out-of-place busbw (solid) and in-place busbw (dotted, where
    measured) against size for each run, on one log-log axes; writes out.
    per_link (GB/s): busbw / that link's rate instead, 1.0 being the link."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    k = 1 / per_link if per_link else 1.0
    for run in runs:
        rows = [r for r in run["rows"] if r.get("out_of_place")]
        if not rows:
            continue
        line, = ax.plot([r["size"] for r in rows], [k * r["out_of_place"]["busbw"] for r in rows], marker="o",
                        markersize=3, label=_label(run))
        ip = [r for r in rows if r.get("in_place")]
        if ip:
            ax.plot([r["size"] for r in ip], [k * r["in_place"]["busbw"] for r in ip], linestyle=":",
                    color=line.get_color(), label=f"{_label(run)} (in place)")
    if per_link:
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--", label=f"the link ({per_link:.3g} GB/s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw / link" if per_link else "bus bandwidth (GB/s)")
    ax.set_title(title or "busbw against size (nccl-tests' definition)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _split(args: list[str]) -> tuple[list[str], str | None, list[str]]:
    """gocl-perf's arguments, the --plot target and the results files."""
    rest: list[str] = []
    target = None
    files: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--plot":
            if i + 1 >= len(args):
                raise ValueError("gocl perf: --plot needs a file name: --plot busbw.png")
            target = args[i + 1]
            i += 2
            continue
        if a.startswith("--plot="):
            target = a.split("=", 1)[1]
        elif a.endswith(".json") and not a.startswith("-"):
            files.append(a)
        else:
            rest.append(a)
        i += 1
    return rest, target, files


def main(argv: Sequence[str] | None = None) -> int:
    """``gocl perf COLLECTIVE [options]``; returns the exit status (or execs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rest, target, files = _split(args)
        if files and target is None:
            raise ValueError(f"gocl perf: {files[0]}: results files are drawn with --plot FILE.png")
        if target is not None:
            pyplot()  # fail before the benchmark runs
            runs = [r for f in files for r in load_runs(f)]
        exe = _binary()
        env = _env()
    except (ValueError, ImportError, FileNotFoundError) as e:
        print(e if str(e).startswith("gocl perf") else f"gocl perf: {e}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    if "-h" in rest or "--help" in rest:
        rc = subprocess.run([str(exe), "-h"], env=env, check=False).returncode
        print("gocl perf also takes --plot FILE.png [RESULTS.json ...]: busbw against size for this run and the "
              f"results files given (matplotlib: {PLOT_INSTALL}); and --hosts N [--ranks-per-host K] "
              "[--rate 1gbit] [--share-cpus]: the run across N hosts made on this machine, network namespaces "
              "on links shaped to the rate (needs root and iproute2)")
        return rc
    if target is None:
        os.execve(exe, [str(exe), *rest], env)
    if not rest:  # only the files
        plot(runs, target)
        print(f"gocl perf: wrote {target}")
        return 0
    if "--json" in rest:
        print("gocl perf: --plot keeps the table on stdout: use --json=FILE with it, not --json", file=sys.stderr)
        return EXIT_USAGE
    own = next((a.split("=", 1)[1] for a in rest if a.startswith("--json=")), None)
    with tempfile.TemporaryDirectory(prefix="gocl-perf-") as tmp:
        json_path = own or os.path.join(tmp, "run.json")
        cmd = [str(exe), *rest] + ([] if own else [f"--json={json_path}"])
        try:
            rc = subprocess.run(cmd, env=env, check=False).returncode
        except KeyboardInterrupt:
            return 130
        if os.environ.get("RANK", "0") != "0" or not os.path.exists(json_path):
            return rc  # rank 0 writes the results and draws them
        plot(load_runs(json_path) + runs, target)
    print(f"# plot: {target}")
    return rc
