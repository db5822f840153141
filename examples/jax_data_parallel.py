"""Data-parallel training in JAX with gocl: each rank trains on its shard of
the batch and the gradients are averaged with gocl.jax.all_reduce inside the
jitted step.

    gocl run -n 2 examples/jax_data_parallel.py [--steps 200]

Every rank ends with the same parameters (checked with all_gather), equal to
what full-batch training on one process reaches.

This is the explicit route (gocl.jax's FFI collectives, named in the step).
For an unchanged JAX program, whose jax.lax.psum or sharded jit keeps JAX's
own collectives and runs them over gocl's MPI ABI under `gocl run`, copy
examples/jax_train.py instead.
"""

from __future__ import annotations

import argparse

import numpy as np

import jax
import jax.numpy as jnp

import gocl.jax as gj


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


@jax.jit
def train_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.tree_util.tree_map(lambda g: gj.all_reduce(g, op="avg"), grads)  # the data-parallel part
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, gj.all_reduce(loss, op="avg")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256, help="global batch, split over the ranks")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()

    gj.init()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from gocl run / torchrun
    rank, world = gj.process_rank(), gj.world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must split evenly over {world} ranks")

    # The same synthetic regression task on every rank; each takes its shard.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.batch, 8)).astype(np.float32)
    Y = np.sin(X @ rng.normal(size=(8, 1))).astype(np.float32)
    shard = slice(rank * args.batch // world, (rank + 1) * args.batch // world)
    x, y = jnp.asarray(X[shard]), jnp.asarray(Y[shard])

    params = init_params(jax.random.PRNGKey(0), [8, 32, 32, 1])
    for step in range(args.steps + 1):
        params, loss = train_step(params, x, y, args.lr)
        if step % 50 == 0 and rank == 0:
            print(f"step {step:4d}  loss {float(loss):.5f}", flush=True)

    flat = jnp.concatenate([p.ravel() for p in jax.tree_util.tree_leaves(params)])
    everyone = np.asarray(gj.all_gather(flat))
    assert all(np.array_equal(everyone[0], e) for e in everyone), "ranks diverged"
    if rank == 0:
        print(f"{world} ranks agree on all {flat.size} parameters; final loss {float(loss):.5f}")
    gj.shutdown()


if __name__ == "__main__":
    main()
