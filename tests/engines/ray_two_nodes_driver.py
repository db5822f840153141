"""Driver of test_ray.py's two-node test: run on the head's network namespace
with the cluster's address; prints one JSON line (the results) last.

ray.util.collective over gocl between an actor on each node, then the same
TorchTrainer run as test_torch_trainer_matches_gloo on gloo and on gocl,
one worker per node (STRICT_SPREAD)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import ray
import ray.util.collective as col
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_ray  # noqa: E402  (its training loop and inputs)

import gocl.ray  # noqa: E402


@ray.remote(num_cpus=1)
class Member:
    def allreduce(self, rank: int) -> dict:
        col.init_collective_group(2, rank, backend="gocl", group_name="two-nodes")
        x = test_ray._inputs(rank)
        col.allreduce(x, group_name="two-nodes")
        xs = [np.zeros(test_ray.SHAPE, np.float32) for _ in range(2)]
        col.allgather(xs, test_ray._inputs(rank), group_name="two-nodes")
        col.destroy_collective_group("two-nodes")
        return {"node": ray.util.get_node_ip_address(), "allreduce": x.tolist(),
                "allgather": np.stack(xs).tolist()}


def main(address: str) -> None:
    gocl.ray.register()
    ray.init(address=address, runtime_env={"worker_process_setup_hook": "gocl.ray.register"})
    ray.cloudpickle.register_pickle_by_value(test_ray)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeManagerAddress"])
    members = [Member.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
               for n in nodes]
    out = {"nodes": [n["NodeManagerAddress"] for n in nodes],
           "collective": ray.get([m.allreduce.remote(r) for r, m in enumerate(members)])}
    for m in members:
        ray.kill(m)

    from ray.train import RunConfig, ScalingConfig  # noqa: PLC0415
    from ray.train.torch import TorchConfig, TorchTrainer  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as storage:  # one file system: both "nodes" are on this machine
        for backend in ("gloo", "gocl"):
            trainer = TorchTrainer(test_ray._train_loop, torch_config=TorchConfig(backend=backend),
                                   scaling_config=ScalingConfig(num_workers=2, placement_strategy="STRICT_SPREAD"),
                                   run_config=RunConfig(name=backend, storage_path=storage))
            out[backend] = trainer.fit().metrics
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
