"""all_reduce, reduce, reduce_scatter(_tensor): every dtype x every ReduceOp,
odd sizes, sync and async, 1..4 ranks, against references computed locally."""

from __future__ import annotations

import pytest
from torchdist_util import (  # noqa: I001
    BIG,
    COMPLEX,
    FLOATS,
    INTS,
    OTHERS,
    SIZES,
    UINTS,
    Failures,
    R,
    dist,
    group,
    make,
    noncontig,
    reference,
    torch,
)

OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]


def supported(dtype, op) -> bool:
    """What the gocl backend promises (everything else must raise)."""
    if dtype in OTHERS:
        return False
    if dtype.is_complex:
        return op in (R.SUM, R.AVG)
    if dtype == torch.bool:
        return op != R.AVG
    if op in (R.BAND, R.BOR, R.BXOR):
        return dtype in INTS or dtype in UINTS
    if dtype in UINTS and op == R.AVG:
        return True
    return True


def inputs_for(dtype, op, n, world, seed):
    lo, hi = 0, 4
    if op == R.PRODUCT:
        lo, hi = 1, 3
    if op in (R.BAND, R.BOR, R.BXOR):
        hi = 100
    if op in (R.MIN, R.MAX) and dtype not in UINTS and dtype != torch.uint8 and dtype != torch.bool:
        lo, hi = -3, 4
    return [make(dtype, n, r, seed, lo, hi) for r in range(world)]


ALL_DTYPES = FLOATS + INTS + UINTS + COMPLEX + [torch.bool] + OTHERS


def _allreduce_matrix(rank, world, f: Failures):
    seed = 0
    for dtype in ALL_DTYPES:
        for op in OPS:
            for n in SIZES:
                seed += 1
                xs = inputs_for(dtype, op, n, world, seed)
                t = xs[rank].clone()
                what = f"all_reduce {dtype} {op} n={n}"
                if not supported(dtype, op):
                    try:
                        dist.all_reduce(t, op=op)
                    except Exception as e:  # noqa: BLE001
                        msg = str(e)
                        # torch itself refuses some complex ops before the backend sees them
                        clear = (str(dtype) in msg and f"rank {rank}" in msg) or (
                            dtype.is_complex and "complex" in msg)
                        f.check(clear, f"{what}: unclear error {msg!r}")
                    else:
                        f.check(False, f"{what}: no error raised")
                    continue
                async_op = seed % 2 == 0
                w = dist.all_reduce(t, op=op, async_op=async_op)
                if async_op:
                    w.wait()
                f.expect(t, reference(xs, op, dtype, world), what)


def _all_reduce_cases(rank, world, f):
    _allreduce_matrix(rank, world, f)
    # large, non-contiguous, and PREMUL_SUM
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        xs = [make(dtype, BIG, r, 99) for r in range(world)]
        t = xs[rank].clone()
        dist.all_reduce(t)
        f.expect(t, reference(xs, R.SUM, dtype, world), f"all_reduce big {dtype}")
        v = noncontig(xs[rank])
        dist.all_reduce(v, op=R.MAX)
        f.expect(v.contiguous(), reference(xs, R.MAX, dtype, world), f"all_reduce non-contiguous {dtype}")
    for dtype in FLOATS + COMPLEX:
        xs = [make(dtype, 33, r, 7) for r in range(world)]
        t = xs[rank].clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        want = (reference(xs, R.SUM, dtype, world).to(torch.complex128 if dtype.is_complex else torch.float64)
                * 0.5).to(dtype)
        f.expect(t, want, f"all_reduce PREMUL_SUM(0.5) {dtype}")
    # a tensor factor (what FSDP passes)
    xs = [make(torch.float32, 9, r, 8) for r in range(world)]
    t = xs[rank].clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([2.0])))
    f.expect(t, reference(xs, R.SUM, torch.float32, world) * 2, "all_reduce PREMUL_SUM(tensor 2.0)")
    for dtype in (torch.int32, torch.bool):
        try:
            dist.all_reduce(make(dtype, 3, rank), op=dist._make_nccl_premul_sum(2.0))
            f.check(False, f"PREMUL_SUM on {dtype} did not raise")
        except Exception as e:  # noqa: BLE001
            f.check("PREMUL_SUM" in str(e) and str(dtype) in str(e), f"PREMUL_SUM {dtype}: {e}")
    # 2-d and 0-d tensors
    m = torch.full((3, 5), float(rank + 1))
    dist.all_reduce(m)
    f.check(bool((m == world * (world + 1) / 2).all()), f"2-d all_reduce {m}")
    s = torch.tensor(float(rank))
    dist.all_reduce(s, op=R.MAX)
    f.check(s.item() == world - 1, f"0-d all_reduce {s}")


