"""One rank of test_jax_initialize.py: a JAX program that calls
gocl.jax.initialize() where it would call jax.distributed.initialize(), then
checks a jitted shard_map psum (and psum_scatter) against numpy on every rank;
prints "jax_initialize_rank: OK rank R of N".

JAX_INIT_ARGS: JSON of the arguments to pass (default none: the launcher's;
"process_id": "flip" passes WORLD_SIZE - 1 - RANK).
JAX_INIT_MODE=plain-flipped: jax.distributed.initialize itself instead, with
process_id the reverse of the launcher's rank (a permutation gocl's MPI
library must tolerate). An initialize that raises prints "jax_initialize_rank:
ERROR <type>: <message>" and exits 0, so the test reads every rank's error.
"""

import json
import os

import gocl.jax as gj  # before jax: jaxlib's MPItrampoline then finds gocl's library

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

mode = os.environ.get("JAX_INIT_MODE", "gocl")
try:
    if mode == "plain-flipped":
        rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        jax.config.update("jax_cpu_collectives_implementation", "mpi")
        jax.distributed.initialize(f"127.0.0.1:{os.environ['JAX_INIT_PORT']}", n, n - 1 - rank)
    else:
        args = json.loads(os.environ.get("JAX_INIT_ARGS", "{}"))
        if args.get("process_id") == "flip":  # every rank's the reverse of the launcher's
            args["process_id"] = int(os.environ["WORLD_SIZE"]) - 1 - int(os.environ["RANK"])
        gj.initialize(**args)
except Exception as e:  # noqa: BLE001
    print(f"jax_initialize_rank: ERROR {type(e).__name__}: {e}", flush=True)
    raise SystemExit(0)

assert jax.config.jax_cpu_collectives_implementation == "mpi", jax.config.jax_cpu_collectives_implementation
me, n = jax.process_index(), jax.process_count()
assert len(jax.devices()) == n, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("x",))
blocks = [(np.arange(8) * (r + 1) + 3 * r - 5).astype(np.float32) for r in range(n)]


def run(fn, out_spec=P("x")):
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), blocks[me])
    out = jax.jit(shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=out_spec))(x)
    return np.asarray(out.addressable_shards[0].data)


got = run(lambda v: jax.lax.psum(v, "x"))
assert np.array_equal(got, np.sum(blocks, axis=0)), (me, got)
per = 8 // n
got = run(lambda v: jax.lax.psum_scatter(v, "x", tiled=True))
assert np.array_equal(got, np.sum(blocks, axis=0)[me * per:(me + 1) * per]), (me, got)
print(f"jax_initialize_rank: OK rank {me} of {n}", flush=True)
