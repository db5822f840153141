"""torch dtypes and ReduceOps mapped onto gocl's.

Data movement (broadcast, gathers, scatters, all-to-all, send/recv) works on
every dtype: the bytes are moved as uint8. Reductions need a type gocl can
reduce; :func:`reduction` decides how each (dtype, op) pair is run.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from .. import _core

# torch dtype -> gocl dtype, for reductions. bool is reduced as uint8 (with
# ops remapped, see reduction()); complex as its real view (sum/avg only).
_GOCL_DTYPE = {
    torch.float32: _core.FLOAT32,
    torch.float64: _core.FLOAT64,
    torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16,
    torch.int8: _core.INT8,
    torch.uint8: _core.UINT8,
    torch.int32: _core.INT32,
    torch.int64: _core.INT64,
    torch.bool: _core.UINT8,
}
for _name, _code in (("uint32", _core.UINT32), ("uint64", _core.UINT64)):
    if hasattr(torch, _name):  # "shell" dtypes of torch >= 2.3
        _GOCL_DTYPE[getattr(torch, _name)] = _code

_COMPLEX_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}

_INTEGER = {torch.int8, torch.uint8, torch.int32, torch.int64,
            *(getattr(torch, n) for n in ("uint32", "uint64") if hasattr(torch, n))}
_FLOATING = {torch.float32, torch.float64, torch.float16, torch.bfloat16}

R = dist.ReduceOp.RedOpType
_NATIVE = {R.SUM: _core.SUM, R.PRODUCT: _core.PROD, R.MIN: _core.MIN, R.MAX: _core.MAX, R.AVG: _core.AVG}
_BITWISE = {R.BAND, R.BOR, R.BXOR}
_OP_NAMES = {v: k.lower() for k, v in R.__members__.items()}


class UnsupportedError(TypeError):
    """A dtype/op combination gocl cannot reduce (raised before any
    communication, so the process group stays usable)."""


def op_type(op) -> R:
    """The RedOpType of a ReduceOp, a RedOpType, or one of ReduceOp.SUM..."""
    if isinstance(op, R):
        return op
    inner = getattr(op, "op", None)
    if isinstance(inner, R):
        return inner
    raise TypeError(f"not a torch.distributed.ReduceOp: {op!r}")


def op_name(op) -> str:
    try:
        return _OP_NAMES.get(op_type(op), str(op))
    except TypeError:
        return repr(op)


def premul_factor(op):
    """The scalar of a PREMUL_SUM ReduceOp (a float, or a 1-element tensor).

    torch >= 2.9 exposes ``op.factor``; older torch only through the pickle
    state ``(RedOpType, factor)``."""
    factor = getattr(op, "factor", None)
    if factor is None:
        try:
            state = op.__reduce_ex__(2)[2]
            factor = state[1]
        except Exception:  # noqa: BLE001
            factor = None
    if factor is None:
        raise UnsupportedError("PREMUL_SUM without a readable factor: build it with "
                               "torch.distributed._make_nccl_premul_sum(factor)")
    return factor


@dataclasses.dataclass(frozen=True)
class Reduction:
    """How to run a reduction of one dtype with one op.

    kind:
      "native"  - one gocl call with ``gocl_op`` on ``gocl_dtype``; the tensor is
                  viewed as ``view`` first (bool -> uint8, complex -> real).
      "premul"  - gocl PreMulSum with ``factor`` (a python scalar).
      "bitwise" - gocl has no bitwise reductions: gather every rank's data and
                  reduce locally with torch (``local`` is the torch function).
    """

    kind: str
    gocl_dtype: int = -1
    gocl_op: int = -1
    view: torch.dtype | None = None
    factor: float | int | None = None
    local: str | None = None


def _describe(dtype, op, rank) -> str:
    return f"dtype {dtype} with op {op_name(op).upper()} on rank {rank}"


_CACHE: dict = {}


def reduction(dtype: torch.dtype, op, rank: int) -> Reduction:
    """Decide how to reduce ``dtype`` with ``op``; raise UnsupportedError
    (naming dtype, op and rank) for what gocl cannot do. Decisions without
    a PREMUL_SUM factor are cached (this is on every reduction's path)."""
    kind = op_type(op)
    if kind == R.PREMUL_SUM:
        return _decide(dtype, kind, op, rank)
    key = (dtype, kind)
    red = _CACHE.get(key)
    if red is None:
        red = _CACHE[key] = _decide(dtype, kind, op, rank)
    return red


def _decide(dtype: torch.dtype, kind, op, rank: int) -> Reduction:
    what = _describe(dtype, op, rank)
    if dtype in _COMPLEX_REAL:
        real = _COMPLEX_REAL[dtype]
        if kind in (R.SUM, R.AVG):
            return Reduction("native", _GOCL_DTYPE[real], _NATIVE[kind], view=real)
        if kind == R.PREMUL_SUM:
            factor = _scalar(premul_factor(op))
            if isinstance(factor, complex):
                raise UnsupportedError(f"gocl: {what}: a complex PREMUL_SUM factor is not supported "
                                       "(complex tensors reduce as their real view)")
            return Reduction("premul", _GOCL_DTYPE[real], view=real, factor=float(factor))
        raise UnsupportedError(f"gocl: {what} is not supported: complex tensors support only "
                               "SUM, AVG and PREMUL_SUM (they are reduced as real pairs)")
    if dtype not in _GOCL_DTYPE:
        raise UnsupportedError(f"gocl: {what} is not supported: gocl reduces float32, float64, float16, "
                               "bfloat16, int8, uint8, int32, int64, uint32, uint64, bool and complex "
                               "(sum/avg); cast the tensor first")
    gdt = _GOCL_DTYPE[dtype]
    if dtype == torch.bool:
        # As NCCL does: bool travels as uint8 0/1, SUM (logical or) is MAX and
        # PRODUCT (logical and) is MIN, so the bytes stay valid bools.
        table = {R.SUM: _core.MAX, R.MAX: _core.MAX, R.BOR: _core.MAX,
                 R.PRODUCT: _core.MIN, R.MIN: _core.MIN, R.BAND: _core.MIN}
        if kind in table:
            return Reduction("native", gdt, table[kind], view=torch.uint8)
        if kind == R.BXOR:
            return Reduction("bitwise", local="bitwise_xor")
        raise UnsupportedError(f"gocl: {what} is not supported: bool tensors support SUM/MAX/BOR "
                               "(or), PRODUCT/MIN/BAND (and) and BXOR")
    if kind in _BITWISE:
        if dtype not in _INTEGER:
            raise UnsupportedError(f"gocl: {what} is not supported: bitwise ops need an integer or "
                                   "bool tensor")
        local = {R.BAND: "bitwise_and", R.BOR: "bitwise_or", R.BXOR: "bitwise_xor"}[kind]
        return Reduction("bitwise", local=local)
    if kind == R.PREMUL_SUM:
        if dtype not in _FLOATING:
            raise UnsupportedError(f"gocl: {what} is not supported: PREMUL_SUM needs a floating-point "
                                   "tensor")
        factor = _scalar(premul_factor(op))
        if isinstance(factor, complex):
            raise UnsupportedError(f"gocl: {what}: a complex PREMUL_SUM factor needs a complex tensor")
        return Reduction("premul", gdt, factor=float(factor))
    if kind in _NATIVE:
        return Reduction("native", gdt, _NATIVE[kind])
    raise UnsupportedError(f"gocl: {what} is not supported")


def _scalar(factor):
    if isinstance(factor, torch.Tensor):
        if factor.numel() != 1:
            raise UnsupportedError(f"PREMUL_SUM factor must have one element, got shape {tuple(factor.shape)}")
        return factor.detach().cpu().reshape(()).item()
    return factor


def scalar_bytes(value, gocl_dtype: int) -> bytes:
    """One element of gocl_dtype holding value, as raw bytes (for PreMulSum)."""
    tdt = {_core.FLOAT32: torch.float32, _core.FLOAT64: torch.float64, _core.FLOAT16: torch.float16,
           _core.BFLOAT16: torch.bfloat16}[gocl_dtype]
    return bytes(torch.tensor([value], dtype=tdt).view(torch.uint8).tolist())
