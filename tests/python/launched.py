"""Programs the launcher tests run as ranks (mpirun, srun, across hosts),
and what they print, parsed."""

from __future__ import annotations

import re
import textwrap

import pytest

# Communicator.from_env with no arguments: the launcher's world, checked.
RANK_PROGRAM = textwrap.dedent("""
    import os, sys, numpy as np, gocl
    with gocl.Communicator.from_env(timeout=60) as c:
        x = np.arange(1000, dtype=np.float32) * (c.rank + 1)
        c.all_reduce(x)
        want = np.arange(1000, dtype=np.float32) * sum(range(1, c.size + 1))
        assert np.array_equal(x, want), (c.rank, x[:4], want[:4])
        net = os.stat("/proc/self/ns/net").st_ino  # which host, where the hosts are namespaces
        print(f"OK {c.rank} of {c.size} local {os.environ.get('LOCAL_RANK', '-')} net {net}", flush=True)
""")

# DDP from dist.init_process_group(argv[1]) with no RANK or MASTER_ADDR:
# the scheduler's world; prints the all-reduced loss of each step.
TORCH_PROGRAM = textwrap.dedent("""\
    import os, sys
    import torch
    import torch.distributed as dist
    dist.init_process_group(sys.argv[1])  # no RANK, MASTER_ADDR: the scheduler's world
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    for step in range(5):
        x = torch.randn(16, 8, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        print(f"LOSS {dist.get_rank()} {step} {t.item()!r}", flush=True)
    dist.destroy_process_group()
    if sys.argv[1] == "gloo":
        # gloo's teardown can abort ("terminate called without an active
        # exception", SIGABRT) once its peer has left: seen in CI under mpirun.
        # gocl's own exit stays the normal one, so it is still tested.
        os._exit(0)
""")


def losses(out: str, ranks: int, steps: int = 5) -> dict[tuple[int, int], float]:
    """(rank, step) -> loss from TORCH_PROGRAM's output (launchers forward
    the ranks' lines interleaved, sometimes run together)."""
    got = {(int(a), int(b)): float(c) for a, b, c in re.findall(r"LOSS (\d+) (\d+) ([-+.\deE]+)", out)}
    if len(got) != ranks * steps:
        pytest.fail(f"{len(got)} losses, want {ranks} ranks x {steps} steps:\n{out}")
    return got
