"""How gocl's costs grow with the number of ranks (issue 42): processes on
one host, gocl beside torch's gloo, and in-process ranks for the control
plane.

    .venv/bin/python bench/scale.py                          # 8 .. 64 processes, 64 .. 1024 in-process
    .venv/bin/python bench/scale.py --procs 8,32,128 --inproc 256,1024 --markdown
    .venv/bin/python bench/scale.py --procs 64 --no-gloo

Processes: `gocl run -n N` starts N ranks; every rank waits for one wall-clock
start time (so the figure is the init, not the launcher's and Python's
imports on a loaded host), then inits (gocl: Communicator.from_env; gloo:
dist.init_process_group("gloo")) and reports, as the maximum over ranks:

  init      seconds from the common start to the communicator being usable
  first     the first all_reduce of 8 B (gloo: where it connects), ms
  8B        median of 100 all_reduces of 8 B after it, µs
  1MiB      median of 20 all_reduces of 1 MiB, ms
  fds, thr  open file descriptors and threads per rank after those calls
  rss       resident memory per rank, MiB (smaps_rollup: Rss)
  shm       shared memory per rank, MiB (smaps_rollup: Pss_Shmem: its share
            of the segments it maps)

In-process: one process makes N ranks with Communicator.local(N) (rendezvous,
root, mesh of in-process links) and destroys them: seconds and the RSS
growth, MiB.

Each configuration runs once (a scaling curve, not a race: run it again to
see the spread); ranks per core = N / CPUs, printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rollup() -> dict[str, int]:
    """/proc/self/smaps_rollup's fields, in KiB."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def worker(backend: str, out_dir: str) -> None:
    import numpy as np

    start = float(os.environ["SCALE_START_AT"])
    if backend == "gloo":
        import torch
        import torch.distributed as dist
    else:  # gocl: the full mesh (GOCL_RUNTIME_CONNECT=0), gocl-lazy: on first use (the default); run_procs sets it
        import gocl
    while time.time() < start:
        time.sleep(0.005)
    t0 = time.time()
    late = t0 - start  # imports that outlasted the common start: the others wait for this rank in init
    if backend == "gloo":
        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        small, big = torch.ones(2), torch.ones(1 << 18)

        def ar(x):
            dist.all_reduce(x)
    else:
        comm = gocl.Communicator.from_env(timeout=600)
        rank, size = comm.rank, comm.size
        small, big = np.ones(2, np.float32), np.ones(1 << 18, np.float32)

        def ar(x):
            comm.all_reduce(x)
    t_init = time.time() - t0
    t1 = time.perf_counter()
    ar(small)
    t_first = time.perf_counter() - t1
    lat = []
    for _ in range(100):
        t = time.perf_counter()
        ar(small)
        lat.append(time.perf_counter() - t)
    bw = []
    for _ in range(20):
        t = time.perf_counter()
        ar(big)
        bw.append(time.perf_counter() - t)
    r = rollup()
    row = {"rank": rank, "size": size, "init": t_init, "late": late, "first": t_first, "lat": sorted(lat)[50], "bw": sorted(bw)[10],
           "fds": len(os.listdir("/proc/self/fd")), "thr": len(os.listdir("/proc/self/task")),
           "rss": r.get("Rss", 0) / 1024, "shm": r.get("Pss_Shmem", 0) / 1024,
           "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(row, f)
    if backend == "gloo":
        dist.barrier()
        dist.destroy_process_group()
        os._exit(0)  # gloo's teardown can abort once its peers have left
    comm.barrier()
    comm.destroy()


def run_procs(backend: str, n: int) -> dict | None:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, SCALE_START_AT=str(time.time() + 3 + 0.12 * n), PYTHONUNBUFFERED="1")
        env["GOCL_RUNTIME_CONNECT"] = "1" if backend == "gocl-lazy" else "0"
        env.pop("GOCL_DEBUG", None)
        gocl_bin = os.path.join(os.path.dirname(sys.executable), "gocl")
        cmd = [gocl_bin, "run", "-n", str(n), "--", sys.executable, os.path.abspath(__file__), "--worker", backend, d]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        rows = []
        for f in os.listdir(d):
            with open(os.path.join(d, f)) as fh:
                rows.append(json.load(fh))
        if p.returncode != 0 or len(rows) != n:
            tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
            print(f"  {backend} N={n}: failed (exit {p.returncode}, {len(rows)} of {n} ranks reported): " + " | ".join(tail), flush=True)
            return None
    agg = {k: max(r[k] for r in rows) for k in ("init", "late", "first", "lat", "bw", "fds", "thr", "rss", "shm")}
    agg["shm_total"] = sum(r["shm"] for r in rows)
    return agg


