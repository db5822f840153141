"""Known-good environment variables for NCCL and XLA on this machine.

The doctor's knowledge base attaches environment advice to some findings:
``NCCL_P2P_DISABLE=1`` (with ``GOCL_P2P_DISABLE=0``) where NVML reports PCIe
P2P that the IOMMU or ACS breaks, ``XLA_FLAGS=--xla_gpu_autotune_level=0``
for JAX on Blackwell, ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` when torch and
JAX share GPUs, ``NCCL_SOCKET_IFNAME=lo`` when SHM is disabled.
:func:`recommended` collects it, so a program can set it before torch or JAX
initialise::

    import os, gocl.env
    os.environ.update(gocl.env.recommended())   # before importing torch / jax

or from a shell: ``eval "$(python -m gocl.env)"``.

A variable the user already set keeps the user's value (it is left out of
the result) unless ``keep_user=False``; XLA_FLAGS-style variables are
merged: the result holds the user's flags plus the recommended ones.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any, Mapping

from .tools import doctor

__all__ = ["recommended", "apply", "main"]


def recommended(report: Mapping[str, Any] | None = None, *, python: str | None = None,
                facts: str | os.PathLike | None = None, keep_user: bool = True) -> dict[str, str]:
    """Environment variables the doctor recommends here, as ``{name: value}``.

    report: a report from gocl.tools.doctor.report() (default: run the doctor now,
    on this interpreter, or on ``python``, or judging the saved ``facts``).
    keep_user: leave out variables that are already set in the examined
    environment (the user's choice wins); merged flag variables are kept
    when the merge adds something.
    """
    if report is None:
        report = doctor.report(python=python, facts=facts)
    out: dict[str, str] = {}
    for name, advice in sorted((report.get("recommended_env") or {}).items()):
        value = str(advice.get("value", ""))
        user = advice.get("user_value")
        if keep_user and user is not None:
            if advice.get("mode") != "append" or value == user:
                continue
        out[name] = value
    return out


def apply(report: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, str]:
    """Set the recommended variables in os.environ; return what was set.

    Call it before torch, JAX or NCCL read their environment (before the
    first import of torch/jax, or at least before their first GPU use).
    """
    env = recommended(report, **kwargs)
    os.environ.update(env)
    return env


def main(argv: list[str] | None = None) -> int:
    """``python -m gocl.env [--facts FILE]``: print ``export`` lines."""
    args = list(sys.argv[1:] if argv is None else argv)
    facts = None
    if args[:1] == ["--facts"] and len(args) == 2:
        facts = args[1]
    elif args:
        print("usage: python -m gocl.env [--facts FILE.json]", file=sys.stderr)
        return 2
    try:
        env = recommended(facts=facts)
    except (doctor.DoctorNotFound, RuntimeError) as e:
        print(f"gocl.env: {e}", file=sys.stderr)
        return 2
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
