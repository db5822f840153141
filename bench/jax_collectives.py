"""JAX's own psum / psum_scatter / all_gather over gocl's MPI ABI, side by side
with JAX's gloo, gocl.jax's FFI calls and gocl's numpy API.

    .venv/bin/python bench/jax_collectives.py                       # 2 processes, 8 B .. 64 MiB
    .venv/bin/python bench/jax_collectives.py -n 4 --colls psum --rounds 5 --markdown
    .venv/bin/python bench/jax_collectives.py --sizes 1M,32M --colls psum

Columns (each timed call jitted and waited for with block_until_ready, the
numpy one excepted):

  mpiabi   jax.lax.psum / psum_scatter / all_gather (tiled) under shard_map,
           JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi, MPITRAMPOLINE_LIB=gocl's MPI
           ABI library (what `gocl run` selects): JAX's own collectives over gocl
  gloo     the same jitted functions, JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo
  gocljax  gocl.jax.all_reduce / reduce_scatter / all_gather(tiled=True) in jit
           (the FFI custom calls) on each process's local array
  numpy    gocl's numpy API into preallocated arrays (Communicator.all_reduce,
           reduce_scatter, all_gather with out=): the transport without JAX
  ompi     with --ompi-lib LIB only: mpiabi's functions with MPITRAMPOLINE_LIB=LIB,
           an MPIwrapper over Open MPI patched as its JAX users do
           (MPI_Is_thread_main true, MPI_THREAD_MULTIPLE), ranks under mpirun

JAX's collectives implementation is fixed per process, so process groups of
N ranks each are started once, one after the other, and kept: group M
(mpiabi), group G (gloo, gocljax, numpy) and with --ompi-lib group O (ompi,
one mpirun). Each compiles and checks every case first, then waits on stdin
(group O: a FIFO per rank); the launcher (this script) then hands out one burst at a time, to one
group at a time (the others are blocked reading their commands, idle), and every
rank reports back before the next burst starts. For each (collective, size)
it runs --rounds rounds; each round runs one burst of every column, the
column order rotated by one each round, so a change of machine load hits all
columns alike. A burst is `iters` calls (the same on every rank, chosen from a
first estimate so the slowest column's burst takes about --burst-s; with
--per-column each column's own burst takes about that long); the
reported time is the median over rounds of rank 0's mean time per call.

Size is the bytes of the full buffer (float32): psum's input and output,
psum_scatter's input (each rank gets size/N), all_gather's output (each rank
gives size/N). Every result is checked against numpy in the compile pass and
again after the timed rounds (a wrong result is listed under the table; gocl's
fail the run, gloo's are only counted); group M also checks that gocl's MPI ABI library
is the MPI mapped into the process (so a silent fall-back would fail).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from _units import human, parse_bytes, print_table as print_rows  # bench/ is on sys.path: these run as scripts

SIZES = [8 * 8**k for k in range(6)] + [1 << k for k in range(20, 27)]  # 8 B .. 256 KiB, 1 .. 64 MiB
COLLS = ("psum", "psum_scatter", "all_gather")
GROUPS = {"M": ("mpiabi",), "G": ("gloo", "gocljax", "numpy"), "O": ("ompi",)}
COLUMNS = ("mpiabi", "gloo", "gocljax", "numpy", "ompi")


# ---------------------------------------------------------------- one rank
def worker(args) -> None:
    group = args.group
    if group == "O":  # started by mpirun: the ranks are Open MPI's
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_NUM_CPU_DEVICES"] = "1"
    import numpy as np

    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    jax.distributed.initialize(f"127.0.0.1:{os.environ['BENCH_JAX_PORT']}", num_processes=world, process_id=rank)
    impl = jax.config.jax_cpu_collectives_implementation
    assert impl == ("gloo" if group == "G" else "mpi"), (group, impl)
    mesh = jax.make_mesh((world,), ("i",))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.6.1
        from jax.experimental.shard_map import shard_map
    sm = lambda f: jax.jit(shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    lax_fns = {"psum": sm(lambda s: jax.lax.psum(s, "i")),
               "psum_scatter": sm(lambda s: jax.lax.psum_scatter(s, "i", tiled=True)),
               "all_gather": sm(lambda s: jax.lax.all_gather(s, "i", tiled=True))}
    if group == "G":
        import gocl
        import gocl.jax as gj

        gj.init(local_devices=1)
        comm = gocl.Communicator.from_env()
        ffi_fns = {"psum": jax.jit(lambda v: gj.all_reduce(v)),
                   "psum_scatter": jax.jit(lambda v: gj.reduce_scatter(v)),
                   "all_gather": jax.jit(lambda v: gj.all_gather(v, tiled=True))}
        np_fns = {"psum": lambda x, o: comm.all_reduce(x, out=o),
                  "psum_scatter": lambda x, o: comm.reduce_scatter(x, out=o),
                  "all_gather": lambda x, o: comm.all_gather(x, out=o)}
    dev = jax.local_devices()[0]
    sh = NamedSharding(mesh, P("i"))
    total = world * (world + 1) / 2

    def case(coll, size):
        """{column: (call, check)} for one collective and size."""
        e = max(world, size // 4) // world * world  # elements of the full buffer, N blocks
        if coll == "all_gather":
            local = np.full(e // world, rank + 1.0, np.float32)
            want = np.repeat(np.arange(1, world + 1, dtype=np.float32), e // world)
        else:
            local = np.full(e, rank + 1.0, np.float32)
            want = np.full(e if coll == "psum" else e // world, total, np.float32)
        out = {}
        f = lax_fns[coll]
        xg = jax.make_array_from_process_local_data(sh, local)
        lax_call = lambda f=f, x=xg: f(x).block_until_ready()
        lax_check = lambda f=f, x=xg: np.array_equal(np.asarray(f(x).addressable_shards[0].data), want)
        if group in ("M", "O"):
            out[GROUPS[group][0]] = (lax_call, lax_check)
        else:
            out["gloo"] = (lax_call, lax_check)
            g = ffi_fns[coll]
            xd = jax.device_put(local, dev)
            out["gocljax"] = (lambda g=g, x=xd: g(x).block_until_ready(),
                              lambda g=g, x=xd: np.array_equal(np.asarray(g(x)), want))
            h, o = np_fns[coll], np.empty(want.size, np.float32)

            def np_check(h=h, o=o):
                o.fill(0)
                h(local, o)
                return np.array_equal(o, want)
            out["numpy"] = (lambda h=h, o=o: h(local, o), np_check)
        return out

    todo = [(c, s) for c in args.colls for s in args.sizes]
    cases, bad = {}, []
    for c, s in todo:  # compile, run once and check every case, untimed
        cases[c, s] = case(c, s)
        for name, (_, check) in cases[c, s].items():
            if not check():
                bad.append(f"{name} {c} {human(s)}")
    if group in ("M", "O"):
        with open("/proc/self/maps") as m:
            maps = m.read()
        lib = "libgocl_mpiabi.so" if group == "M" else os.path.basename(os.environ["MPITRAMPOLINE_LIB"])
        assert lib in maps, f"{lib} is not mapped: JAX's collectives did not go over it"
    print(json.dumps({"ready": group, "rank": rank, "bad": bad}), flush=True)

    # Open MPI's mpirun does not pass stdin on to its ranks here: group O reads a FIFO per rank
    cmds = open(os.environ["BENCH_CMD_FIFO"] % rank) if group == "O" else sys.stdin
    for line in cmds:  # "coll size column iters" | "check" | "quit"
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "check":
            bad = [f"{name} {c} {human(s)}" for (c, s), cols in cases.items() for name, (_, check) in cols.items()
                   if not check()]
            print(json.dumps({"checked": group, "rank": rank, "bad": bad}), flush=True)
            continue
        coll, size, name, iters = cmd[0], int(cmd[1]), cmd[2], int(cmd[3])
        call = cases[coll, size][name][0]
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        dt = (time.perf_counter() - t0) / iters
        print(json.dumps({"t": dt, "rank": rank}), flush=True)
    if group == "O":  # Open MPI aborts on the MPI_Comm_free calls XLA makes after jaxlib's MPI_Finalize
        sys.stdout.flush()
        os._exit(0)
    if group == "G":
        comm.destroy()
        gj.shutdown()
    jax.distributed.shutdown()


# ---------------------------------------------------------------- launcher
class Group:
    def __init__(self, name: str, n: int, args, extra_env: dict[str, str]):
        from gocl.tools.launcher import free_port, rank_env

        port, jport = free_port(), free_port()
        secret = os.environ.get("GOCL_RENDEZVOUS_SECRET") or os.urandom(16).hex()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "-n", str(n),
               "--sizes", ",".join(map(str, args.sizes)), "--colls", ",".join(args.colls)]
        self.name = name
        self.procs = []
        self.n = n
        self.fifos = None
        if name == "O":  # one mpirun for all ranks, unbound as the other groups' processes; commands through FIFOs
            import tempfile

            d = tempfile.mkdtemp(prefix="jaxcoll-")
            for r in range(n):
                os.mkfifo(os.path.join(d, f"cmd-{r}"))
            env = {**os.environ, **extra_env, "BENCH_JAX_PORT": str(jport), "PYTHONUNBUFFERED": "1",
                   "BENCH_CMD_FIFO": os.path.join(d, "cmd-%d")}
            xs = [a for k in ("BENCH_JAX_PORT", "JAX_CPU_COLLECTIVES_IMPLEMENTATION", "MPITRAMPOLINE_LIB",
                              "PYTHONUNBUFFERED", "BENCH_CMD_FIFO") for a in ("-x", k)]
            self.procs.append(subprocess.Popen(["mpirun", "--allow-run-as-root", "--quiet", "--oversubscribe", "--bind-to", "none",
                                                "-n", str(n), *xs] + cmd, env=env, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, text=True))
            self.fifo_dir = d
            return
        for r in range(n):
            env = rank_env(r, n, "127.0.0.1", port, secret=secret)
            for k in ("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "MPITRAMPOLINE_LIB"):
                env.pop(k, None)
            env.update(extra_env, BENCH_JAX_PORT=str(jport))
            self.procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    def replies(self) -> list[dict]:
        if self.name == "O":
            return self._mpirun_replies()
        out = []
        for p in self.procs:
            while True:
                line = p.stdout.readline()
                if not line:
                    raise SystemExit(f"group {self.name}: a rank exited (code {p.wait()})")
                if line.startswith("{"):
                    out.append(json.loads(line))
                    break
                print(f"[{self.name}] {line.rstrip()}", file=sys.stderr)
        return out

    def _mpirun_replies(self) -> list[dict]:
        """n replies from mpirun's one pipe, where two ranks' lines can arrive run together."""
        out, buf, dec = [], "", json.JSONDecoder()
        while len(out) < self.n:
            line = self.procs[0].stdout.readline()
            if not line:
                raise SystemExit(f"group {self.name}: mpirun exited (code {self.procs[0].wait()})")
            buf += line.strip()
            while buf.startswith("{"):
                try:
                    obj, end = dec.raw_decode(buf)
                except json.JSONDecodeError:
                    break  # the rest of it is on a later line
                out.append(obj)
                buf = buf[end:].lstrip()
            if buf and not buf.startswith("{"):
                print(f"[{self.name}] {buf}", file=sys.stderr)
                buf = ""
        return out

    def send(self, msg: str) -> list[dict]:
        if self.name == "O":
            if self.fifos is None:  # the ranks open theirs once they are ready
                self.fifos = [open(os.path.join(self.fifo_dir, f"cmd-{r}"), "w") for r in range(self.n)]
            for f in self.fifos:
                f.write(msg + "\n")
                f.flush()
            return self.replies()
        for p in self.procs:
            p.stdin.write(msg + "\n")
            p.stdin.flush()
        return self.replies()

    def close(self) -> None:
        if self.name == "O":
            import shutil

            for f in self.fifos or []:
                f.write("quit\n")
                f.close()
            self.procs[0].wait()
            shutil.rmtree(self.fifo_dir, ignore_errors=True)
            return
        for p in self.procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.close()
            except BrokenPipeError:
                pass
        codes = [p.wait() for p in self.procs]
        if any(codes) and self.name != "O":
            raise SystemExit(f"group {self.name}: a rank failed (exit codes {codes})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=parse_bytes, default=0)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--sizes", type=lambda v: [parse_bytes(x) for x in v.split(",")],
                   help="these sizes instead (comma-separated, e.g. 1M,4M,16M)")
    p.add_argument("--colls", type=lambda v: v.split(","), default=list(COLLS), help="psum,psum_scatter,all_gather")
    p.add_argument("--columns", type=lambda v: v.split(","), default=list(COLUMNS),
                   help="which of mpiabi,gloo,gocljax,numpy to time (the groups are started regardless)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per case (median taken)")
    p.add_argument("--burst-s", type=float, default=0.05, help="target seconds of the slowest column's burst")
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--per-column", action="store_true",
                   help="size each column's burst to --burst-s on its own (steady state: fast columns run more calls); "
                        "default: one count for all columns, set by the slowest, so a fast column's mean includes its "
                        "first call after another group ran")
    p.add_argument("--ompi-lib", help="also time JAX's collectives over Open MPI through the MPI door: this "
                   "MPIwrapper libmpiwrapper.so (patched: MPI_Is_thread_main true, MPI_THREAD_MULTIPLE), under mpirun")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sizes is None:
        args.sizes = [s for s in SIZES if args.min_bytes <= s <= args.max_bytes]
    if args.worker:
        args.group = args.worker
        worker(args)
        return
    from gocl.tools.launcher import mpi_abi_path

    lib = mpi_abi_path()
    if not lib.is_file():
        raise SystemExit(f"gocl's MPI ABI library is missing ({lib}): make pylib")
    n = args.ranks
    envs = {"M": {"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi", "MPITRAMPOLINE_LIB": str(lib)},
            "G": {"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"}}
    if args.ompi_lib:
        envs["O"] = {"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi", "MPITRAMPOLINE_LIB": os.path.abspath(args.ompi_lib)}
    groups = {}
    wrong = []  # "column coll size (when, rank)": counted and shown, not fatal (gloo's are what issue 40 cites)
    for name, env in envs.items():  # start, compile and check: one group after the other
        g = groups[name] = Group(name, n, args, env)
        for r in g.replies():
            wrong += [f"{b} (first call, rank {r['rank']})" for b in r["bad"]]
    of = {col: g for g in groups.values() for col in GROUPS[g.name]}
    cols = [c for c in COLUMNS if c in args.columns and c in of]

    def burst(coll, size, col, iters) -> float:
        return next(r["t"] for r in of[col].send(f"{coll} {size} {col} {iters}") if r["rank"] == 0)  # rank 0's mean

    rows = []
    for coll in args.colls:
        for size in args.sizes:
            est = {c: burst(coll, size, c, 2) for c in cols}
            fit = lambda t: max(args.min_iters, min(args.max_iters, int(args.burst_s / t)))
            counts = {c: fit(est[c] if args.per_column else max(est.values())) for c in cols}
            iters = min(counts.values())
            times = {c: [] for c in cols}
            for r in range(args.rounds):
                k = r % len(cols)
                for c in cols[k:] + cols[:k]:
                    times[c].append(burst(coll, size, c, counts[c]))
            row = {"coll": coll, "size": size, "iters": iters, **{c: statistics.median(t) for c, t in times.items()},
                   "spread": {c: [min(t), max(t)] for c, t in times.items()}}
            rows.append(row)
            print(f"  {coll:>12} {human(size):>8} x{iters:<4}" + "".join(
                f" {c} {row[c] * 1e6:10.1f}" for c in cols) + ratios_text(row), file=sys.stderr, flush=True)
    wrong += [f"{b} (after the rounds, rank {r['rank']})" for g in groups.values() for r in g.send("check")
              for b in r["bad"]]
    for g in groups.values():
        g.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": n, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                       "host": platform.node(), "rows": rows, "wrong": wrong}, f, indent=1)
    print_table(rows, cols, args.markdown)
    print(f"\nwrong results: {len(wrong)}" + "".join(f"\n- {w}" for w in wrong))
    if any(not w.startswith("gloo ") for w in wrong):
        raise SystemExit("gocl gave wrong results")


def ratio(row, a, b) -> str:
    return f"{row[a] / row[b]:.2f}" if a in row and b in row else "-"


def ratios_text(row) -> str:
    return (f"  gloo/mpiabi {ratio(row, 'gloo', 'mpiabi')}  mpiabi/numpy {ratio(row, 'mpiabi', 'numpy')}"
            f"  gocljax/numpy {ratio(row, 'gocljax', 'numpy')}  ompi/mpiabi {ratio(row, 'ompi', 'mpiabi')}")


def print_table(rows, cols, markdown: bool) -> None:
    head = ["coll", "size"] + [f"{c} us" for c in cols] + ["gloo/mpiabi (goal >= 3)", "mpiabi/numpy (goal <= 1.3 from 1 MiB)",
                                                            "gocljax/numpy"] + \
        (["ompi/mpiabi (goal >= 1)"] if "ompi" in cols else []) + ["mpiabi range", "numpy range"]

    def rng(r, c):
        return f"{r['spread'][c][0] * 1e6:.0f}-{r['spread'][c][1] * 1e6:.0f}" if c in r["spread"] else "-"

    body = []
    for r in rows:
        g = ratio(r, "gloo", "mpiabi")
        m = ratio(r, "mpiabi", "numpy")
        gmark = "" if g == "-" else (" ok" if r["gloo"] / r["mpiabi"] >= 3 else " MISS")
        mmark = "" if m == "-" or r["size"] < (1 << 20) else (" ok" if r["mpiabi"] / r["numpy"] <= 1.3 else " MISS")
        body.append([r["coll"], human(r["size"])] + [f"{r[c] * 1e6:.1f}" for c in cols]
                    + [g + gmark, m + mmark, ratio(r, "gocljax", "numpy")]
                    + ([ratio(r, "ompi", "mpiabi") + (" ok" if r["ompi"] >= r["mpiabi"] else " MISS")] if "ompi" in cols else [])
                    + [rng(r, "mpiabi"), rng(r, "numpy")])
    print_rows(head, body, markdown, text_cols=2)


if __name__ == "__main__":
    main()
