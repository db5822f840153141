"""A JAX job that loses a process: every survivor's next collective raises
naming it, then gocl.jax makes a smaller world in the same processes
(shutdown(abort=True), jax.clear_caches(), init again)."""

from __future__ import annotations

import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import gocl.jax as gj  # noqa: E402


@pytest.mark.ranks(3, timeout=240)
def test_survivors_make_a_smaller_world():
    os.environ["GOCL_TIMEOUT"] = "30"
    f = jax.jit(lambda v: gj.all_reduce(v))
    r = gj.process_rank()
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(8))), np.full(8, 3.0))
    if r == 1:
        os._exit(0)  # dies without a word
    with pytest.raises(Exception, match="rank 1"):
        for _ in range(100):
            f(jnp.ones(1000)).block_until_ready()
    gj.shutdown(abort=True)
    jax.clear_caches()  # the compiled programs name the old world
    # the survivors meet again through the environment, on another port
    os.environ.update(RANK=str(0 if r == 0 else 1), WORLD_SIZE="2", MASTER_PORT=str(int(os.environ["MASTER_PORT"]) + 1))
    gj.init()
    assert gj.world_size() == 2
    for i in range(5):
        got = f(jnp.full(1001, float(r + i)))
        np.testing.assert_array_equal(np.asarray(got), np.full(1001, 2.0 + 2 * i))  # old ranks 0 and 2
    gj.shutdown()
