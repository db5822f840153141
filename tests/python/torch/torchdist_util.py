"""Helpers for the torch backend tests: run inside ranks (@pytest.mark.ranks).

Inputs are small integers so that every reduction is exact in every dtype
(float16 and bfloat16 included) and nothing overflows; references are
computed locally from every rank's (reproducible) input.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

R = dist.ReduceOp

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
UINTS = [getattr(torch, n) for n in ("uint32", "uint64") if hasattr(torch, n)]
COMPLEX = [torch.complex64, torch.complex128]
# moved as bytes, not reducible by gocl
OTHERS = [torch.int16]

SIZES = [0, 1, 7, 1031]
BIG = 70_001  # past the direct/ring switch and the inline frame size


@contextlib.contextmanager
def group(timeout_s: float = 60, backend: str = "gocl", **kwargs):
    """init_process_group(backend) from the rank's environment; destroy after."""
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    try:
        yield dist.get_rank(), dist.get_world_size()
        # rank 0 hosts the TCPStore: nobody may leave while others still use it
        dist.barrier()
    finally:
        dist.destroy_process_group()


def make(dtype, n, rank, seed=0, lo=0, hi=4):
    """Rank rank's input: n small integers in [lo, hi) (any dtype)."""
    g = torch.Generator().manual_seed(1000 * seed + 17 * rank + 3)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    vals = torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64)
    if dtype.is_complex:
        imag = torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64)
        return torch.complex(vals.double(), imag.double()).to(dtype)
    if dtype in UINTS:
        return vals.clamp(min=0).to(dtype)
    return vals.to(dtype)


def wide(t):
    """A tensor arithmetic works on (uint32/64 -> int64, low floats -> float64)."""
    if t.dtype in UINTS or t.dtype == torch.bool:
        return t.to(torch.int64)
    if t.dtype.is_floating_point:
        return t.to(torch.float64)
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    return t.to(torch.int64)


def reference(inputs, op, dtype, world):
    """What reducing inputs (one per rank) with op gives, in dtype."""
    xs = [wide(x) for x in inputs]
    k = op if isinstance(op, type(R.SUM)) else op
    if dtype == torch.bool:
        b = [x.bool() for x in inputs]
        if k in (R.SUM, R.MAX, R.BOR):
            return functools.reduce(torch.logical_or, b)
        if k in (R.PRODUCT, R.MIN, R.BAND):
            return functools.reduce(torch.logical_and, b)
        if k == R.BXOR:
            return functools.reduce(torch.logical_xor, b)
    if k == R.SUM:
        out = functools.reduce(torch.add, xs)
    elif k == R.PRODUCT:
        out = functools.reduce(torch.mul, xs)
    elif k == R.MIN:
        out = functools.reduce(torch.minimum, xs)
    elif k == R.MAX:
        out = functools.reduce(torch.maximum, xs)
    elif k == R.AVG:
        s = functools.reduce(torch.add, xs)
        out = torch.div(s, world, rounding_mode="trunc") if not (dtype.is_floating_point or dtype.is_complex) \
            else s / world
    elif k == R.BAND:
        out = functools.reduce(torch.bitwise_and, xs)
    elif k == R.BOR:
        out = functools.reduce(torch.bitwise_or, xs)
    elif k == R.BXOR:
        out = functools.reduce(torch.bitwise_xor, xs)
    else:
        raise AssertionError(f"no reference for {op}")
    return out.to(dtype)


def tol(dtype):
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)


def same(got, want, dtype=None) -> bool:
    dtype = dtype or want.dtype
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if dtype.is_floating_point or dtype.is_complex:
        return torch.allclose(wide(got), wide(want), rtol=tol(dtype), atol=tol(dtype))
    return torch.equal(wide(got), wide(want))


class Failures:
    """Collects mismatches so one run reports every failing case."""

    def __init__(self, rank):
        self.rank = rank
        self.items = []

    def check(self, ok, what):
        if not ok:
            self.items.append(what)

    def expect(self, got, want, what):
        if not same(got, want):
            g = got if got.numel() <= 8 else got[:8]
            w = want if want.numel() <= 8 else want[:8]
            self.items.append(f"{what}: got {g} want {w}")

    def done(self):
        if self.items:
            head = self.items[:25]
            more = f"\n... and {len(self.items) - 25} more" if len(self.items) > 25 else ""
            raise AssertionError(f"rank {self.rank}: {len(self.items)} failing cases:\n" + "\n".join(head) + more)


def noncontig(t):
    """A non-contiguous tensor holding t's values (every other element of a
    twice-as-long buffer)."""
    buf = torch.zeros(t.numel() * 2, dtype=t.dtype)
    v = buf[::2]
    v.copy_(t)
    assert not v.is_contiguous() or t.numel() <= 1
    return v


def env_flag(name, value):
    """Set an environment variable for the rest of this rank's life."""
    os.environ[name] = value
