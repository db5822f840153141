"""broadcast, all_gather (list / into_tensor / uneven / in place), all_to_all
(list / single, even and uneven splits), gather, scatter: every dtype (int16,
bool and complex move as bytes), odd sizes, non-contiguous tensors, sync and
async, 1..4 ranks."""

from __future__ import annotations

import pytest
from torchdist_util import (  # noqa: I001
    COMPLEX,
    FLOATS,
    INTS,
    OTHERS,
    UINTS,
    Failures,
    dist,
    group,
    make,
    noncontig,
    torch,
)

DTYPES = FLOATS + INTS + UINTS + COMPLEX + OTHERS + [torch.bool]
WORLDS = [pytest.param(n, marks=pytest.mark.ranks(n), id=f"{n}ranks") for n in (1, 2, 3, 4)]


def val(dtype, n, rank, seed):
    return make(dtype, n, rank, seed, 0, 100 if dtype != torch.bool else 2)


def _broadcast(rank, world, f):
    for i, dtype in enumerate(DTYPES):
        for root in range(world):
            for n in (0, 1, 1031):
                src = val(dtype, n, root, i)
                t = val(dtype, n, rank, i + 50) if rank != root else src.clone()
                w = dist.broadcast(t, src=root, async_op=(n == 1))
                if n == 1:
                    w.wait()
                f.expect(t, src, f"broadcast {dtype} root={root} n={n}")
        # non-contiguous
        src = val(dtype, 9, 0, i)
        t = noncontig(src if rank == 0 else torch.zeros_like(src))
        dist.broadcast(t, src=0)
        f.expect(t.contiguous(), src, f"broadcast non-contiguous {dtype}")


def _all_gather(rank, world, f):
    for i, dtype in enumerate(DTYPES):
        for n in (0, 1, 7, 1031):
            xs = [val(dtype, n, r, i) for r in range(world)]
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, xs[rank])
            for r in range(world):
                f.expect(outs[r], xs[r], f"all_gather {dtype} n={n} block {r}")
            out = torch.empty(world * n, dtype=dtype)
            w = dist.all_gather_into_tensor(out, xs[rank], async_op=True)
            w.wait()
            f.expect(out, torch.cat(xs), f"all_gather_into_tensor {dtype} n={n}")
        # 2-d output (world, n) and non-contiguous input
        xs = [val(dtype, 5, r, i + 7) for r in range(world)]
        out = torch.empty(world, 5, dtype=dtype)
        dist.all_gather_into_tensor(out, noncontig(xs[rank]))
        f.expect(out, torch.stack(xs), f"all_gather_into_tensor 2-d, non-contiguous input {dtype}")
    # uneven all_gather (different sizes per rank)
    xs = [torch.arange(r + 1, dtype=torch.float32) + 10 * r for r in range(world)]
    outs = [torch.empty(r + 1) for r in range(world)]
    dist.all_gather(outs, xs[rank])
    for r in range(world):
        f.expect(outs[r], xs[r], f"uneven all_gather block {r}")
    # in place: input is this rank's block of the output
    buf = torch.zeros(world * 4)
    buf[rank * 4:(rank + 1) * 4] = rank + 1
    dist.all_gather_into_tensor(buf, buf[rank * 4:(rank + 1) * 4])
    f.expect(buf, torch.cat([torch.full((4,), r + 1.0) for r in range(world)]), "in-place all_gather_into_tensor")
    # input overlapping the output elsewhere than its own block: read before anything is written
    buf = torch.zeros(world * 4 + 1)
    src = buf[1:5]
    src.copy_(torch.full((4,), rank + 1.0))
    want = torch.cat([torch.full((4,), r + 1.0) for r in range(world)])
    dist.all_gather_into_tensor(buf[:world * 4], src)
    f.expect(buf[:world * 4], want, "all_gather_into_tensor with an overlapping input")
    # outputs that are views of one buffer, as all_gather_object makes them
    big = torch.zeros(world * 6, dtype=torch.uint8)
    views = [big[r * 6:(r + 1) * 6] for r in range(world)]
    dist.all_gather(views, torch.full((6,), rank, dtype=torch.uint8))
    f.expect(big, torch.arange(world, dtype=torch.uint8).repeat_interleave(6), "all_gather into views of one buffer")


