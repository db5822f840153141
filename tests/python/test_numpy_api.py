"""gocl.Communicator on numpy arrays, checked against numpy references.

In-process ranks (Communicator.local, driven from one thread inside
gocl.group() or from one thread per rank) cover the dtype × op × ranks
matrix quickly; @pytest.mark.ranks tests run the same API across processes
(from_env, the socket transport), and the failure modes: dead ranks, fork.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gocl
from gocl import _lib

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 needs ml_dtypes (jax brings it)
    BF16 = None

NUMERIC = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64]
DTYPES = [np.dtype(t) for t in NUMERIC] + ([BF16] if BF16 is not None else [])
OPS = ["sum", "prod", "max", "min", "avg", "premul"]
RANKS = [1, 2, 3, 4]


# ------------------------------------------------------------------ helpers

@pytest.fixture(scope="module")
def clique():
    """clique(n): n in-process communicators, made once per module."""
    cache: dict[int, list] = {}

    def get(n: int):
        if n not in cache:
            cache[n] = gocl.Communicator.local(n)
        return cache[n]

    yield get
    for comms in cache.values():
        for c in comms:
            c.destroy()


def grouped(comms, fn):
    """fn(comm) for every comm, issued from this thread inside one group."""
    with gocl.group():
        results = [fn(c) for c in comms]
    return results


def threaded(comms, fn):
    """fn(comm) for every comm, each on its own thread; re-raises the first error."""
    with ThreadPoolExecutor(len(comms)) as pool:
        futures = [pool.submit(fn, c) for c in comms]
        return [f.result(timeout=120) for f in futures]


def is_float(dt) -> bool:
    return np.dtype(dt).kind == "f" or np.dtype(dt) == BF16


def make(dt, rank: int, size, op: str = "sum", seed: int = 0):
    """Small integer-valued data: sums and products stay exact in every dtype."""
    rng = np.random.default_rng(seed * 100 + rank)
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size).astype(bool)
    signed = dt.kind in "if" or dt == BF16
    lo, hi = (-3, 4) if signed else (0, 4)
    if op == "prod":
        lo, hi = (-2, 3) if signed else (0, 3)
    return rng.integers(lo, hi, size).astype(np.float64).astype(dt)


def reference(xs, op: str, dt, n: int, scalar=None):
    st = np.stack([x.astype(np.float64) for x in xs]) if np.dtype(dt) != np.bool_ else np.stack(xs)
    if np.dtype(dt) == np.bool_:
        return st.any(0) if op == "max" else st.all(0)
    if op == "sum":
        r = st.sum(0)
    elif op == "prod":
        r = st.prod(0)
    elif op == "max":
        r = st.max(0)
    elif op == "min":
        r = st.min(0)
    elif op == "avg":
        r = st.sum(0) / n if is_float(dt) else np.trunc(st.sum(0) / n)
    elif op == "premul":
        r = (st * scalar).sum(0)
    return r.astype(dt)


def gocl_op(op: str, dt):
    if op == "premul":
        return gocl.premul_sum(0.5 if is_float(dt) else 3)
    return op


def scalar_of(op: str, dt):
    return (0.5 if is_float(dt) else 3) if op == "premul" else None


def check_equal(got, want, dt, op="sum"):
    assert got.dtype == np.dtype(dt)
    assert got.shape == want.shape
    if is_float(dt) and op == "avg":
        tol = {2: 1e-2}.get(np.dtype(dt).itemsize, 1e-6)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got.astype(np.float64) if is_float(dt) else got, want.astype(np.float64)
                                      if is_float(dt) else want)


# ------------------------------------------------------- reductions matrix

@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_all_reduce_every_dtype_and_op(clique, n, dt):
    comms = clique(n)
    # 37: odd; 40001 elements is above the direct/ring threshold for every dtype.
    for size in (37, 40001):
        for op in OPS:
            xs = [make(dt, r, size, op) for r in range(n)]
            want = reference(xs, op, dt, n, scalar_of(op, dt))
            bufs = [x.copy() for x in xs]
            got = grouped(comms, lambda c: c.all_reduce(bufs[c.rank], op=gocl_op(op, dt)))
            for r in range(n):
                assert got[r] is bufs[r]  # in place: returns x
                check_equal(got[r], want, dt, op)


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("dt", [np.dtype(np.int32), np.dtype(np.float16), np.dtype(np.uint64)] +
                         ([BF16] if BF16 is not None else []), ids=str)
def test_reduce_and_reduce_scatter(clique, n, dt):
    comms = clique(n)
    for op in OPS:
        # reduce: the result lands in x at the root, others return None and keep x.
        xs = [make(dt, r, (3, 5), op, seed=1) for r in range(n)]
        want = reference(xs, op, dt, n, scalar_of(op, dt))
        for root in range(n):
            bufs = [x.copy() for x in xs]
            got = grouped(comms, lambda c: c.reduce(bufs[c.rank], op=gocl_op(op, dt), root=root))
            for r in range(n):
                if r == root:
                    assert got[r] is bufs[r]
                    check_equal(got[r], want, dt, op)
                else:
                    assert got[r] is None
                    np.testing.assert_array_equal(bufs[r], xs[r])
        # reduce_scatter: x is (world_size, *rest); rank i gets the reduced block i.
        xs = [make(dt, r, (n, 7), op, seed=2) for r in range(n)]
        want = reference(xs, op, dt, n, scalar_of(op, dt))
        got = grouped(comms, lambda c: c.reduce_scatter(xs[c.rank], op=gocl_op(op, dt)))
        for r in range(n):
            check_equal(got[r], want[r], dt, op)


@pytest.mark.parametrize("n", [2, 3])
def test_bool_max_min_and_sum_refused(clique, n):
    comms = clique(n)
    xs = [make(np.bool_, r, 29) for r in range(n)]
    for op in ("max", "min"):
        bufs = [x.copy() for x in xs]
        got = grouped(comms, lambda c: c.all_reduce(bufs[c.rank], op=op))
        for r in range(n):
            assert got[r].dtype == np.bool_
            np.testing.assert_array_equal(got[r], reference(xs, op, np.bool_, n))
    with pytest.raises(gocl.InvalidArgumentError, match=r"all_reduce on rank 0: op 'sum' on bool arrays"):
        comms[0].all_reduce(xs[0].copy())


# ---------------------------------------------------------- data movement

MOVED = [np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.uint8), np.dtype(np.bool_),
         np.dtype(np.int16), np.dtype(np.complex128), np.dtype([("a", np.int32), ("b", np.float64)])]
if BF16 is not None:
    MOVED.append(BF16)


def filled(dt, shape, base: int):
    """Distinct values of any dtype (structured ones too)."""
    count = int(np.prod(shape))
    raw = (np.arange(count) + 7 * base) % 120
    dt = np.dtype(dt)
    if dt.names:
        a = np.zeros(count, dt)
        a["a"], a["b"] = raw, raw / 2
        return a.reshape(shape)
    if dt == np.bool_:
        return (raw % 2 == 0).reshape(shape)
    return raw.astype(np.float64).astype(dt).reshape(shape)


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("dt", MOVED, ids=str)
def test_data_movement(clique, n, dt):
    comms = clique(n)
    shape = (3, 5)  # 15 elements: odd
    # broadcast from every root, in place
    for root in range(n):
        bufs = [filled(dt, shape, r) for r in range(n)]
        got = grouped(comms, lambda c: c.broadcast(bufs[c.rank], root=root))
        for r in range(n):
            assert got[r] is bufs[r]
            np.testing.assert_array_equal(bufs[r], filled(dt, shape, root))
    xs = [filled(dt, shape, r) for r in range(n)]
    stacked = np.stack(xs)
    # all_gather: (world_size, *x.shape)
    got = grouped(comms, lambda c: c.all_gather(xs[c.rank]))
    for r in range(n):
        assert got[r].shape == (n, *shape) and got[r].dtype == dt
        np.testing.assert_array_equal(got[r], stacked)
    # gather at every root: the stack there, None elsewhere
    for root in range(n):
        got = grouped(comms, lambda c: c.gather(xs[c.rank], root=root))
        for r in range(n):
            if r == root:
                np.testing.assert_array_equal(got[r], stacked)
            else:
                assert got[r] is None
    # scatter from every root: block i to rank i (others size their result from x)
    for root in range(n):
        src = [filled(dt, (n, *shape), 10 + r) for r in range(n)]
        got = grouped(comms, lambda c: c.scatter(src[c.rank], root=root))
        for r in range(n):
            assert got[r].shape == shape
            np.testing.assert_array_equal(got[r], src[root][r])
    # all_to_all: block j of rank i lands as block i on rank j
    src = [filled(dt, (2 * n, 3), 20 + r) for r in range(n)]
    got = grouped(comms, lambda c: c.all_to_all(src[c.rank]))
    for j in range(n):
        want = np.concatenate([src[i].reshape(n, 2, 3)[j] for i in range(n)])
        np.testing.assert_array_equal(got[j], want)
    # send/recv around the ring, both directions in one group
    recv_buf = [np.zeros_like(xs[r]) for r in range(n)]

    def ring(c):
        c.send(xs[c.rank], (c.rank + 1) % n)
        return c.recv(recv_buf[c.rank], (c.rank - 1) % n)

    got = grouped(comms, ring)
    for r in range(n):
        assert got[r] is recv_buf[r]
        np.testing.assert_array_equal(got[r], xs[(r - 1) % n])


@pytest.mark.parametrize("n", [2, 4])
def test_recv_from_any_source(clique, n):
    """recv(x) without a peer takes the first message from any rank and
    returns that rank; each sender's messages arrive in the order sent."""
    comms = clique(n)
    msgs = 3
    sent = {(r, i): filled(np.dtype(np.int16), (5,), 10 * r + i) for r in range(1, n) for i in range(msgs)}

    def run(c):
        if c.rank != 0:
            for i in range(msgs):
                c.send(sent[(c.rank, i)], 0)
            return None
        got = []
        for _ in range((n - 1) * msgs):
            x = np.empty(5, np.int16)
            src = c.recv(x)
            assert isinstance(src, int)
            got.append((src, x))
        return got

    got = threaded(comms, run)[0]
    assert sorted(src for src, _ in got) == sorted(r for r in range(1, n) for _ in range(msgs))
    for r in range(1, n):
        mine = [x for src, x in got if src == r]
        for i, x in enumerate(mine):  # per-sender order kept
            np.testing.assert_array_equal(x, sent[(r, i)])
    c = comms[0]
    with pytest.raises(gocl.InvalidUsageError, match=r"recv\(peer=None\) on rank 0: .*\(async_op=True\).*pass peer="):
        c.recv(np.empty(2), async_op=True)
    with pytest.raises(gocl.InvalidUsageError, match=r"recv\(peer=None\) on rank 0: .*\(gocl.group\(\)\)"):
        with gocl.group():
            c.recv(np.empty(2))
    # refused before any call: the communicator still works
    out = np.empty(3, np.int64)
    srcs = threaded(comms[:2], lambda c: c.recv(out) if c.rank == 0 else c.send(np.arange(3), 0))
    assert srcs[0] == 1 and list(out) == [0, 1, 2]


