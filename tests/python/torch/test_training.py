"""DistributedDataParallel and FSDP2 over gocl train to the same parameters
as full-batch SGD in one process."""

from __future__ import annotations

import pytest
from torchdist_util import group, torch  # noqa: I001

STEPS = 8
BATCH = 32


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4),
                               torch.nn.Tanh(), torch.nn.Linear(4, 1))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 1, generator=g)


def full_batch_reference():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model.state_dict()


def _max_err(state, ref):
    return max((state[k].detach() - v).abs().max().item() for k, v in ref.items())


@pytest.mark.slow
@pytest.mark.ranks(4)
def test_ddp_matches_full_batch_sgd():
    ref = full_batch_reference()
    with group() as (rank, world):
        x, y = data()
        b = BATCH // world
        xs, ys = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
        # two bucket sizes: one bucket, and one bucket per parameter (several
        # all_reduces in flight while backward runs)
        for bucket_mb in (25, 0.0001):
            model = tiny_model()
            if rank:  # DDP must broadcast rank 0's parameters at construction
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(1.0)
            ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
            for _ in range(STEPS):
                opt.zero_grad()
                torch.nn.functional.mse_loss(ddp(xs), ys).backward()
                opt.step()
            err = _max_err(ddp.module.state_dict(), ref)
            assert err < 1e-5, f"rank {rank}, bucket_cap_mb={bucket_mb}: DDP drifted from full-batch SGD by {err}"


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.5
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


@pytest.mark.slow
@pytest.mark.ranks(2)
def test_fsdp2_matches_full_batch_sgd():
    """FSDP2 (fully_shard) on CPU: all_gather_into_tensor, reduce_scatter_tensor
    (AVG / PREMUL_SUM) and all_reduce through DeviceMesh."""
    fully_shard = _fully_shard()
    from torch.distributed.device_mesh import init_device_mesh

    ref = full_batch_reference()
    with group() as (rank, world):
        mesh = init_device_mesh("cpu", (world,))
        model = tiny_model()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = data()
        b = BATCH // world
        for _ in range(STEPS):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b]).backward()
            opt.step()
        state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in model.state_dict().items()}
        err = _max_err(state, ref)
        assert err < 1e-5, f"rank {rank}: FSDP2 drifted from full-batch SGD by {err}"
