"""A small DeepSpeed job for tests/engines/test_hf.py, on CPU:

    ds_train.py {gocl,gloo} STAGE OUT

``deepspeed.init_distributed(dist_backend=...)`` as its users call it, then a
DeepSpeed engine (ZeRO STAGE, AdamW in torch: no compiled ops) training a
small MLP for 5 steps on each rank's own data. Rank 0 writes OUT (JSON): the
backend torch.distributed reports and each step's loss averaged over the
ranks.
"""

from __future__ import annotations

import json
import os
import sys

import deepspeed
import torch
import torch.distributed as dist


def main() -> None:
    backend, stage, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    deepspeed.init_distributed(dist_backend=backend)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}}}
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
    g = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for _ in range(5):
        x = torch.randn(4, 8, generator=g)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t) / dist.get_world_size())
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump({"backend": dist.get_backend(), "world": dist.get_world_size(), "losses": losses}, f)
    dist.destroy_process_group()
    os._exit(0)  # gloo's teardown can abort ("terminate called without an active exception") once its peer has left


if __name__ == "__main__":
    main()