def test_recv_from_any_source_needs_another_rank():
    with gocl.Communicator.local(1)[0] as c:
        with pytest.raises(gocl.InvalidUsageError, match="no other rank to receive from"):
            c.recv(np.empty(1))


@pytest.mark.parametrize("n", [2, 4])
def test_zero_size_and_scalars(clique, n):
    comms = clique(n)
    empty = [np.zeros(0, np.float32) for _ in range(n)]
    got = grouped(comms, lambda c: c.all_reduce(empty[c.rank]))
    assert all(g.size == 0 for g in got)
    got = grouped(comms, lambda c: c.all_gather(np.zeros((0, 3), np.int32)))
    assert all(g.shape == (n, 0, 3) for g in got)
    scalars = [np.array(float(r), np.float64) for r in range(n)]  # 0-d arrays
    got = grouped(comms, lambda c: c.all_reduce(scalars[c.rank]))
    assert all(g.shape == () and g == sum(range(n)) for g in got)
    got = grouped(comms, lambda c: c.all_gather(np.float32(c.rank)))  # a numpy scalar is read-only input: fine
    for g in got:
        np.testing.assert_array_equal(g, np.arange(n, dtype=np.float32))


def test_threads_and_out_arguments(clique):
    n = 3
    comms = clique(n)

    def body(c):
        base = np.arange(20, dtype=np.float64).reshape(4, 5) + c.rank
        x = base.T  # not C-contiguous: read-only inputs are copied
        out = np.empty((5, 4))
        r = c.all_reduce(x, out=out)
        assert r is out
        np.testing.assert_array_equal(base, np.arange(20, dtype=np.float64).reshape(4, 5) + c.rank)  # x untouched
        flat = np.empty(n * 6, np.int32)  # any shape with the right size
        g = c.all_gather(np.full(6, c.rank, np.int32), out=flat)
        assert g is flat
        rs = np.empty(2, np.float32)
        c.reduce_scatter(np.ones(2 * n, np.float32) * (c.rank + 1), out=rs)  # flat blocks with out=
        ro = np.full(3, c.rank + 1.0)
        ro.flags.writeable = False  # only read: fine with out=, twice (the second call takes the fast path)
        sums = [c.all_reduce(ro, out=np.empty(3)) for _ in range(2)]
        np.testing.assert_array_equal(sums, np.full((2, 3), n * (n + 1) / 2))
        return out, flat, rs

    results = threaded(comms, body)
    want = sum(np.arange(20, dtype=np.float64).reshape(4, 5).T + r for r in range(n))
    for out, flat, rs in results:
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(flat, np.repeat(np.arange(n, dtype=np.int32), 6))
        np.testing.assert_array_equal(rs, np.full(2, sum(range(1, n + 1)), np.float32))