def _all_to_all(rank, world, f):
    for i, dtype in enumerate(DTYPES):
        # all_to_all_single, even
        for n in (0, 1, 5):
            ins = [val(dtype, world * n, r, i) for r in range(world)]
            out = torch.empty(world * n, dtype=dtype)
            dist.all_to_all_single(out, ins[rank])
            want = torch.cat([ins[r][rank * n:(rank + 1) * n] for r in range(world)])
            f.expect(out, want, f"all_to_all_single even {dtype} n={n}")
        # uneven splits: rank r sends (r + p) % 3 rows to rank p; rows of 3 elements
        rows = lambda r, p: (r + p) % 3  # noqa: E731
        ins = [val(dtype, 3 * sum(rows(r, p) for p in range(world)), r, i + 9).view(-1, 3) for r in range(world)]
        in_splits = [rows(rank, p) for p in range(world)]
        out_splits = [rows(p, rank) for p in range(world)]
        out = torch.empty(sum(out_splits), 3, dtype=dtype)
        w = dist.all_to_all_single(out, ins[rank], out_splits, in_splits, async_op=True)
        w.wait()
        want = []
        for p in range(world):
            start = sum(rows(p, q) for q in range(rank))
            want.append(ins[p][start:start + rows(p, rank)])
        f.expect(out, torch.cat(want), f"all_to_all_single uneven {dtype}")
        # all_to_all (lists), equal and unequal sizes
        for uneven in (False, True):
            size = (lambda src, dst: 1 + (src + 2 * dst) % 3) if uneven else (lambda src, dst: 4)  # noqa: E731
            ins_l = [[val(dtype, size(r, p), r, i * 10 + p) for p in range(world)] for r in range(world)]
            outs = [torch.empty(size(p, rank), dtype=dtype) for p in range(world)]
            dist.all_to_all(outs, ins_l[rank])
            for p in range(world):
                f.expect(outs[p], ins_l[p][rank], f"all_to_all {'uneven' if uneven else 'even'} {dtype} from {p}")


def _gather_scatter(rank, world, f):
    for i, dtype in enumerate(DTYPES):
        for root in range(world):
            for n in (0, 3, 1031):
                xs = [val(dtype, n, r, i + root) for r in range(world)]
                outs = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
                dist.gather(xs[rank], outs, dst=root)
                if rank == root:
                    for r in range(world):
                        f.expect(outs[r], xs[r], f"gather {dtype} root={root} n={n} from {r}")
                out = torch.empty(n, dtype=dtype)
                ins = [val(dtype, n, r, i + 3 * root) for r in range(world)]
                dist.scatter(out, ins if rank == root else None, src=root)
                f.expect(out, ins[rank], f"scatter {dtype} root={root} n={n}")
        # non-contiguous output of scatter
        ins = [val(dtype, 4, r, i) for r in range(world)]
        out = noncontig(torch.zeros(4, dtype=dtype))
        dist.scatter(out, ins if rank == 0 else None, src=0)
        f.expect(out.contiguous(), ins[rank], f"scatter non-contiguous {dtype}")


@pytest.mark.parametrize("world", WORLDS)
def test_data_movement_every_dtype(world):
    with group() as (rank, world):
        f = Failures(rank)
        _broadcast(rank, world, f)
        _all_gather(rank, world, f)
        _all_to_all(rank, world, f)
        _gather_scatter(rank, world, f)
        f.done()


@pytest.mark.ranks(1)
def test_gather_scatter_root_list_errors():
    """The root's list must hold one tensor per rank (torch itself checks the
    dtypes before the backend sees them)."""
    with group() as (rank, world):
        x = torch.ones(3)
        for call, msg in [
            (lambda: dist.gather(x, [torch.empty(3), torch.empty(3)], dst=0),
             "gather: the root's output list has 2 tensors for 1 ranks"),
            (lambda: dist.scatter(x, [torch.ones(3), torch.ones(3)], src=0),
             "scatter: the root's input list has 2 tensors for 1 ranks"),
        ]:
            with pytest.raises((ValueError, RuntimeError), match=msg):
                call()
