"""A small, deterministic Hugging Face job for tests/engines/test_hf.py.

    hf_train.py {trainer,accelerate,refused} {gocl,gloo} OUT

Started as users start it (``gocl run -n 2``, ``torchrun``, ``accelerate
launch``), on CPU. The model is built from a config (a 2-layer GPT-2 of width
32: no download); the data are fixed token rows. The route that runs over
gocl: the script calls ``dist.init_process_group("gocl")`` itself first and
leaves the backend unset; Trainer and Accelerate then use the group that
exists. With ``gloo``, the script lets them initialise it themselves (their
own default on CPU).

- trainer: ``transformers.Trainer`` for STEPS steps; the loss of each step
  (its ``on_log`` at every step) and ``dist.get_backend()`` seen inside the
  trainer (a callback at ``on_train_begin``);
- accelerate: ``Accelerator`` with a plain loop; each step's loss averaged
  over the ranks (``accelerator.reduce``: an all_reduce through the backend);
- refused: ``TrainingArguments(ddp_backend="gocl")`` as a user would try it
  first: the error accelerate raises, recorded (the docs show it).

Rank 0 writes OUT (JSON): losses, backends seen, the world size.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

STEPS = 8
BATCH = 4
SEQ = 16
VOCAB = 64


def model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=SEQ, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def rows(n: int):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    return [{"input_ids": r, "labels": r} for r in ids]


def trainer(out: dict) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    losses, seen = [], {}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            seen["backend"] = dist.get_backend() if dist.is_initialized() else None
            seen["world"] = dist.get_world_size() if dist.is_initialized() else 1

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, per_device_train_batch_size=BATCH, max_steps=STEPS, logging_steps=1,
                                 learning_rate=1e-3, use_cpu=True, report_to=[], save_strategy="no", seed=0,
                                 data_seed=0, dataloader_num_workers=0, disable_tqdm=True)
        t = Trainer(model=model(), args=args, train_dataset=rows(STEPS * BATCH * 2), callbacks=[Record()])
        t.train()
    out.update(losses=losses, **seen)


def accelerate(out: dict) -> None:
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    acc = Accelerator(cpu=True)
    out["backend"] = dist.get_backend() if dist.is_initialized() else None
    out["world"] = acc.num_processes
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    data = DataLoader(rows(STEPS * BATCH * 2), batch_size=BATCH, shuffle=False,
                      collate_fn=lambda b: {k: torch.stack([x[k] for x in b]) for k in b[0]})
    m, opt, data = acc.prepare(m, opt, data)
    losses = []
    for step, batch in enumerate(data):
        if step == STEPS:
            break
        loss = m(**batch).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(float(acc.reduce(loss.detach(), reduction="mean")))
    out["losses"] = losses


def refused(out: dict) -> None:
    from transformers import TrainingArguments

    try:
        with tempfile.TemporaryDirectory() as tmp:
            args = TrainingArguments(output_dir=tmp, ddp_backend="gocl", use_cpu=True, report_to=[])
            args.device  # noqa: B018 - the accelerate state (and its check) is made here
        out["error"] = None
    except ValueError as e:
        out["error"] = str(e)


def main() -> None:
    mode, backend, path = sys.argv[1:4]
    if backend == "gocl" and mode != "refused":
        dist.init_process_group("gocl")  # torch loads gocl's backend by its entry point
    out: dict = {"mode": mode, "asked": backend}
    {"trainer": trainer, "accelerate": accelerate, "refused": refused}[mode](out)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(path, "w") as f:
            json.dump(out, f)
    if dist.is_initialized():
        dist.destroy_process_group()
    os._exit(0)  # gloo's teardown can abort ("terminate called without an active exception") once its peer has left


if __name__ == "__main__":
    main()
