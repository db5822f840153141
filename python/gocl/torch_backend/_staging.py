"""Host buffers handed to the C library.

gocl reads and writes host memory through raw pointers, so every tensor a
call touches must be a dense, contiguous CPU tensor. ``Host`` is that
tensor: the caller's own when it already qualifies (the common case, no
copy), else a staging copy that ``write_back`` copies into the caller's
tensor after the call:

* non-contiguous CPU tensors, and tensors with a lazy conj/neg bit;
* tensors on another device (CUDA): copied to host before the call, back
  after it, on the stream that was current when the operation was issued,
  which is synchronized before the Work completes;
* every tensor when ``GOCL_TORCH_FORCE_STAGING=1`` (a debugging aid; the
  tests use it to run the device path on CPU-only machines).
"""

from __future__ import annotations

import contextlib
import os

import torch

_FORCE = False


def refresh() -> None:
    """Read GOCL_TORCH_FORCE_STAGING (done when a group is created)."""
    global _FORCE
    _FORCE = os.environ.get("GOCL_TORCH_FORCE_STAGING", "") == "1"


def force_staging() -> bool:
    return _FORCE


refresh()


def direct(t: torch.Tensor) -> bool:
    """Whether gocl can use t's own memory (a dense contiguous CPU tensor)."""
    return (not _FORCE and t.is_cpu and t.is_contiguous() and t.layout == torch.strided
            and not t.is_conj() and not t.is_neg())


class DeviceSync:
    """The streams of the device tensors one operation touches: staging
    copies back to a device run on the stream that was current when the
    operation was issued (possibly on another thread), and the operation
    completes only once those copies are done."""

    def __init__(self, tensors=()):
        self.streams = {}
        for t in tensors:
            dev = t.device
            if dev.type == "cuda" and dev not in self.streams:
                self.streams[dev] = torch.cuda.current_stream(dev)

    @contextlib.contextmanager
    def on_streams(self):
        if not self.streams:
            yield
            return
        with contextlib.ExitStack() as stack:
            for s in self.streams.values():
                stack.enter_context(torch.cuda.stream(s))
            yield
        for s in self.streams.values():
            s.synchronize()


class Host:
    """A contiguous CPU tensor standing for ``orig`` during a gocl call.

    ``read``: copy orig's values in (False for pure outputs).
    ``copy``: always stage (used when an input must not alias an output).
    """

    __slots__ = ("orig", "t", "copied")

    def __init__(self, orig: torch.Tensor, read: bool = True, copy: bool = False):
        if orig.layout != torch.strided:
            raise TypeError(f"gocl: {orig.layout} tensors are not supported; pass a dense (strided) tensor")
        if orig.device.type not in ("cpu", "cuda"):
            raise TypeError(f"gocl: tensors on {orig.device} are not supported: gocl works on host memory and "
                            "stages cuda tensors through it; move the tensor to cpu first")
        self.orig = orig
        if not copy and direct(orig):
            self.t = orig
            self.copied = False
            return
        pin = orig.device.type == "cuda"
        t = torch.empty(orig.shape, dtype=orig.dtype, device="cpu", pin_memory=pin)
        if read:
            t.copy_(orig.detach().resolve_conj().resolve_neg())
        self.t = t
        self.copied = True

    def write_back(self) -> None:
        if self.copied:
            self.orig.copy_(self.t)

    # views the C library gets
    def bytes(self) -> torch.Tensor:
        return as_bytes(self.t)

    @property
    def nbytes(self) -> int:
        return self.t.numel() * self.t.element_size()


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous CPU tensor."""
    flat = t.reshape(-1)
    if flat.dtype == torch.uint8:
        return flat
    if flat.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return flat.view(torch.uint8)


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two CPU tensors' memory ranges intersect."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def copy_out(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy a host result into a caller's tensor (any device/layout)."""
    if dst.data_ptr() == src.data_ptr() and dst.dtype == src.dtype and dst.device == src.device \
            and dst.shape == src.shape and dst.stride() == src.stride():
        return
    dst.copy_(src.view(dst.shape) if src.shape != dst.shape else src)
