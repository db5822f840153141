"""What the torch benchmarks share: each rank joins a gocl world with a gloo
group beside it (the anchor, and the control channel), and the launcher
starts n ranks of a script and reads rank 0's JSON rows."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterator


def init_groups():
    """One torch thread, the world over gocl and a gloo group of the same
    ranks. Returns rank, world size, {"gocl": group, "gloo": group}."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gocl")
    groups = {"gocl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    return dist.get_rank(), dist.get_world_size(), groups


def launch(script: str, n: int, worker_args: list[str]) -> Iterator[dict]:
    """Run `script --worker worker_args` as n local ranks; yield rank 0's JSON
    rows (other lines go to stderr); SystemExit if a rank fails."""
    from gocl.tools.launcher import free_port, rank_env

    port = free_port()
    cmd = [sys.executable, script, "--worker", *worker_args]
    procs = [subprocess.Popen(cmd, env=rank_env(r, n, "127.0.0.1", port), stdout=subprocess.PIPE if r == 0 else
                              subprocess.DEVNULL, text=True) for r in range(n)]
    for line in procs[0].stdout:
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)
        elif line:
            print(line, file=sys.stderr)
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"{n} ranks: a rank failed (exit codes {codes})")