# ------------------------------------------------------------------ errors

def test_argument_errors_name_argument_and_rank(clique):
    c = clique(2)[1]  # rank 1: every check here fails before any communication

    def bad(pattern, fn):
        with pytest.raises(gocl.InvalidArgumentError, match=pattern) as e:
            fn()
        assert "rank 1" in str(e.value)
        return e.value

    # Every check below also guards all_reduce's fast path, which a dtype and
    # op once accepted (float64 "sum" here) take.
    threaded(clique(2), lambda k: k.all_reduce(np.ones(4)))
    assert (np.dtype(np.float64), "sum") in gocl.comm._FAST_REDUCE
    bad(r"all_reduce on rank 1: x has dtype int16, which gocl cannot reduce", lambda: c.all_reduce(np.ones(3, np.int16)))
    bad(r"x has dtype complex128", lambda: c.all_reduce(np.ones(3, np.complex128)))
    bad(r"all_gather on rank 1: x has dtype object", lambda: c.all_gather(np.array([1, "a"], dtype=object)))
    bad(r"all_reduce on rank 1: x is not C-contiguous", lambda: c.all_reduce(np.ones((4, 4))[:, 1]))
    ro = np.ones(4)
    ro.flags.writeable = False
    bad(r"all_reduce on rank 1: x is read-only", lambda: c.all_reduce(ro))
    bad(r"all_reduce on rank 1: out is read-only", lambda: c.all_reduce(np.ones(4), out=ro))
    bad(r"x must be a numpy array", lambda: c.all_reduce([1.0, 2.0]))
    bad(r"out has shape \(3,\) \(3 elements\) but x has 4 elements", lambda: c.all_reduce(np.ones(4), out=np.ones(3)))
    bad(r"out has dtype float32 but x has dtype float64",
        lambda: c.all_reduce(np.ones(4), out=np.ones(4, np.float32)))
    bad(r"all_gather on rank 1: out has shape \(4,\)", lambda: c.all_gather(np.ones(4), out=np.ones(4)))
    bad(r"reduce_scatter on rank 1: x has shape \(3,\) but must have shape \(world_size=2",
        lambda: c.reduce_scatter(np.ones(3)))
    bad(r"all_to_all on rank 1: x has shape \(3,\)", lambda: c.all_to_all(np.ones(3)))
    # The size rules (gocl._sizes) with out=: block counts name both sizes.
    bad(r"reduce_scatter on rank 1: x has 5 elements but must have world_size × out.size = 2 × 2 = 4",
        lambda: c.reduce_scatter(np.ones(5), out=np.empty(2)))
    bad(r"scatter on rank 1: x has 5 elements but must have world_size × out.size = 2 × 2 = 4",
        lambda: c.scatter(np.ones(5), root=1, out=np.empty(2)))
    bad(r"gather on rank 1: out has shape \(5,\) \(5 elements\) but the gathered result has 6 elements",
        lambda: c.gather(np.ones(3), root=1, out=np.empty(5)))
    bad(r"all_to_all on rank 1: out has shape \(6,\) \(6 elements\) but x has 4 elements",
        lambda: c.all_to_all(np.ones(4), out=np.empty(6)))
    bad(r"op 'mean' is not a reduction", lambda: c.all_reduce(np.ones(2), op="mean"))
    bad(r"scatter on rank 1: rank 1 is not the root: pass out=", lambda: c.scatter(None, root=0))
    bad(r"premul_sum scalar", lambda: c.all_reduce(np.ones(2), op=gocl.premul_sum([1, 2])))
    # Range checks come from gocl itself, with its sentence.
    e = bad(r"broadcast on rank 1: root 2 is out of range: pass a rank in \[0, 1\]",
            lambda: c.broadcast(np.ones(2), root=2))
    assert e.code == 4
    bad(r"root -1 is out of range", lambda: c.reduce(np.ones(2), root=-1))
    bad(r"peer 5 is out of range", lambda: c.send(np.ones(2), 5))
    # The communicator is still healthy: argument errors are local.
    assert c.async_error() is None


