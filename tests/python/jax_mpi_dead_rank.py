"""One rank of test_jax_mpi_abi.py's dead-peer test: after a first psum over
gocl's MPI ABI, rank 1 exits; rank 0's next jitted psum must fail, and its
error must name rank 1 (gocl's sentence, through MPI_Error_string)."""

import os
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
jax.distributed.initialize(f"127.0.0.1:{os.environ['JAX_MPI_TEST_PORT']}", num_processes=world, process_id=rank)
mesh = Mesh(np.array(jax.devices()), ("x",))
f = jax.jit(shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), np.ones(4, np.float32))
assert np.asarray(f(x).addressable_shards[0].data).tolist() == [2.0] * 4
print(f"rank {rank}: first psum ok", flush=True)
if rank == 1:
    os._exit(0)  # gone without a word (0: gocl run lets rank 0 finish)
time.sleep(0.5)
t = time.monotonic()
try:
    f(x).block_until_ready()
except Exception as e:  # XLA's error: "MPI error: <gocl's sentence>"
    msg = str(e)
    assert "rank 1" in msg and "gocl" in msg, msg
    print(f"rank 0: psum failed after {time.monotonic() - t:.1f} s naming rank 1: {msg[:300]}", flush=True)
    os._exit(0)  # skip jax.distributed's shutdown barrier with a dead peer
raise SystemExit("rank 0: a psum with rank 1 gone succeeded")
