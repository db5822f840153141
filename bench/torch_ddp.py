"""What a torch training job pays for communication: gloo vs gocl, alternated.

    .venv/bin/python bench/torch_ddp.py                  # 2 and 4 local ranks
    .venv/bin/python bench/torch_ddp.py -n 2 --markdown --rounds 5

For each rank count the script starts that many local ranks (spawned
processes, torchrun's environment). Every rank has a default "gocl" group and
a "gloo" group over the same ranks, and measures, alternating the two
backends round by round so that machine load hits both alike:

* ``all_reduce``, ``reduce_scatter_tensor`` and ``all_gather_into_tensor``
  (float32; the size is each rank's buffer: all_reduce's tensor,
  reduce_scatter's input, all_gather's output), a burst of back-to-back calls
  per round;
* a DDP training step of a communication-heavy model (4.2M parameters: five
  1024x1024 layers plus a head, batch 16 per rank, 4 MB buckets) — forward,
  backward with DDP's bucketed asynchronous all_reduce, SGD step;
* an FSDP2 step (``fully_shard`` per layer on a DeviceMesh made from the
  group): all_gather_into_tensor before each layer, reduce_scatter_tensor of
  its gradients.

With ``--ceiling`` a third DDP model is timed in the same alternation: the
same DDP over the gocl group with a comm hook that hands each bucket back at
once (the bucketing, the copies and the autograd hooks, no communication).
Its row (``ddp_step_ceiling``) puts that step in the gocl column, so its
ratio is the most any backend could reach: the step if communication were
free. With ``--late`` another one holds every bucket until DDP hands over
its last one, then all_reduces them all over gocl (``ddp_step_late``): the
step without any overlap of communication and backward, for telling what
the overlap costs or saves. With ``--sync`` one more waits at every bucket
for every rank (an 8-byte all_reduce over gocl) and hands the bucket back
unreduced (``ddp_step_sync``): the step of a backend that synchronizes the
ranks as any backend must but moves no data, so the gap between it and the
ceiling is what the ranks' differing pace costs, and the gap between it and
gocl's step what moving the gradients costs. With ``--floor`` one more does
that wait plus the least memory work any allreduce of the bucket does on each
rank, with the other ranks' data already in this process (no transfer
between cores, no staging): its chunk summed with n-1 others, the other n-1
chunks copied in (``ddp_step_floor``). It runs in the hook, on the main
thread; a backend would run it beside backward, but with every core busy
computing (ranks >= cores) that wins little. So its ratio bounds what a
backend could reach on this host from above, tighter than the ceiling's.

Times are medians over rounds of rank 0's time; ratio = gloo / gocl (> 1:
gocl is faster). After training, the DDP and FSDP2 parameters of the two
backends are compared (same seeds and data: they must agree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _torchbench import init_groups, launch  # bench/ is on sys.path: these run as scripts
from _units import human

SIZES = [8, 64 << 10, 1 << 20, 16 << 20]
# The extra DDP models over gocl, in the order their rows are emitted:
# (command-line flag, model name, row suffix).
VARIANTS = (("late", "late", "_late"), ("sync", "sync", "_sync"), ("floor", "floor", "_floor"),
            ("ceiling", "free", "_ceiling"))
OPS = ("all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor")


def make_model(hidden: int = 1024, depth: int = 5):
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(hidden, 1))
    return torch.nn.Sequential(*layers)


# ---------------------------------------------------------------- one rank
def worker(args) -> None:
    import torch
    import torch.distributed as dist

    rank, world, groups = init_groups()
    ctrl = groups["gloo"]

    def emit(row):
        if rank == 0:
            print(json.dumps(row), flush=True)

    def agree(x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64)
        dist.broadcast(t, src=0, group=ctrl)
        return float(t.item())

    # collectives ------------------------------------------------------------
    def op_call(op, g, bufs):
        if op == "all_reduce":
            dist.all_reduce(bufs[0], group=g)
        elif op == "reduce_scatter_tensor":
            dist.reduce_scatter_tensor(bufs[1], bufs[0], group=g)
        else:
            dist.all_gather_into_tensor(bufs[0], bufs[1], group=g)

    for op in args.ops.split(",") if args.collectives else ():
        for size in [s for s in SIZES if args.min_bytes <= s <= args.max_bytes]:
            count = max(world, size // 4 // world * world)
            bufs = (torch.ones(count), torch.ones(count // world))

            def burst(name, iters):
                g = groups[name]
                dist.barrier(group=g)
                t0 = time.perf_counter()
                for _ in range(iters):
                    op_call(op, g, bufs)
                return (time.perf_counter() - t0) / iters

            est = max(burst("gocl", 2), burst("gloo", 2))
            iters = int(agree(max(1, min(args.max_iters, int(args.burst_s / max(est, 1e-7))))))
            times = {"gocl": [], "gloo": []}
            for r in range(args.rounds):
                for name in (("gocl", "gloo") if r % 2 == 0 else ("gloo", "gocl")):
                    times[name].append(burst(name, iters))
            emit({"kind": op, "size": count * 4, "iters": iters,
                  "gocl": statistics.median(times["gocl"]), "gloo": statistics.median(times["gloo"])})

    # DDP ---------------------------------------------------------------------
    from torch.nn.parallel import DistributedDataParallel as DDP

    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(args.batch, 1024, generator=g)
    y = torch.randn(args.batch, 1, generator=g)
    ddp = {n: DDP(make_model(), process_group=groups[n], bucket_cap_mb=4) for n in groups}
    hooks = {"ceiling": (None, no_comm_hook), "late": (LateHook(groups["gocl"]), LateHook.hook),  # timed in this order
             "sync": (groups["gocl"], sync_hook), "floor": (FloorHook(groups["gocl"]), FloorHook.hook)}
    names = {flag: name for flag, name, _ in VARIANTS}
    for flag, (state, hook) in hooks.items():
        if getattr(args, flag):
            ddp[names[flag]] = DDP(make_model(), process_group=groups["gocl"], bucket_cap_mb=4)
            ddp[names[flag]].register_comm_hook(state, hook)
    opts = {n: torch.optim.SGD(ddp[n].parameters(), lr=0.01) for n in ddp}

    def timed_step(models, optims):
        def step(name):  # one training step of models[name]: wall seconds, (main, other threads' CPU seconds)
            dist.barrier(group=groups.get(name, groups["gocl"]))  # "free", "late", "sync", "floor": DDP over gocl
            c0 = thread_cpu() if args.cpu else None
            t0 = time.perf_counter()
            optims[name].zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(models[name](x), y).backward()
            optims[name].step()
            t = time.perf_counter() - t0
            if c0 is None:
                return t, None
            c1 = thread_cpu()
            return t, (c1[0] - c0[0], c1[1] - c0[1])
        return step

    step_rows(emit, "ddp_step", timed_step(ddp, opts), args.steps, tuple(ddp))
    emit({"kind": "ddp_params", "max_diff": max_diff(ddp["gocl"].module, ddp["gloo"].module)})

    # FSDP2 -------------------------------------------------------------------
    if args.fsdp:
        try:
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            emit({"kind": "fsdp_skipped", "why": "no torch.distributed.fsdp.fully_shard"})
        else:
            # A process's first fully_shard imports torch._dynamo unless something
            # did before (here DDP's untimed warm-up steps do): seconds per process,
            # tens of seconds with several ranks per core. Reported, so a slow
            # 4-rank run is not taken for a hang.
            t0 = time.perf_counter()
            fs, fopt = {}, {}
            for n in groups:
                mesh = DeviceMesh.from_group(groups[n], device_type="cpu")
                m = make_model()
                for layer in m:
                    if isinstance(layer, torch.nn.Linear):
                        fully_shard(layer, mesh=mesh)
                fs[n] = fully_shard(m, mesh=mesh)
                fopt[n] = torch.optim.SGD(fs[n].parameters(), lr=0.01)
            emit({"kind": "fsdp2_setup", "seconds": round(time.perf_counter() - t0, 2)})

            step_rows(emit, "fsdp2_step", timed_step(fs, fopt), args.steps)
            local = {n: torch.cat([p.detach().to_local().reshape(-1) for p in fs[n].parameters()]) for n in groups}
            emit({"kind": "fsdp2_params", "max_diff": float((local["gocl"] - local["gloo"]).abs().max())})
    dist.barrier(group=ctrl)
    dist.destroy_process_group()


class LateHook:
    """A DDP comm hook's state that holds the buckets until the last one
    (bucket.is_last()), then all_reduces them all, averaged as DDP's own
    hook does."""

    def __init__(self, group):
        self.group, self.held = group, []

    @staticmethod
    def hook(state, bucket):
        import torch
        import torch.distributed as dist

        fut = torch.futures.Future()
        state.held.append((bucket.buffer().div_(state.group.size()), fut))
        if bucket.is_last():
            works = [(dist.all_reduce(b, group=state.group, async_op=True), b, f) for b, f in state.held]
            state.held = []
            for w, b, f in works:
                w.wait()
                f.set_result(b)
        return fut


def sync_hook(group, bucket):
    """A DDP comm hook that waits for every rank (an 8-byte all_reduce over
    group) and hands the bucket back unreduced."""
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    return dist.all_reduce(torch.zeros(2), group=group, async_op=True).get_future().then(lambda _: buf)


class FloorHook:
    """A DDP comm hook's state whose hook does, on each rank, the least
    memory work of an allreduce of the bucket (reduce-scatter then
    all-gather: this rank's chunk summed with n-1 others, the other n-1
    chunks copied in), reading stand-ins for the other ranks' data that
    are already in this process, then waits for every rank as sync_hook
    does. The bucket comes back with garbage in it, like sync_hook's."""

    def __init__(self, group):
        self.group, self.others = group, {}

    @staticmethod
    def hook(state, bucket):
        import torch
        import torch.distributed as dist

        buf = bucket.buffer()
        n, rank = state.group.size(), state.group.rank()
        c = -(-buf.numel() // n)  # chunk length, as tensor_split makes them at most
        other = state.others.get(buf.numel())
        if other is None:
            other = state.others[buf.numel()] = torch.rand(n * c, dtype=buf.dtype)
        chunks = buf.tensor_split(n)
        for j in range(n):
            if j != rank:
                chunks[rank].add_(other[j * c:j * c + chunks[rank].numel()])
        for j, chunk in enumerate(chunks):
            if j != rank:
                chunk.copy_(other[j * c:j * c + chunk.numel()])
        return dist.all_reduce(torch.zeros(2), group=state.group, async_op=True).get_future().then(lambda _: buf)


def no_comm_hook(state, bucket):
    """A DDP comm hook that communicates nothing: the bucket comes back as is."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def step_rows(emit, kind, step, steps, names=("gocl", "gloo")) -> None:
    """Time steps of each of names, alternated (the order flips each round);
    emit gocl against gloo, and the VARIANTS (if timed) against gloo in rows
    of their own."""
    for name in names:  # warm up: first steps build buckets and caches
        step(name)
        step(name)
    times = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for r in range(steps):
        for name in (names if r % 2 == 0 else names[::-1]):
            t, c = step(name)
            times[name].append(t)
            if c is not None:
                cpu[name].append(c)
    med = {n: statistics.median(ts) for n, ts in times.items()}
    cpu_ms = {n: [round(statistics.median(c[i] for c in cs) * 1e3, 2) for i in (0, 1)] for n, cs in cpu.items() if cs}
    row = {"kind": kind, "size": 0, "iters": steps, "gocl": med["gocl"], "gloo": med["gloo"]}
    for name in ("gocl", "gloo"):
        if name in cpu_ms:
            row[f"{name}_cpu_ms"] = cpu_ms[name]
    emit(row)
    for _, name, suffix in VARIANTS:
        if name in med:
            row = {"kind": kind + suffix, "size": 0, "iters": steps, "gocl": med[name], "gloo": med["gloo"]}
            if name in cpu_ms:
                row[f"{name}_cpu_ms"] = cpu_ms[name]
            emit(row)


def thread_cpu() -> tuple[float, float]:
    """CPU seconds so far of this process's main thread (the caller) and of
    all its other threads (the backends' communication threads): the
    measure that load on the machine hardly moves, where wall time does.
    The main thread's own clock is exact; the others' come from the
    scheduler's per-thread run time in /proc (Linux, ns; stat's clock ticks
    are 10 ms, too coarse for a step). A running thread's schedstat is only
    brought up to date at the scheduler's next tick, so the main thread,
    running while it reads, would be off by up to a tick each step."""
    me = os.getpid()
    main, other = time.thread_time(), 0.0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                other += int(f.read().split()[0]) / 1e9
        except OSError:  # the thread ended meanwhile
            continue
    return main, other


def max_diff(a, b) -> float:
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters()))


# ---------------------------------------------------------------- launcher
def run(n: int, args) -> list[dict]:
    worker_args = ["--ops", args.ops, "--min-bytes", str(args.min_bytes),
                   "--max-bytes", str(args.max_bytes), "--rounds", str(args.rounds), "--burst-s", str(args.burst_s),
                   "--max-iters", str(args.max_iters), "--steps", str(args.steps), "--batch", str(args.batch)]
    worker_args += ["--cpu"] if args.cpu else []
    worker_args += [f"--{flag}" for flag, _, _ in VARIANTS if getattr(args, flag)]
    worker_args += ([] if args.fsdp else ["--no-fsdp"]) + ([] if args.collectives else ["--no-collectives"])
    rows = []
    for row in launch(os.path.abspath(__file__), n, worker_args):
        row["ranks"] = n
        rows.append(row)
        print(f"  {n} ranks {describe(row)}", file=sys.stderr, flush=True)
        if args.markdown:
            print(table([row], head=False), flush=True)
    return rows


def describe(row) -> str:
    if "gocl" in row:
        what = row["kind"] + ("" if "_step" in row["kind"] else f" {human(row['size'])}")
        cpu = "".join(f"  {n} CPU ms main/comm {row[n + '_cpu_ms'][0]}/{row[n + '_cpu_ms'][1]}"
                      for n in ("gloo", "gocl", *(name for _, name, _ in VARIANTS)) if n + "_cpu_ms" in row)
        return (f"{what:34} gloo {row['gloo'] * 1e6:10.1f} us  gocl {row['gocl'] * 1e6:10.1f} us  "
                f"ratio {row['gloo'] / row['gocl']:5.2f}{cpu}")
    return json.dumps(row)


def table(rows: list[dict], head: bool = True) -> str:
    out = ["| ranks | what | gloo us | gocl us | gloo/gocl |", "|---:|---|---:|---:|---:|"] if head else []
    for r in rows:
        if "gocl" in r:
            what = r["kind"] + ("" if "_step" in r["kind"] else f" {human(r['size'])}")
            out.append(f"| {r['ranks']} | {what} | {r['gloo'] * 1e6:.1f} | {r['gocl'] * 1e6:.1f} | "
                       f"{r['gloo'] / r['gocl']:.2f} |")
        elif "max_diff" in r:
            out.append(f"| {r['ranks']} | {r['kind']}: largest gloo/gocl parameter difference | | | "
                       f"{r['max_diff']:.2e} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, action="append", help="rank counts (default: 2 and 4)")
    p.add_argument("--ops", default=",".join(OPS), help="collectives to time, comma-separated (default: all)")
    p.add_argument("--min-bytes", type=int, default=0, help="smallest collective size in bytes")
    p.add_argument("--max-bytes", type=int, default=16 << 20, help="largest collective size in bytes")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per size (median taken)")
    p.add_argument("--burst-s", type=float, default=0.03, help="target seconds per timed burst")
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--steps", type=int, default=10, help="alternating DDP / FSDP2 steps per backend")
    p.add_argument("--batch", type=int, default=16, help="samples per rank and step")
    p.add_argument("--no-fsdp", dest="fsdp", action="store_false", help="leave out the FSDP2 step")
    p.add_argument("--no-collectives", dest="collectives", action="store_false",
                   help="leave out the collectives (steps only)")
    p.add_argument("--cpu", action="store_true",
                   help="also report each step's CPU time per rank: main thread, other threads (communication)")
    p.add_argument("--ceiling", action="store_true",
                   help="also time DDP with a comm hook that communicates nothing (row ddp_step_ceiling: gocl "
                        "column = that step, ratio = the most any backend could reach)")
    p.add_argument("--late", action="store_true",
                   help="also time DDP with a comm hook that all_reduces every bucket (over gocl) once backward has "
                        "handed over the last one (row ddp_step_late: no overlap of communication and backward)")
    p.add_argument("--sync", action="store_true",
                   help="also time DDP with a comm hook that waits for every rank at each bucket (an 8-byte "
                        "all_reduce over gocl) and moves no data (row ddp_step_sync)")
    p.add_argument("--floor", action="store_true",
                   help="also time DDP with a comm hook that does the least memory work of an allreduce on data "
                        "already local, then waits for every rank as --sync does (row ddp_step_floor)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table at the end")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    if args.markdown:
        print(table([]), flush=True)
    for n in args.ranks or [2, 4]:
        run(n, args)


if __name__ == "__main__":
    main()