def test_async_handles(clique):
    n = 3
    comms = clique(n)

    def body(c):
        works = [c.all_reduce(np.full(1000, c.rank + i, np.float32), async_op=True) for i in range(5)]
        g = c.all_gather(np.full(3, c.rank, np.int64), async_op=True)
        # Arrays of a dropped handle stay alive until the work has run.
        c.broadcast(np.full(10_000, c.rank, np.float64), root=1, async_op=True)
        gc.collect()
        out = [w.wait() for w in works]
        assert all(w.is_completed() for w in works)
        gathered = g.wait(timeout=60)
        # A synchronous call waits for the queued ones first.
        s = c.all_reduce(np.ones(2, np.int32))
        return out, gathered, s

    for out, gathered, s in threaded(comms, body):
        for i, arr in enumerate(out):
            np.testing.assert_array_equal(arr, np.full(1000, sum(range(n)) + n * i, np.float32))
        np.testing.assert_array_equal(gathered, np.repeat(np.arange(n), 3).reshape(n, 3))
        np.testing.assert_array_equal(s, [n, n])
    for c in comms:
        assert c._pending == []  # everything retired, arrays released
    with pytest.raises(gocl.InvalidUsageError, match="async_op=True inside gocl.group"):
        with gocl.group():
            comms[0].all_reduce(np.ones(1), async_op=True)


