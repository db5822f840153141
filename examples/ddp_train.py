"""Train a small model with DistributedDataParallel on CPU over gocl and
the same run over gloo, and compare step times.

    gocl run -n 4 python examples/ddp_train.py                 # both backends
    torchrun --nproc-per-node 4 examples/ddp_train.py --backend gocl
    python examples/ddp_train.py --steps 50 --hidden 1024      # one rank works too

Every rank holds its own shard of a synthetic regression problem; DDP
averages the gradients, so the loss printed by rank 0 is the same for both
backends (same seeds), only the time differs. The two backends train side by
side, --block steps at a time in turn (the order swapped every block), so a
slow phase of a shared machine, or torch warming up in the first steps of the
process, hits both alike. Each backend's step time is the median of its steps
after its first --warmup (a step that a shared machine stalled moves a mean,
not a median).

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


class Trainer:
    """One backend's DDP model, optimizer and data, trained a step at a time."""

    def __init__(self, name: str, group, args, rank: int, world: int):
        self.name, self.group, self.rank, self.world = name, group, rank, world
        self.model = DDP(make_model(args.width, args.hidden, args.depth), process_group=group,
                         bucket_cap_mb=args.bucket_mb)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr)
        g = torch.Generator().manual_seed(1234 + rank)  # this rank's shard of the data
        true_w = torch.randn(args.width, 1, generator=torch.Generator().manual_seed(7))
        self.x = torch.randn(args.batch, args.width, generator=g)
        self.y = self.x @ true_w / args.width ** 0.5 + 0.01 * torch.randn(args.batch, 1, generator=g)
        self.losses: list[float] = []
        self.times: list[float] = []

    def step(self) -> None:
        dist.barrier(group=self.group)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()  # gradients are all-reduced here, bucket by bucket
        self.opt.step()
        self.times.append(time.perf_counter() - t0)
        # the global mean loss (an extra small all_reduce, outside the timing)
        avg = loss.detach().clone()
        dist.all_reduce(avg, group=self.group)
        self.losses.append(avg.item() / self.world)
        if self.rank == 0:
            print(f"[{self.name}] step {len(self.times) - 1:3d}  loss {self.losses[-1]:.6f}  "
                  f"{self.times[-1] * 1e3:7.2f} ms", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gocl", "gloo", "both"], default="both")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="first steps of each backend left out of its step time")
    p.add_argument("--batch", type=int, default=16, help="samples per rank and step")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--block", type=int, default=5, help="steps one backend runs before the other takes its turn")
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error("--warmup must be below --steps")
    if args.block < 1:
        p.error("--block must be at least 1")

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

    trainers = {name: Trainer(name, groups[name], args, rank, world) for name in backends}
    order = list(backends)
    for first in range(0, args.steps, args.block):
        for name in order:
            for _ in range(min(args.block, args.steps - first)):
                trainers[name].step()
        order.reverse()
    results = {}
    for name in backends:
        t = trainers[name]
        results[name] = (t.losses, statistics.median(t.times[args.warmup:]))
        if rank == 0:
            print(f"[{name}] median step time {results[name][1] * 1e3:.2f} ms (steps {args.warmup}..{args.steps - 1})",
                  flush=True)

    if rank == 0:
        print()
        for name in backends:
            print(f"{name:5s} median step {results[name][1] * 1e3:8.2f} ms   final loss {results[name][0][-1]:.6f}")
        if len(backends) == 2:
            (la, ta), (lb, tb) = results["gocl"], results["gloo"]
            same = max(abs(a - b) for a, b in zip(la, lb)) <= 1e-5 * max(1.0, max(la))
            print(f"gloo/gocl step-time ratio: {tb / ta:.2f}x  (>1: gocl is faster)")
            print(f"losses of the two runs {'match' if same else 'DIFFER'}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
