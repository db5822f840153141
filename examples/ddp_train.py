"""Train a small model with DistributedDataParallel on CPU over gocl, then
the same run over gloo, and compare step times.

    gocl run -n 4 python examples/ddp_train.py                 # both backends
    torchrun --nproc-per-node 4 examples/ddp_train.py --backend gocl
    python examples/ddp_train.py --steps 50 --hidden 1024      # one rank works too

Every rank holds its own shard of a synthetic regression problem; DDP
averages the gradients, so the loss printed by rank 0 is the same for both
backends (same seeds), only the time differs. The mean step time excludes
the first --warmup steps.

The default model is what makes DDP's communication matter, as it does for a
real data-parallel job: 4.2M parameters (four 1024x1024 layers and a head,
16 MiB of gradients all-reduced every step in DDP's default 25 MB buckets,
overlapped with backward) against little compute per step (batch 16 per
rank). With a big batch on a small model the step is all compute and every
backend takes the same time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(width: int, hidden: int, depth: int) -> torch.nn.Module:
    torch.manual_seed(0)
    layers, d = [], width
    for _ in range(depth):
        layers += [torch.nn.Linear(d, hidden), torch.nn.ReLU()]
        d = hidden
    layers.append(torch.nn.Linear(d, 1))
    return torch.nn.Sequential(*layers)


def train(name: str, group, args, rank: int, world: int) -> tuple[list[float], list[float]]:
    model = DDP(make_model(args.width, args.hidden, args.depth), process_group=group,
                bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(1234 + rank)  # this rank's shard of the data
    true_w = torch.randn(args.width, 1, generator=torch.Generator().manual_seed(7))
    x = torch.randn(args.batch, args.width, generator=g)
    y = x @ true_w / args.width ** 0.5 + 0.01 * torch.randn(args.batch, 1, generator=g)
    losses, times = [], []
    for step in range(args.steps):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # gradients are all-reduced here, bucket by bucket
        opt.step()
        times.append(time.perf_counter() - t0)
        # the global mean loss (an extra small all_reduce, outside the timing)
        avg = loss.detach().clone()
        dist.all_reduce(avg, group=group)
        losses.append(avg.item() / world)
        if rank == 0:
            print(f"[{name}] step {step:3d}  loss {losses[-1]:.6f}  {times[-1] * 1e3:7.2f} ms", flush=True)
    return losses, times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gocl", "gloo", "both"], default="both")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the mean time")
    p.add_argument("--batch", type=int, default=16, help="samples per rank and step")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error("--warmup must be below --steps")

    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511")):
        os.environ.setdefault(k, v)  # `python examples/ddp_train.py` alone: one rank

    backends = ["gocl", "gloo"] if args.backend == "both" else [args.backend]
    dist.init_process_group(backends[0])
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {backends[0]: dist.group.WORLD}
    if len(backends) > 1:
        groups[backends[1]] = dist.new_group(backend=backends[1])
    if rank == 0:
        n = sum(p.numel() for p in make_model(args.width, args.hidden, args.depth).parameters())
        print(f"DDP on CPU: {world} ranks, {n:,} parameters ({n * 4 / 2**20:.1f} MiB of gradients per step), "
              f"batch {args.batch} per rank, {args.steps} steps", flush=True)

    results = {}
    for name in backends:
        losses, times = train(name, groups[name], args, rank, world)
        results[name] = (losses, statistics.mean(times[args.warmup:]))
        if rank == 0:
            print(f"[{name}] mean step time {results[name][1] * 1e3:.2f} ms (steps {args.warmup}..{args.steps - 1})",
                  flush=True)

    if rank == 0:
        print()
        for name in backends:
            print(f"{name:5s} mean step {results[name][1] * 1e3:8.2f} ms   final loss {results[name][0][-1]:.6f}")
        if len(backends) == 2:
            (la, ta), (lb, tb) = results["gocl"], results["gloo"]
            same = max(abs(a - b) for a, b in zip(la, lb)) <= 1e-5 * max(1.0, max(la))
            print(f"gloo/gocl step-time ratio: {tb / ta:.2f}x  (>1: gocl is faster)")
            print(f"losses of the two runs {'match' if same else 'DIFFER'}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
