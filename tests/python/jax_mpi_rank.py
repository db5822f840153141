"""One rank of test_jax_mpi_abi.py: an unchanged JAX program (it names
nothing of gocl) whose collectives go through JAX's MPI door, which
`gocl run` points at gocl's MPI ABI library (JAX_CPU_COLLECTIVES_IMPLEMENTATION
and MPITRAMPOLINE_LIB). Every collective's result is checked against numpy
on every rank; prints "jax_mpi_rank: OK" at the end.

JAX_MPI_TEST_PORT: jax.distributed's coordinator port (gocl's id exchange
holds MASTER_PORT). JAX_MPI_TEST_MESH=2x2: also a 2-D mesh (4 ranks), its
axis collectives over sub-communicators.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_enable_x64", True)  # float64 and complex128 travel as themselves
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
jax.distributed.initialize(f"127.0.0.1:{os.environ['JAX_MPI_TEST_PORT']}", num_processes=world, process_id=rank)
assert jax.config.jax_cpu_collectives_implementation == "mpi", jax.config.jax_cpu_collectives_implementation
assert jax.process_count() == world and len(jax.devices()) == world, jax.devices()

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

N = 8  # elements per rank


def local_input(r: int, dtype) -> np.ndarray:
    """Rank r's block: different on every rank, exact in every dtype used."""
    return ((np.arange(N) * (r + 1) + 3 * r) % 11 - 4).astype(dtype)


def run(mesh: Mesh, axis, fn, x_local: np.ndarray, out_spec=P("x")):
    """fn under shard_map over axis, jitted; returns this rank's output block."""
    spec = P(axis)
    sharding = NamedSharding(mesh, spec)
    x = jax.make_array_from_process_local_data(sharding, x_local)
    f = jax.jit(shard_map(fn, mesh=mesh, in_specs=spec, out_specs=out_spec))
    out = f(x)
    out.block_until_ready()
    return np.asarray(out.addressable_shards[0].data)


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    if not np.array_equal(got, want):
        raise AssertionError(f"{name} on rank {rank}: got {got}, want {want}")


mesh = Mesh(np.array(jax.devices()), ("x",))
ins = {dt: [local_input(r, dt) for r in range(world)] for dt in (np.float32, np.float64, np.int32, np.int64, np.int8, np.int16, np.uint8)}

for dt, blocks in ins.items():
    stack = np.stack(blocks)
    check(f"psum {dt.__name__}", run(mesh, "x", lambda v: jax.lax.psum(v, "x"), blocks[rank]), stack.sum(0).astype(dt))
    check(f"pmax {dt.__name__}", run(mesh, "x", lambda v: jax.lax.pmax(v, "x"), blocks[rank]), stack.max(0))
    check(f"pmin {dt.__name__}", run(mesh, "x", lambda v: jax.lax.pmin(v, "x"), blocks[rank]), stack.min(0))

f32 = ins[np.float32]
stack = np.stack(f32)
# all_gather (tiled): every rank gets every block, in rank order.
check("all_gather", run(mesh, "x", lambda v: jax.lax.all_gather(v, "x", tiled=True), f32[rank]),
      np.concatenate(f32))
# psum_scatter: rank r gets block r of the sum.
per = N // world
check("psum_scatter", run(mesh, "x", lambda v: jax.lax.psum_scatter(v, "x", tiled=True), f32[rank]),
      stack.sum(0)[rank * per:(rank + 1) * per])
# ppermute: a ring, rank r gets rank r-1's block.
perm = [(i, (i + 1) % world) for i in range(world)]
check("ppermute", run(mesh, "x", lambda v: jax.lax.ppermute(v, "x", perm), f32[rank]), f32[(rank - 1) % world])
# all_to_all: block j of rank r goes to rank j; rank r gets block r of every rank.
check("all_to_all", run(mesh, "x", lambda v: jax.lax.all_to_all(v, "x", 0, 0, tiled=True), f32[rank]),
      np.concatenate([f32[j][rank * per:(rank + 1) * per] for j in range(world)]))
# complex psum and bool (PRED travels as uint8) all_gather.
c = [(local_input(r, np.float32) + 1j * local_input(r + 1, np.float32)).astype(np.complex64) for r in range(world)]
check("psum complex64", run(mesh, "x", lambda v: jax.lax.psum(v, "x"), c[rank]), np.stack(c).sum(0))
b = [local_input(r, np.int32) > 0 for r in range(world)]
check("all_gather bool", run(mesh, "x", lambda v: jax.lax.all_gather(v, "x", tiled=True), b[rank]), np.concatenate(b))

