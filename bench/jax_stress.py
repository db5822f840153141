"""psum_scatter stress on a 2x2 mesh (4 processes), gocl's MPI ABI vs JAX's gloo.

    make bench-jax-stress            # or: .venv/bin/python bench/jax_stress.py [--calls 1000] [--rounds 2]

Each run is `gocl run -n 4` of this file in --rank mode: a 2x2 Mesh over the
4 processes' CPU devices and --calls jitted shard_map psum_scatter calls,
over the mesh's two axes in turn (sub-communicators), each result checked
on every rank against numpy. A wrong result is counted, not raised, so a
run reports them all. Runs alternate between the implementations
(JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi with gocl's MPI ABI, and gloo),
each round starting with the other one. gocl's metrics files show that
gocl carried the gocl runs' calls (and none of gloo's).

Writes bench/JAX_STRESS.md (--out): command, date, host, versions, and per
implementation the calls checked, the wrong results and the failed runs.
Why: a scientific-computing project reported gloo's psum_scatter returning
wrong results on a 2-D mesh in about 5% of executions (jaxlib 0.9.1);
issue 40 asks for the count here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPLS = ("gocl", "gloo")
M = 4096  # elements per rank and call


def rank_main(calls: int) -> int:
    """One of the 4 processes: calls checked psum_scatter calls, wrong ones counted."""
    import numpy as np

    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    jax.distributed.initialize(os.environ["JAX_STRESS_COORDINATOR"], num_processes=world, process_id=rank)
    assert world == 4 and len(jax.devices()) == 4, (world, jax.devices())
    impl = jax.config.jax_cpu_collectives_implementation
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    row, col = divmod(rank, 2)  # this process's device sits at (row, col)
    spec = P(("a", "b"))
    sh = NamedSharding(mesh, spec)
    fns = {ax: jax.jit(shard_map(lambda v, ax=ax: jax.lax.psum_scatter(v, ax, scatter_dimension=1, tiled=True),
                                 mesh=mesh, in_specs=spec, out_specs=spec))
           for ax in ("a", "b")}
    wrong, first = 0, ""
    for i in range(calls):
        ax = "ab"[i % 2]
        members = [col, 2 + col] if ax == "a" else [2 * row, 2 * row + 1]
        mine = members.index(rank)
        data = [(np.arange(M, dtype=np.float32) % 97 + 7 * r + i % 13).reshape(1, M) for r in range(world)]
        got = np.asarray(fns[ax](jax.make_array_from_process_local_data(sh, data[rank])).addressable_shards[0].data)
        want = np.stack([data[m] for m in members]).sum(0)[:, mine * (M // 2):(mine + 1) * (M // 2)]
        if got.shape != want.shape or not np.array_equal(got, want):
            wrong += 1
            if not first:
                bad = int(np.sum(got != want)) if got.shape == want.shape else got.size
                first = f"call {i} over {ax}: {bad} of {want.size} elements differ"
    print(f"jax_stress: rank {rank} impl {impl} calls {calls} wrong {wrong}" + (f" first: {first}" if first else ""),
          flush=True)
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(impl: str, calls: int, timeout: float) -> dict:
    """One `gocl run -n 4` of the rank mode over impl: per-rank counts,
    gocl's ReduceScatter records, exit status and wall time."""
    with tempfile.TemporaryDirectory(prefix="jax-stress-") as tmp:
        drop = ("GOCL_METRICS", "RANK", "WORLD_SIZE", "MASTER_", "GOCL_MASTER_PORT", "JAX_", "MPITRAMPOLINE_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(JAX_PLATFORMS="cpu", JAX_STRESS_COORDINATOR=f"127.0.0.1:{free_port()}",
                   GOCL_METRICS_FILE=str(Path(tmp) / "m-%p-r%r.jsonl"),
                   # gocl run selects gocl's MPI ABI unless told otherwise
                   JAX_CPU_COLLECTIVES_IMPLEMENTATION="mpi" if impl == "gocl" else "gloo")
        cmd = [sys.executable, "-m", "gocl", "run", "-n", "4", "--", sys.executable, str(Path(__file__).resolve()),
               "--rank", "--calls", str(calls)]
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        wall = time.monotonic() - t0
        ranks = {}
        for m in re.finditer(r"jax_stress: rank (\d) impl (\w+) calls (\d+) wrong (\d+)(?: first: (.*))?$", out, re.M):
            ranks[int(m.group(1))] = {"impl": m.group(2), "calls": int(m.group(3)), "wrong": int(m.group(4)),
                                      "first": m.group(5) or ""}
        scatters = 0
        for f in Path(tmp).glob("m-*.jsonl"):
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("coll_perf", {}).get("coll") == "ReduceScatter":
                    scatters += 1
    want = "mpi" if impl == "gocl" else "gloo"
    ok = rc == 0 and len(ranks) == 4 and all(x["impl"] == want for x in ranks.values())
    error = "" if ok else next((l for l in reversed(out.splitlines()) if l.strip()), f"exit {rc}")[-300:]
    return {"impl": impl, "rc": rc, "ok": ok, "wall_s": wall, "ranks": ranks, "gocl_reduce_scatters": scatters,
            "error": error}