def test_async_error_and_destroyed_comm():
    comms = gocl.Communicator.local(2)
    out = {}

    def body(c):
        try:
            if c.rank == 0:
                w = c.all_reduce(np.ones(4, np.float32), async_op=True)
                out[0] = w.wait()
            else:  # count 5 vs 4: gocl names both calls on both ranks
                out[1] = c.all_reduce(np.ones(5, np.float32))
        except gocl.GoclError as e:
            out[c.rank] = e

    threaded(comms, body)
    for r in range(2):
        assert isinstance(out[r], gocl.RemoteError), out[r]
        assert "ranks disagree on the call" in str(out[r]) and "count 5" in str(out[r])
    assert isinstance(comms[0].async_error(), gocl.RemoteError)
    for c in comms:
        c.abort()
    with pytest.raises(gocl.InvalidUsageError, match="all_reduce on rank 0: the communicator was aborted"):
        comms[0].all_reduce(np.ones(1))
    with gocl.Communicator.local(1)[0] as solo:
        assert solo.world_size == 1 and solo.rank == 0
        np.testing.assert_array_equal(solo.all_reduce(np.arange(3)), np.arange(3))
    assert "destroyed" in repr(solo)
    with pytest.raises(gocl.InvalidUsageError, match="destroyed"):
        solo.barrier()


