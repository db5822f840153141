"""gocl.jax call identity (issue 36): a collective either gives every rank the
right result or fails on every rank naming its file and line. The patterns of
../shared/repro/jax (a jitted helper reused in a step, programs sharing a
helper from threads, rank-dependent tracing) at sizes where XLA:CPU runs a
program's thunks concurrently (65,536 floats and up), checked against numpy
for many steps; and the compile-time numbering itself, on one process."""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import gocl.jax as gj  # noqa: E402
from gocl import _jax_sites  # noqa: E402

BIG = 1 << 16  # floats: XLA:CPU runs independent thunks of this size concurrently


def _spin(v, k):
    """A rank-dependent amount of work before a collective's input is ready,
    so the ranks reach a program's collectives in different orders."""
    return lax.fori_loop(0, k, lambda i, u: jnp.sin(u) * 0.5 + 0.5, v)


@pytest.mark.ranks(2, timeout=300)
def test_identity_two_processes():
    """One pair of processes for every pattern (JAX's start-up is the slow part)."""
    _check_jitted_helper_reused_in_a_step()
    _check_tree_map_over_many_leaves()
    _check_threads_share_a_helper()
    _check_rank_dependent_tracing()
    _check_opposite_trace_orders_on_a_shared_line()
    _check_loops_branches_and_vmap_through_a_helper()


def _check_jitted_helper_reused_in_a_step():
    """nested_jit_many.py: one jitted helper called 8 times in a jitted step;
    JAX traces it once, so before the compile-time numbering all 8 custom
    calls had one site and paired wrongly (19 of 30 steps wrong)."""
    r, n = gj.process_rank(), gj.world_size()
    allreduce = jax.jit(lambda v: gj.all_reduce(v))

    @jax.jit
    def step(x, k0):
        first = allreduce(_spin(x, k0))  # rank 0 starts it late: the others overtake it
        return [first] + [allreduce(x * k) for k in range(1, 8)]

    x = jnp.full(BIG, r + 1.0, jnp.float32)
    s = n * (n + 1) / 2
    spin = jax.jit(_spin)
    want0 = sum(np.asarray(spin(jnp.full(BIG, q + 1.0, jnp.float32), 200 if q == 0 else 0)) for q in range(n))
    for it in range(30):
        got = [np.asarray(m) for m in step(x, 200 if r == 0 else 0)]
        np.testing.assert_allclose(got[0], want0, rtol=1e-6, err_msg=f"step {it} call 0")
        for k in range(1, 8):
            np.testing.assert_array_equal(got[k], np.full(BIG, s * k, np.float32), err_msg=f"step {it} call {k}")


def _check_tree_map_over_many_leaves():
    """A tree_map of all_reduces over 120 leaves (one source line for all),
    directly and through a jitted helper, leaves of mixed sizes."""
    r, n = gj.process_rank(), gj.world_size()
    sizes = [BIG if i % 10 == 0 else 1 + (i * 37) % 1000 for i in range(120)]
    tree = {f"w{i:03d}": jnp.full(sz, float(r + i), jnp.float32) for i, sz in enumerate(sizes)}
    helper = jax.jit(lambda g: gj.all_reduce(g, op="avg"))

    @jax.jit
    def direct(t):
        return jax.tree_util.tree_map(lambda g: gj.all_reduce(g), t)

    @jax.jit
    def via_helper(t):
        return jax.tree_util.tree_map(helper, t)

    for _ in range(5):
        a, b = direct(tree), via_helper(tree)
        for i, sz in enumerate(sizes):
            want = sum(float(q + i) for q in range(n))
            np.testing.assert_array_equal(np.asarray(a[f"w{i:03d}"]), np.full(sz, want, np.float32), err_msg=f"leaf {i}")
            np.testing.assert_allclose(np.asarray(b[f"w{i:03d}"]), np.full(sz, want / n, np.float32), err_msg=f"leaf {i}")


