"""The ProcessGroup-subclass implementation (what torch 2.5 ... 2.13 get),
forced with GOCL_TORCH_IMPL=processgroup on a torch that would pick the
c10d Backend one: a cross-section of every other test file."""

from __future__ import annotations

import os

import pytest
import test_data_movement as dm
import test_misc_ops as misc
import test_reductions as red
from torchdist_util import Failures, dist, group, torch  # noqa: I001


def _default_is_processgroup() -> bool:
    from gocl.torch_backend import _frontends

    return _frontends.implementation() == "processgroup"


@pytest.mark.slow
@pytest.mark.ranks(3)
def test_processgroup_subclass_route():
    if _default_is_processgroup():
        pytest.skip("this torch already uses the ProcessGroup subclass (the rest of the suite covers it)")
    os.environ["GOCL_TORCH_IMPL"] = "processgroup"
    with group() as (rank, world):
        from gocl.torch_backend import ProcessGroupGocl

        assert isinstance(dist.group.WORLD, ProcessGroupGocl), type(dist.group.WORLD)
        assert dist.group.WORLD.group_name
        f = Failures(rank)
        red._allreduce_matrix(rank, world, f)
        red._reduce_and_reduce_scatter_cases(rank, world, f)
        dm._all_gather(rank, world, f)
        dm._all_to_all(rank, world, f)
        dm._gather_scatter(rank, world, f)
        misc._everything(rank, world, f)
        misc._functional(rank, world, f)  # C++ reaches the Python group through torch's trampoline
        sub = dist.new_group([0, 2])
        if rank in (0, 2):
            x = torch.full((3,), float(rank))
            dist.all_reduce(x, group=sub)
            f.check(bool((x == 2).all()), f"subgroup all_reduce {x}")
        # DDP through the C++ reducer, which reaches a Python ProcessGroup only
        # through torch's trampoline
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp(torch.full((2, 4), float(rank))).sum().backward()
        g = model.weight.grad.clone()
        dist.all_reduce(g, op=dist.ReduceOp.MAX)
        f.check(torch.allclose(g, model.weight.grad), "DDP gradients agree across ranks")
        f.done()