def test_split():
    comms = gocl.Communicator.local(4)

    def body(c):
        sub = c.split(c.rank % 2, key=-c.rank)  # reversed order inside each color
        none = c.split(None if c.rank == 3 else 0)
        try:
            total = sub.all_reduce(np.array([c.rank], np.int64))
            return sub.rank, sub.world_size, int(total[0]), none is None
        finally:
            sub.destroy()
            if none is not None:
                none.destroy()

    got = threaded(comms, body)
    assert got == [(1, 2, 2, False), (1, 2, 4, False), (0, 2, 2, False), (0, 2, 4, True)]
    for c in comms:
        c.destroy()


# ----------------------------------------------------------- across processes

def _check_all_collectives(comm):
    n, r = comm.world_size, comm.rank
    for dt in (np.float32, np.int64, np.float16):
        x = make(dt, r, 1001)
        want = reference([make(dt, q, 1001) for q in range(n)], "sum", dt, n)
        check_equal(comm.all_reduce(x.copy()), want, dt)
    big = np.full(300_000, r + 1, np.float32)  # ring path, striped sockets
    np.testing.assert_array_equal(comm.all_reduce(big), np.full(300_000, n * (n + 1) / 2, np.float32))
    b = np.full(5, r, np.int32)
    np.testing.assert_array_equal(comm.broadcast(b, root=n - 1), np.full(5, n - 1, np.int32))
    np.testing.assert_array_equal(comm.all_gather(np.full(2, r, np.int16)), np.repeat(np.arange(n), 2).reshape(n, 2))
    rs = comm.reduce_scatter(np.arange(n * 3, dtype=np.float64).reshape(n, 3))
    np.testing.assert_array_equal(rs, n * np.arange(r * 3, r * 3 + 3, dtype=np.float64))
    a2a = comm.all_to_all(np.full(n, r, np.uint8))
    np.testing.assert_array_equal(a2a, np.arange(n, dtype=np.uint8))
    g = comm.gather(np.array([r]), root=0)
    assert (g is None) == (r != 0) and (r != 0 or list(g.ravel()) == list(range(n)))
    s = comm.scatter(np.arange(n * 2).reshape(n, 2), root=0)
    np.testing.assert_array_equal(s, [2 * r, 2 * r + 1])
    w = comm.all_reduce(np.ones(7, np.float64), op="max", async_op=True)
    np.testing.assert_array_equal(w.wait(), np.ones(7))
    with gocl.group():
        comm.send(np.full(3, r, np.float32), (r + 1) % n)
        got = comm.recv(np.empty(3, np.float32), (r - 1) % n)
    np.testing.assert_array_equal(got, np.full(3, (r - 1) % n, np.float32))
    if n > 1:  # receive from any source: rank 0 hears from everyone, in some order
        if r:
            comm.send(np.full(2, r, np.int64), 0)
        else:
            heard = [(comm.recv(x := np.empty(2, np.int64)), x[0]) for _ in range(n - 1)]
            assert sorted(heard) == [(q, q) for q in range(1, n)], heard
    comm.barrier()


@pytest.mark.ranks(1)
def test_from_env_one_rank():
    with gocl.Communicator.from_env() as comm:
        assert (comm.rank, comm.world_size) == (0, 1)
        _check_all_collectives(comm)