def host() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{socket.gethostname()}: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def revision() -> str:
    """The source tree's commit (and whether it had changes)."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="checked psum_scatter calls per run (each rank)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per implementation, alternated")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "JAX_STRESS.md")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank:
        return rank_main(args.calls)

    import jax

    runs = []
    for i in range(args.rounds):
        for impl in (IMPLS if i % 2 == 0 else IMPLS[::-1]):
            r = one_run(impl, args.calls, args.timeout)
            wrong = sum(x["wrong"] for x in r["ranks"].values())
            print(f"round {i + 1} {impl}: {'ok' if r['ok'] else 'FAILED'}, {wrong} wrong of "
                  f"{sum(x['calls'] for x in r['ranks'].values())} checked, {r['wall_s']:.1f} s, "
                  f"gocl ReduceScatter records {r['gocl_reduce_scatters']}" + (f": {r['error']}" if r["error"] else ""),
                  flush=True)
            runs.append(r)

    cmd = " ".join(["bench/jax_stress.py", *sys.argv[1:]])
    lines = [
        "# psum_scatter stress on a 2x2 mesh: gocl's MPI ABI vs JAX's gloo",
        "",
        f"`{cmd}` (`make bench-jax-stress`), {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}.",
        f"Host: {host()}. jax {jax.__version__}, Python {platform.python_version()}, gocl at {revision()}.",
        "",
        f"Each run: `gocl run -n 4`, a 2x2 `Mesh` over the 4 processes' CPU devices, {args.calls} jitted "
        "`shard_map` `psum_scatter` calls (f32, 4096 elements per rank, `scatter_dimension=1`, tiled) over the "
        "mesh's two axes in turn, each result checked on every rank against numpy; a wrong result is counted, "
        "not raised. Runs alternate between the implementations, each round starting with the other. "
        "gocl's runs set `JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi` (MPITRAMPOLINE_LIB = gocl's MPI ABI, as "
        "`gocl run` does); gloo's `JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo`. Evidence: gocl's metrics files "
        "(`GOCL_METRICS_FILE`) record every ReduceScatter gocl ran.",
        "",
        "| implementation | runs (failed) | checked results (calls x ranks) | wrong results | calls gocl recorded | wall per run (s) |",
        "|---|---|---|---|---|---|",
    ]
    for impl in IMPLS:
        mine = [r for r in runs if r["impl"] == impl]
        checked = sum(x["calls"] for r in mine for x in r["ranks"].values())
        wrong = sum(x["wrong"] for r in mine for x in r["ranks"].values())
        failed = sum(not r["ok"] for r in mine)
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in mine)
        lines.append(f"| {impl} | {len(mine)} ({failed}) | {checked} | {wrong} | "
                     f"{sum(r['gocl_reduce_scatters'] for r in mine)} | {walls} |")
    lines += ["", "Runs in order:", ""]
    for n, r in enumerate(runs, 1):
        per_rank = ", ".join(f"rank {k}: {v['wrong']}/{v['calls']}" + (f" ({v['first']})" if v["first"] else "")
                             for k, v in sorted(r["ranks"].items()))
        lines.append(f"{n}. {r['impl']}: exit {r['rc']}, {r['wall_s']:.1f} s; wrong/checked {per_rank or '-'}"
                     + (f"; failed: `{r['error']}`" if r["error"] else ""))
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(r["ok"] for r in runs if r["impl"] == "gocl") else 1


if __name__ == "__main__":
    sys.exit(main())