# bf16: XLA's CPU runtime carries it (f16 it refuses before any MPI call).
h = [local_input(r, np.float32).astype(jnp.bfloat16) for r in range(world)]
check("psum bf16", run(mesh, "x", lambda v: jax.lax.psum(v, "x"), h[rank]),
      np.stack(h).astype(np.float32).sum(0).astype(jnp.bfloat16))
check("all_gather bf16", run(mesh, "x", lambda v: jax.lax.all_gather(v, "x", tiled=True), h[rank]), np.concatenate(h))

# A data-parallel training step of a 3-layer MLP, jitted whole over a
# batch sharded across the processes (XLA inserts the gradients'
# all-reduce), 3 steps: parameters equal a one-process run on the whole batch.
rng = np.random.default_rng(0)
sizes = [32, 64, 64, 8]
params0 = [(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
           for a, b in zip(sizes[:-1], sizes[1:])]
B = 16  # rows per rank
X = rng.standard_normal((B * world, sizes[0])).astype(np.float32)
Y = rng.standard_normal((B * world, sizes[-1])).astype(np.float32)


def loss(params, x, y):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = jnp.tanh(x)
    return jnp.mean((x - y) ** 2)


def sgd(params, grads):
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


rep = NamedSharding(mesh, P())
params = jax.tree_util.tree_map(lambda a: jax.make_array_from_process_local_data(rep, a), params0)
xs = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), X[rank * B:(rank + 1) * B])
ys = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), Y[rank * B:(rank + 1) * B])
step = jax.jit(lambda p, x, y: sgd(p, jax.grad(loss)(p, x, y)), out_shardings=rep)
ref_step = jax.jit(lambda p, x, y: sgd(p, jax.grad(loss)(p, x, y)))
ref = params0
for _ in range(3):
    params = step(params, xs, ys)
    ref = ref_step(ref, X, Y)
for (w, b), (rw, rb) in zip(params, ref):
    for got, want in ((w, rw), (b, rb)):
        got = np.asarray(got.addressable_shards[0].data)
        assert np.allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6), (rank, np.abs(got - np.asarray(want)).max())

if os.environ.get("JAX_MPI_TEST_MESH") == "2x2":
    assert world == 4, world
    mesh2 = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    row, col = divmod(rank, 2)  # this rank's device sits at (row, col)
    blocks = ins[np.float32]
    x_local = blocks[rank].reshape(1, N)
    for axis, members in (("a", [col, 2 + col]), ("b", [2 * row, 2 * row + 1])):
        got = run(mesh2, ("a", "b"), lambda v, ax=axis: jax.lax.psum(v, ax), x_local, out_spec=P(("a", "b")))
        check(f"2x2 psum over {axis}", got.reshape(N), np.stack([blocks[m] for m in members]).sum(0))

    # JAX_MPI_TEST_STRESS=N: N psum_scatter calls over each axis of the 2x2 mesh, each checked.
    calls = int(os.environ.get("JAX_MPI_TEST_STRESS", "0"))
    if calls:
        M = 4096
        fns = {ax: jax.jit(shard_map(lambda v, ax=ax: jax.lax.psum_scatter(v, ax, scatter_dimension=1, tiled=True),
                                     mesh=mesh2, in_specs=P(("a", "b")), out_specs=P(("a", "b"))))
               for ax in ("a", "b")}
        sh = NamedSharding(mesh2, P(("a", "b")))
        for i in range(calls):
            ax = "ab"[i % 2]
            members = [col, 2 + col] if ax == "a" else [2 * row, 2 * row + 1]
            mine = members.index(rank)
            data = [(np.arange(M, dtype=np.float32) % 97 + 7 * r + i % 13).reshape(1, M) for r in range(world)]
            got = np.asarray(fns[ax](jax.make_array_from_process_local_data(sh, data[rank])).addressable_shards[0].data)
            want = np.stack([data[m] for m in members]).sum(0)[:, mine * (M // 2):(mine + 1) * (M // 2)]
            check(f"psum_scatter over {ax} #{i}", got, want)
        print(f"jax_mpi_rank: {calls} psum_scatter calls checked", flush=True)

print(f"jax_mpi_rank: OK rank {rank} of {world}", flush=True)