def _run_threads(progs, iters):
    """Each program in a loop on its own thread, started in a rank-dependent
    order with rank-dependent pauses; returns the errors."""
    r = gj.process_rank()
    errors = []

    def loop(name, k):
        f, x, want = progs[name]
        try:
            for i in range(iters):
                if (i + k + r) % 3 == 0:
                    time.sleep(0.002 * (k + r))
                np.testing.assert_array_equal(np.asarray(f(x)), want, err_msg=f"{name} iteration {i}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    names = list(progs) if r == 0 else list(reversed(progs))
    threads = [threading.Thread(target=loop, args=(name, k)) for k, name in enumerate(names)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=200)
    return errors


def _check_threads_share_a_helper():
    """threads_shared_jit_helper.py and threads_shared_py_helper.py: two
    programs, one thread each, share a jitted helper (traced once, inside
    whichever program was traced first) or a plain Python helper (traced on
    the threads, in a rank-dependent order)."""
    r, n = gj.process_rank(), gj.world_size()
    jitted = jax.jit(lambda g: gj.all_reduce(g, op="sum"))

    def plain(g):
        return gj.all_reduce(g)

    xp, xq = jnp.full(BIG, 1.0 + r, jnp.float32), jnp.full(BIG, 100.0 + r, jnp.float32)
    sp, sq = sum(1.0 + q for q in range(n)), sum(100.0 + q for q in range(n))
    progs = {
        "P jitted": (jax.jit(lambda x: jitted(x) + 0.0), xp, np.full(BIG, sp, np.float32)),
        "Q jitted": (jax.jit(lambda y: jitted(y) * 1.0), xq, np.full(BIG, sq, np.float32)),
        "P plain": (jax.jit(lambda x: plain(x) + 0.0), xp, np.full(BIG, sp, np.float32)),
        "Q plain": (jax.jit(lambda y: plain(y) * 1.0), xq, np.full(BIG, sq, np.float32)),
    }
    errors = _run_threads(progs, 20)
    assert not errors, errors


def _check_rank_dependent_tracing():
    """rank0_only_trace.py: rank 0 alone traces the step (eval_shape, .lower,
    make_jaxpr, with another shape or the same) and retraces it for a weak
    type; then every rank runs it: the right result at once, no timeout."""
    r, n = gj.process_rank(), gj.world_size()

    @jax.jit
    def step(g):
        return gj.all_reduce(g, op="avg")

    if r == 0:
        jax.eval_shape(step, jnp.zeros(2))
        step.lower(jnp.zeros(3))
        jax.make_jaxpr(step)(jnp.zeros(5))
        step.lower(jnp.zeros(BIG))
        jax.eval_shape(step, 1.0)  # a weak-typed scalar: another trace
    start = time.monotonic()
    for _ in range(3):
        y = step(jnp.full(BIG, float(r)))
        np.testing.assert_allclose(np.asarray(y), np.full(BIG, (n - 1) / 2))
    assert time.monotonic() - start < 30


def _check_opposite_trace_orders_on_a_shared_line():
    """traced_order_shared_helper.py: the ranks trace two programs in
    opposite orders, with the collective on one shared helper line."""
    r, n = gj.process_rank(), gj.world_size()

    def allreduce(g):
        return gj.all_reduce(g)

    P = jax.jit(lambda x: allreduce(x) + 0.0)
    Q = jax.jit(lambda y: allreduce(y) * 1.0)
    xp, xq = jnp.full(BIG, 1.0 + r), jnp.full(BIG, 100.0 + r)
    for f in ([P, Q] if r == 0 else [Q, P]):
        f.lower(xp)
    start = time.monotonic()
    np.testing.assert_array_equal(np.asarray(P(xp)), np.full(BIG, sum(1.0 + q for q in range(n)), np.float32))
    np.testing.assert_array_equal(np.asarray(Q(xq)), np.full(BIG, sum(100.0 + q for q in range(n)), np.float32))
    assert time.monotonic() - start < 30


def _check_loops_branches_and_vmap_through_a_helper():
    """A helper in a scan body (one call site, executed per iteration), in
    both branches of a cond, and under vmap, beside direct uses of it."""
    r, n = gj.process_rank(), gj.world_size()
    helper = jax.jit(lambda v: gj.all_reduce(v))

    @jax.jit
    def step(x, pick):
        ys = lax.scan(lambda c, k: (c + 1.0, helper(c * k)), x, jnp.arange(4.0))[1]
        br = lax.cond(pick > 0, lambda v: helper(v) * 2.0, lambda v: helper(v + 1.0), x)
        vm = jax.vmap(helper)(jnp.stack([x, 2 * x]))
        return ys, br, vm, helper(x)

    x = jnp.full(BIG // 4, float(r + 1), jnp.float32)
    s = n * (n + 1) / 2
    for it in range(6):
        pick = it % 2
        ys, br, vm, plain = (np.asarray(t) for t in step(x, pick))
        for k in range(4):  # carry c = x + k on every rank
            np.testing.assert_array_equal(ys[k], np.full(BIG // 4, (s + n * k) * k, np.float32))
        np.testing.assert_array_equal(br, np.full(BIG // 4, 2 * s if pick else s + n, np.float32))
        np.testing.assert_array_equal(vm, np.stack([np.full(BIG // 4, s), np.full(BIG // 4, 2 * s)]).astype(np.float32))
        np.testing.assert_array_equal(plain, np.full(BIG // 4, s, np.float32))


# ------------------------------------------------------------ one process


def _sites(compiled) -> list[int]:
    import re
    return [int(s) for s in re.findall(r"site = (-?\d+)", compiled.as_text())]


@pytest.mark.ranks(1)
def test_compiled_program_gives_every_call_its_own_site():
    gj.init(world_size=1)
    helper = jax.jit(lambda v: gj.all_reduce(v))

    def plain(v):
        return gj.all_reduce(v)

    def many(x):
        return [helper(x * k) for k in range(8)] + [plain(x), plain(x + 1)]

    x = jnp.zeros(8)
    a = _sites(jax.jit(many).lower(x).compile())
    assert len(a) == 10 and len(set(a)) == 10, a
    # Deterministic: the same program, another jit object, compiled again.
    assert _sites(jax.jit(many).lower(x).compile()) == a
    # A lowered module compiled twice keeps its sites (numbered once).
    lowered = jax.jit(many).lower(x)
    assert _sites(lowered.compile()) == _sites(lowered.compile()) == a
    # Two programs sharing a jitted helper, or a plain one, differ.
    p, q = jax.jit(lambda v: helper(v) + 0.0), jax.jit(lambda v: helper(v) * 1.0)
    pp, qp = jax.jit(lambda v: plain(v) + 0.0), jax.jit(lambda v: plain(v) * 1.0)
    sets = [set(_sites(f.lower(x).compile())) for f in (p, q, pp, qp)]
    assert all(len(s) == 1 for s in sets) and len(set().union(*sets)) == 4, sets
    # The names errors use: file, line, function, the program.
    name = gj._names[a[0]]
    assert "test_jax_identity.py:" in name and "in jit_many" in name, name


@pytest.mark.ranks(1)
def test_calls_of_one_line_numbered_per_trace():
    """A trace made on one rank only must not shift another trace's sites."""
    gj.init(world_size=1)

    def body(v):
        return [gj.all_reduce(v * k) for k in range(3)]

    x = jnp.zeros(4)
    a = _sites(jax.jit(body).lower(x).compile())
    jax.eval_shape(jax.jit(body), jnp.zeros(2))  # another trace in between
    jax.make_jaxpr(body)(x)
    b = _sites(jax.jit(body).lower(x).compile())
    assert a == b and len(set(a)) == 3


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.ranks(1)
def test_conda_layout_and_same_basename():
    """Under conda or a system Python, site-packages lies below the standard
    library's directory: its frames are user code, not internal ones (else
    every call collapsed onto one key). Two files with one basename, line
    and function, in different packages, make different sites."""
    import pathlib
    import tempfile

    gj.init(world_size=1)
    root = pathlib.Path(tempfile.mkdtemp())
    stdlib = root / "lib" / "python3.x"
    saved = _jax_sites._STDLIB
    _jax_sites._STDLIB = str(stdlib) + "/"
    packages = stdlib / "site-packages"
    sys.path.insert(0, str(packages))
    try:
        assert _jax_sites._internal(str(stdlib / "functools.py"))
        assert not _jax_sites._internal(str(packages / "userlib" / "m.py"))
        src = """
            import gocl.jax as gj
            def f(v):
                return gj.all_reduce(v)
            def g(v):
                return gj.all_reduce(v)
        """
        for pkg in ("pkga", "pkgb"):
            _write(packages, f"{pkg}/__init__.py", "")
            _write(packages, f"{pkg}/utils.py", src)
        importlib.invalidate_caches()
        ua, ub = importlib.import_module("pkga.utils"), importlib.import_module("pkgb.utils")
        x = jnp.zeros(4)
        sites = [set(_sites(jax.jit(fn).lower(x).compile())) for fn in (ua.f, ua.g, ub.f)]
        assert len(set().union(*sites)) == 3, sites
        names = [gj._names[next(iter(s))] for s in sites]
        assert "utils.py:4 in f" in names[0] and "utils.py:6 in g" in names[1], names
    finally:
        _jax_sites._STDLIB = saved
        sys.path.remove(str(packages))
