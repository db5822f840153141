"""How gocl's costs grow with the number of ranks (issue 42): processes on
one host, gocl beside torch's gloo, and in-process ranks for the control
plane.

    .venv/bin/python bench/scale.py                          # 8 .. 64 processes, 64 .. 1024 in-process
    .venv/bin/python bench/scale.py --procs 8,32,128 --inproc 256,1024 --markdown
    .venv/bin/python bench/scale.py --procs 64 --no-gloo
    .venv/bin/python bench/scale.py --procs "" --inproc "" --per-process 128:16,256:16   # gloo past 64: ranks as threads

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

Ranks as threads (--per-process N:T): N/T processes of T ranks each, every
backend alike (gloo: ProcessGroupGloo over a TCPStore; gocl: Communicator(uid,
rank, N)), so torch's gloo fits past 64 ranks; fds, threads and memory are then
per process.

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


def time_calls(ar, first, small, big) -> dict[str, float]:
    """The first all_reduce (of first), then the median of 100 of small
    and of 20 of big, in seconds."""
    t = time.perf_counter()
    ar(first)
    out = {"first": time.perf_counter() - t}
    for key, x, n in (("lat", small, 100), ("bw", big, 20)):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            ar(x)
            times.append(time.perf_counter() - t)
        out[key] = sorted(times)[n // 2]
    return out


def worker(backend: str, out_dir: str) -> None:
    import numpy as np

    start = float(os.environ["SCALE_START_AT"])
    if backend == "gloo":
        import torch
        import torch.distributed as dist
    else:  # gocl: the full mesh (GOCL_RUNTIME_CONNECT=0), gocl-lazy: on first use (the default); run_procs sets it
        import gocl

        gocl.Communicator  # noqa: B018  gocl imports its modules on first use: before the start, as gloo's are
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
    calls = time_calls(ar, small, small, big)
    r = rollup()
    row = {"rank": rank, "size": size, "init": t_init, "late": late, **calls,
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


def packed_worker(backend: str, out_dir: str, per: int) -> None:
    """`per` ranks as threads of this process (rank = process * per + thread),
    so that torch's gloo fits past 64 ranks: its ranks share one process's
    torch. gloo: ProcessGroupGloo over a TCPStore (what init_process_group
    makes, without its one-group-per-process default); gocl: Communicator(uid,
    rank, size), the unique id made by process 0 before the start and read from
    a file. Both calls leave the GIL while they connect. Writes one row per
    process: its ranks' largest times, the process's fds, threads and memory."""
    import threading

    import numpy as np

    start = float(os.environ["SCALE_START_AT"])
    proc, procs = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    size = procs * per
    uid_file = os.path.join(out_dir, "uid")
    if backend == "gloo":
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        master = dist.TCPStore(host, port, size, is_master=True, wait_for_workers=False) if proc == 0 else None
    else:
        import gocl

        gocl.Communicator  # noqa: B018  imported before the start, as gloo's modules are
        if proc == 0:
            with open(uid_file + ".tmp", "wb") as f:
                f.write(gocl.unique_id())
            os.rename(uid_file + ".tmp", uid_file)
        while not os.path.exists(uid_file):
            time.sleep(0.01)
        with open(uid_file, "rb") as f:
            uid = f.read()
    while time.time() < start:
        time.sleep(0.005)
    t0 = time.time()
    late = t0 - start
    rows: list = []
    errors: list = []

    def rank_main(rank: int) -> None:
        try:
            if backend == "gloo":
                store = master if master is not None and rank == 0 else dist.TCPStore(host, port, size, is_master=False)
                pg = dist.ProcessGroupGloo(store, rank, size, timedelta(seconds=600))
                one, small, big = torch.ones(2), torch.zeros(2), torch.zeros(1 << 18)

                def ar(x):
                    pg.allreduce([x]).wait()
            else:
                comm = gocl.Communicator(uid, rank, size, timeout=600)
                one, small, big = np.ones(2, np.float32), np.zeros(2, np.float32), np.zeros(1 << 18, np.float32)

                def ar(x):
                    comm.all_reduce(x)
            t_init = time.time() - t0
            calls = time_calls(ar, one, small, big)
            rows.append({"init": t_init, **calls, "ok": float(one[0]) == size and not small.any() and not big.any()})
            measured.wait()  # the process's fds, threads and memory are read with every rank alive
            measured.wait()
            ar(small)  # a barrier before teardown: no rank leaves while another still calls
            if backend == "gocl":
                comm.destroy()
        except BaseException as e:  # reported by the process, not lost in a thread
            errors.append(f"rank {rank}: {e!r}")
            measured.abort()

    measured = threading.Barrier(per + 1)
    ts = [threading.Thread(target=rank_main, args=(proc * per + i,)) for i in range(per)]
    for t in ts:
        t.start()
    try:
        measured.wait()
        r = rollup()
        fds, thr = len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))
        measured.wait()
    except threading.BrokenBarrierError:
        pass
    for t in ts:
        t.join()
    if errors:
        raise SystemExit("; ".join(errors))
    row = {k: max(x[k] for x in rows) for k in ("init", "first", "lat", "bw")}
    row.update(rank=proc, size=size, late=late, wrong=sum(not x["ok"] for x in rows),
               fds=fds, thr=thr, rss=r.get("Rss", 0) / 1024, shm=r.get("Pss_Shmem", 0) / 1024)
    with open(os.path.join(out_dir, f"{proc}.json"), "w") as f:
        json.dump(row, f)
    if backend == "gloo":
        os._exit(0)  # gloo's teardown can abort once its peers have left


def run_procs(backend: str, n: int, per: int = 1) -> dict | None:
    """N ranks: N processes, or N/per processes of `per` ranks (threads) each."""
    procs = n // per
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, SCALE_START_AT=str(time.time() + 3 + 0.12 * procs + 0.01 * n), PYTHONUNBUFFERED="1")
        env["GOCL_RUNTIME_CONNECT"] = "1" if backend == "gocl-lazy" else "0"
        env.pop("GOCL_DEBUG", None)
        gocl_bin = os.path.join(os.path.dirname(sys.executable), "gocl")
        mode = ["--worker", backend, d] if per == 1 else ["--packed", backend.replace("-lazy", ""), d, str(per)]
        cmd = [gocl_bin, "run", "-n", str(procs), "--", sys.executable, os.path.abspath(__file__), *mode]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        rows = []
        for f in os.listdir(d):
            if f.endswith(".json"):
                with open(os.path.join(d, f)) as fh:
                    rows.append(json.load(fh))
        if p.returncode != 0 or len(rows) != procs or any(r.get("wrong") for r in rows):
            tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
            print(f"  {backend} N={n} ({per} per process): failed (exit {p.returncode}, {len(rows)} of {procs} processes reported, "
                  f"{sum(r.get('wrong', 0) for r in rows)} wrong sums): " + " | ".join(tail), flush=True)
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
    ap.add_argument("--per-process", default="", help="N:T,... also N ranks as N/T processes of T threads each, every backend "
                    "(so gloo fits past 64 ranks); in those rows fds, threads, RSS and shm are per process")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--packed", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.packed:
        packed_worker(args.packed[0], args.packed[1], int(args.packed[2]))
        return
    cpus = len(os.sched_getaffinity(0))
    print(f"# bench/scale.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpus} CPUs", flush=True)
    backends = ["gocl"] + (["gocl-lazy"] if args.lazy else []) + ([] if args.no_gloo else ["gloo"])
    hdr = ["N", "ranks/core", "backend", "init s", "first ms", "8B us", "1MiB ms", "fds", "threads", "RSS MiB", "shm MiB", "shm all GiB"]
    rows = []
    runs = [(int(x), 1) for x in args.procs.split(",") if x]
    runs += [(int(x.split(":")[0]), int(x.split(":")[1])) for x in args.per_process.split(",") if x]
    if any(per < 1 or n % per for n, per in runs):
        ap.error(f"--per-process {args.per_process}: each N:T needs T >= 1 dividing N")
    for n, per in runs:
        for b in backends:
            if b == "gloo" and n > args.gloo_max and per == 1:
                continue
            a = run_procs(b, n, per)
            if a is None:
                continue
            row = [n, f"{n / cpus:g}", b if per == 1 else f"{b} ({per}/process)", f"{a['init']:.2f}", f"{a['first'] * 1e3:.1f}", f"{a['lat'] * 1e6:.0f}",
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