@pytest.mark.ranks(2)
def test_from_env_two_ranks():
    assert _lib.loaded() is False
    with gocl.Communicator.from_env() as comm:
        assert comm.rank == int(os.environ["RANK"]) and comm.world_size == 2
        _check_all_collectives(comm)
    # A second communicator in the same processes: a new from_env round.
    with gocl.Communicator.from_env() as comm:
        np.testing.assert_array_equal(comm.all_reduce(np.ones(3)), np.full(3, 2.0))


@pytest.mark.ranks(4)
def test_from_env_four_ranks():
    with gocl.Communicator.from_env() as comm:
        _check_all_collectives(comm)


@pytest.mark.ranks(3, timeout=90)
def test_dead_rank_gives_remote_error_on_survivors():
    os.environ["GOCL_TIMEOUT"] = "15"  # read at the communicator init (below)
    comm = gocl.Communicator.from_env()
    comm.barrier()
    if comm.rank == 1:
        os._exit(0)  # dies without a word (exit 0: the test judges the survivors)
    start = time.monotonic()
    with pytest.raises(gocl.RemoteError) as e:
        for _ in range(100):  # the death shows up on the first call after it
            comm.all_reduce(np.ones(1000, np.float32))
            time.sleep(0.05)
    assert "rank 1" in str(e.value), str(e.value)
    assert time.monotonic() - start < 14, "the failure must be detected, not timed out"
    assert isinstance(comm.async_error(), gocl.RemoteError)
    comm.abort()


# -------------------------------------------------------- fork and laziness

FORK_CHILD = r"""
import multiprocessing as mp, sys
import numpy as np
import gocl, gocl._core as core

def child(q):
    outcome = []
    for what, call in (("version", core.version), ("local", lambda: gocl.Communicator.local(2)),
                       ("all_reduce", lambda: comm.all_reduce(np.ones(2)))):
        try:
            call()
            outcome.append(f"{what}: no error")
        except gocl.ForkError as e:
            outcome.append(f"{what}: ForkError: {e}")
        except BaseException as e:
            outcome.append(f"{what}: {type(e).__name__}: {e}")
    q.put(outcome)

if __name__ == "__main__":
    comm = gocl.Communicator.local(1)[0]  # loads the library, starts Go's threads
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    for line in q.get(timeout=30):
        print(line)
    p.join(30)
    print("child exit", p.exitcode)
    print("parent still works:", comm.all_reduce(np.ones(2))[0])
"""


def test_fork_after_load_raises_fork_error(tmp_path):
    script = tmp_path / "fork_child.py"
    script.write_text(FORK_CHILD)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for what in ("version", "local", "all_reduce"):
        line = next(ln for ln in lines if ln.startswith(what + ":"))
        assert "ForkError" in line and "spawn" in line, line
    assert "child exit 0" in lines
    assert "parent still works: 1.0" in lines


def test_import_gocl_does_not_load_the_library():
    code = ("import gocl, gocl.comm, gocl.errors, gocl.tools.launcher, gocl.tools.cli, gocl.testing.plugin, sys\n"
            "gocl.Communicator, gocl.premul_sum(2)\n"
            "from gocl import _lib\n"
            "maps = open('/proc/self/maps').read()\n"
            "print(_lib.loaded(), 'libgocl' in maps)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
    assert "numpy" not in subprocess.run(
        [sys.executable, "-c", "import gocl, sys; print(sorted(m for m in sys.modules if m.startswith('numpy')))"],
        capture_output=True, text=True, timeout=60).stdout.replace("[]", "")


def test_unique_id_constructor_on_threads():
    uid = gocl.unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    with pytest.raises(gocl.InvalidArgumentError, match="unique_id must be 128 bytes"):
        gocl.Communicator(uid[:10], 0, 2)
    comms = threaded([0, 1, 2], lambda r: gocl.Communicator(uid, r, 3))
    try:
        assert [(c.rank, c.world_size) for c in comms] == [(0, 3), (1, 3), (2, 3)]
        got = threaded(comms, lambda c: c.all_reduce(np.full(4, c.rank, np.int32)))
        for g in got:
            np.testing.assert_array_equal(g, np.full(4, 3, np.int32))
    finally:
        for c in comms:
            c.destroy()