def run_inproc(n: int, lazy: bool) -> dict:
    code = f"""
import time, resource, gocl
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2**20
r0 = rss()
t = time.perf_counter()
cs = gocl.Communicator.local({n})
dt = time.perf_counter() - t
r1 = rss()
for c in cs:
    c.destroy()
print(dt, r1 - r0)
"""
    env = dict(os.environ, GOCL_RUNTIME_CONNECT="1" if lazy else "0")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr).strip().splitlines()[-1:]}
    dt, mem = p.stdout.split()[-2:]
    return {"init": float(dt), "rss": float(mem)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", default="8,16,32,64", help="process counts (comma list)")
    ap.add_argument("--inproc", default="64,256,1024", help="in-process rank counts (comma list; empty: none)")
    ap.add_argument("--no-gloo", action="store_true", help="skip torch's gloo")
    ap.add_argument("--lazy", action="store_true", help="also gocl connecting on first use (GOCL_RUNTIME_CONNECT=1, the default): gocl-lazy; the gocl rows are the full mesh (0)")
    ap.add_argument("--gloo-max", type=int, default=64, help="largest N for gloo (a torch process holds ~150 MiB of its own)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    cpus = len(os.sched_getaffinity(0))
    print(f"# bench/scale.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpus} CPUs", flush=True)
    backends = ["gocl"] + (["gocl-lazy"] if args.lazy else []) + ([] if args.no_gloo else ["gloo"])
    hdr = ["N", "ranks/core", "backend", "init s", "first ms", "8B us", "1MiB ms", "fds", "threads", "RSS MiB", "shm MiB", "shm all GiB"]
    rows = []
    for n in [int(x) for x in args.procs.split(",") if x]:
        for b in backends:
            if b == "gloo" and n > args.gloo_max:
                continue
            a = run_procs(b, n)
            if a is None:
                continue
            row = [n, f"{n / cpus:g}", b, f"{a['init']:.2f}", f"{a['first'] * 1e3:.1f}", f"{a['lat'] * 1e6:.0f}",
                   f"{a['bw'] * 1e3:.2f}", a["fds"], a["thr"], f"{a['rss']:.0f}", f"{a['shm']:.1f}", f"{a['shm_total'] / 1024:.2f}"]
            rows.append(row)
            print("  " + "  ".join(f"{h} {v}" for h, v in zip(hdr, row)), flush=True)
    if args.markdown and rows:
        print("\n| " + " | ".join(hdr) + " |\n|" + "---:|" * len(hdr))
        for r in rows:
            print("| " + " | ".join(str(v) for v in r) + " |")
    inproc = [int(x) for x in args.inproc.split(",") if x]
    if inproc:
        print("\nin-process (Communicator.local(N)):" if not args.markdown else "\n| in-process N | connect | init s | RSS growth MiB |\n|---:|---:|---:|---:|")
        for n in inproc:
            for lazy in [False, True] if args.lazy else [False]:
                how = "on first use" if lazy else "at init"
                if not lazy and n > 1024:  # the mesh's N² in-process links: tens of GiB
                    print(f"| {n} | {how} | not run | |" if args.markdown else f"  N={n} ({how}): not run (N² links)", flush=True)
                    continue
                r = run_inproc(n, lazy)
                if "error" in r:
                    print(f"  N={n} ({how}): failed: {r['error']}")
                elif args.markdown:
                    print(f"| {n} | {how} | {r['init']:.2f} | {r['rss']:.0f} |", flush=True)
                else:
                    print(f"  N={n} ({how}): init {r['init']:.2f} s, RSS +{r['rss']:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
