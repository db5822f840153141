"""Data-parallel training of an MLP in plain JAX + Optax, one process per
rank: a Mesh over every process's devices, each process feeds its shard of
the global batch, and the jitted step's gradient all-reduce is XLA's own.

    gocl run -n 2 examples/jax_train.py [--steps 50]

The script names nothing of its launcher or its collectives. Under
`gocl run` JAX's cross-process CPU collectives run over gocl (gocl run sets
JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and MPITRAMPOLINE_LIB for its ranks);
under torchrun, srun or mpirun export those two yourself
(MPITRAMPOLINE_LIB=$(gocl mpi-abi)). JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo
runs the same program over JAX's gloo, with the same loss at every step.
Started alone (no RANK), it trains on one process.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def init_distributed() -> None:
    """jax.distributed from torchrun-style variables (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT: torchrun and `gocl run` set them), which JAX
    does not read itself. MASTER_PORT belongs to the launcher's own
    rendezvous, so JAX's coordinator listens one port above it unless
    JAX_COORDINATOR_ADDRESS says where."""
    env = os.environ
    if "RANK" not in env or int(env.get("WORLD_SIZE", "1")) == 1:
        return  # one process: nothing to join
    coordinator = env.get("JAX_COORDINATOR_ADDRESS") or \
        f"{env.get('MASTER_ADDR', '127.0.0.1')}:{int(env['MASTER_PORT']) + 1}"
    jax.distributed.initialize(coordinator, num_processes=int(env["WORLD_SIZE"]), process_id=int(env["RANK"]))


def init_params(key, sizes):
    params = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        params.append({"w": jax.random.normal(k, (m, n)) / np.sqrt(m), "b": jnp.zeros(n)})
    return params


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256, help="global batch, split over the processes")
    ap.add_argument("--width", type=int, default=128, help="hidden layers' width")
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    init_distributed()
    rank, world = jax.process_index(), jax.process_count()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must split evenly over {world} processes")

    # One mesh axis over every device of every process: parameters and
    # optimizer state replicated, the batch split along "data".
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, batch_sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    # The same synthetic regression task on every process (same seed).
    rng = np.random.default_rng(0)
    X = rng.normal(size=(16 * args.batch, 16)).astype(np.float32)
    Y = np.sin(X @ rng.normal(size=(16, 4))).astype(np.float32)
    per = args.batch // world

    optimizer = optax.adam(args.lr)
    sizes = [X.shape[1], args.width, args.width, Y.shape[1]]
    params = jax.jit(lambda key: init_params(key, sizes), out_shardings=replicated)(jax.random.PRNGKey(0))
    opt_state = jax.jit(optimizer.init, out_shardings=replicated)(params)

    @jax.jit
    def train_step(params, opt_state, x, y):
        # x, y are sharded over the processes and params replicated: XLA
        # all-reduces the gradients (and the loss) across them.
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for step in range(args.steps):
        start = (step * args.batch) % len(X)
        mine = slice(start + rank * per, start + (rank + 1) * per)  # this process's shard of the global batch
        x = jax.make_array_from_process_local_data(batch_sharded, X[mine])
        y = jax.make_array_from_process_local_data(batch_sharded, Y[mine])
        params, opt_state, loss = train_step(params, opt_state, x, y)
        # Every process waits for its step's loss, rank 0 prints it: a
        # process that ran ahead would exit with steps still queued (JAX
        # dispatches asynchronously) and its MPI finalized under them.
        loss = float(loss)
        if rank == 0:
            print(f"step {step:4d}  loss {loss:.9g}", flush=True)

    if rank == 0:
        n = sum(p.size for p in jax.tree_util.tree_leaves(params))
        print(f"trained {n} parameters on {world} process(es), {len(jax.devices())} device(s)", flush=True)


if __name__ == "__main__":
    main()