def _reduce_and_reduce_scatter_cases(rank, world, f):
    seed = 0
    for dtype in FLOATS + INTS + UINTS + [torch.bool, torch.complex64]:
        for op in OPS:
            if not supported(dtype, op):
                continue
            seed += 1
            # reduce, every root
            for root in range(world):
                for n in (0, 5, 1031):
                    xs = inputs_for(dtype, op, n, world, seed * 10 + root)
                    t = xs[rank].clone()
                    dist.reduce(t, dst=root, op=op)
                    if rank == root:
                        f.expect(t, reference(xs, op, dtype, world), f"reduce {dtype} {op} root={root} n={n}")
                    else:
                        f.expect(t, xs[rank], f"reduce leaves non-root input {dtype} {op} root={root}")
            # reduce_scatter_tensor (flat), odd block
            for n in (1, 13):
                xs = inputs_for(dtype, op, n * world, world, seed + 500)
                out = torch.empty(n, dtype=dtype)
                w = dist.reduce_scatter_tensor(out, xs[rank].clone(), op=op, async_op=True)
                w.wait()
                want = reference(xs, op, dtype, world)[rank * n:(rank + 1) * n]
                f.expect(out, want, f"reduce_scatter_tensor {dtype} {op} n={n}")
            # reduce_scatter (lists), even and uneven blocks
            blocks = [3] * world if seed % 2 else [r + 1 for r in range(world)]
            if dtype.is_complex:
                continue  # the list form: same code path as above
            per_rank = [[make(dtype, blocks[j], r, seed * 100 + j, *( (1, 3) if op == R.PRODUCT else (0, 4)))
                         for j in range(world)] for r in range(world)]
            out = torch.empty(blocks[rank], dtype=dtype)
            dist.reduce_scatter(out, [x.clone() for x in per_rank[rank]], op=op)
            want = reference([per_rank[r][rank] for r in range(world)], op, dtype, world)
            f.expect(out, want, f"reduce_scatter {dtype} {op} blocks={blocks}")
    # PREMUL_SUM in reduce_scatter_tensor and reduce (FSDP's gradient reduction)
    for dtype in (torch.float32, torch.bfloat16):
        xs = [make(dtype, 4 * world, r, 77) for r in range(world)]
        out = torch.empty(4, dtype=dtype)
        dist.reduce_scatter_tensor(out, xs[rank].clone(), op=dist._make_nccl_premul_sum(0.5))
        want = (reference(xs, R.SUM, dtype, world).double() * 0.5).to(dtype)[rank * 4:(rank + 1) * 4]
        f.expect(out, want, f"reduce_scatter_tensor PREMUL_SUM {dtype}")
        t = xs[rank].clone()
        dist.reduce(t, dst=world - 1, op=dist._make_nccl_premul_sum(0.5))
        if rank == world - 1:
            f.expect(t, (reference(xs, R.SUM, dtype, world).double() * 0.5).to(dtype), f"reduce PREMUL_SUM {dtype}")
    # in-place reduce_scatter_tensor (output is this rank's block of the input)
    buf = torch.arange(4 * world, dtype=torch.float32) + rank
    mine = buf[rank * 4:(rank + 1) * 4]
    dist.reduce_scatter_tensor(mine, buf)
    want = sum(torch.arange(4 * world, dtype=torch.float32) + r for r in range(world))[rank * 4:(rank + 1) * 4]
    f.expect(mine, want, "in-place reduce_scatter_tensor")
    # output overlapping the input elsewhere than its own block
    buf = torch.arange(4 * world + 1, dtype=torch.float32) + rank
    src = buf[:4 * world].clone()
    dist.reduce_scatter_tensor(buf[1:5], buf[:4 * world])
    want = sum(src - rank + r for r in range(world))[rank * 4:(rank + 1) * 4]
    f.expect(buf[1:5], want, "reduce_scatter_tensor with an overlapping output")


WORLDS = [pytest.param(n, marks=pytest.mark.ranks(n), id=f"{n}ranks") for n in (1, 2, 3, 4)]


@pytest.mark.parametrize("world", WORLDS)
def test_reductions_every_dtype_and_op(world):
    with group() as (rank, world):
        f = Failures(rank)
        _all_reduce_cases(rank, world, f)
        _reduce_and_reduce_scatter_cases(rank, world, f)
        f.done()
