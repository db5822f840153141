"""A small, deterministic PyTorch Lightning job for tests/engines/test_lightning.py.

Run it as a user would: ``python lightning_train.py --backend gocl --out DIR``.
Lightning's own launcher (``_SubprocessScriptLauncher``) starts the second
rank by running this script again with LOCAL_RANK=1, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT set; both ranks then call ``init_process_group(<backend>)``
through ``DDPStrategy(process_group_backend=<backend>)``.

Each rank writes ``DIR/rank<N>.json``: its loss at every training step (before
any reduction), the loss Lightning reduced over the ranks (``self.log(...,
sync_dist=True)``, an all_reduce through the backend), the validation loss,
the final parameters, what torch.distributed said about the default group,
and (rank 0) the exit codes of the ranks Lightning started.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.strategies import DDPStrategy


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.local_losses: list[float] = []
        self.synced_losses: list[float] = []
        self.val_losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.local_losses.append(loss.item())
        self.log("train_loss", loss, sync_dist=True, on_step=True, on_epoch=False)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.synced_losses.append(float(self.trainer.callback_metrics["train_loss"]))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.val_losses.append(float(self.trainer.callback_metrics["val_loss"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return TensorDataset(x, torch.sin(x @ w) + 0.1 * torch.randn(n, 1, generator=g))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--no-destroy", action="store_true",
                   help="leave the default group to interpreter exit (Lightning does not destroy a non-NCCL group)")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    L.seed_everything(1234, workers=True)

    model = Regressor()
    train = DataLoader(dataset(256, 7), batch_size=16, shuffle=True)
    val = DataLoader(dataset(64, 8), batch_size=16)
    trainer = L.Trainer(
        strategy=DDPStrategy(process_group_backend=args.backend, timeout=datetime.timedelta(seconds=90)),
        accelerator="cpu", devices=2, max_epochs=args.epochs, deterministic=True,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=args.out, log_every_n_steps=1,
    )
    t0 = time.monotonic()
    trainer.fit(model, train, val)
    fit_s = time.monotonic() - t0

    rank = trainer.global_rank
    result = {
        "backend": args.backend, "rank": rank, "world_size": trainer.world_size, "fit_s": fit_s,
        "local_losses": model.local_losses, "synced_losses": model.synced_losses, "val_losses": model.val_losses,
        "params": torch.cat([q.detach().reshape(-1) for q in model.parameters()]).tolist(),
        "initialized_after_fit": dist.is_initialized(),
        "group_backend": dist.get_backend() if dist.is_initialized() else None,
        "checkpoints": sorted(os.listdir(os.path.join(args.out, "checkpoints")))
        if os.path.isdir(os.path.join(args.out, "checkpoints")) else [],
    }
    comm = None
    if args.backend == "gocl":
        # The gocl communicator behind the default group: destroy_process_group must release it.
        world = dist.group.WORLD
        engine = getattr(world, "engine", None) or getattr(world._get_backend(torch.device("cpu")), "engine", None)
        comm = engine.comm
        result["gocl_comm_live_after_fit"] = bool(comm.handle)
    if not args.no_destroy and dist.is_initialized():
        dist.destroy_process_group()
    result["initialized_at_end"] = dist.is_initialized()
    if comm is not None:
        result["gocl_comm_live_at_end"] = bool(comm.handle)
    if rank == 0:
        # Lightning does not wait for the ranks it started; the test needs their exit codes.
        result["child_returncodes"] = [proc.wait(timeout=120) for proc in trainer.strategy.launcher.procs]
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
