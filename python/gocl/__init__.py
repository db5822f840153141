"""gocl: a collective communication library written in Go, shaped like NCCL.

``import gocl`` is cheap and does not load ``libgocl.so`` (nor numpy): the
library is loaded by the first call that needs it, so a process may still
fork before that. The numpy API lives in :mod:`gocl.comm`::

    import numpy as np, gocl
    with gocl.Communicator.from_env() as comm:     # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
        x = np.ones(4, np.float32)
        comm.all_reduce(x)                          # in place: x == world_size

Other pieces: ``gocl.errors`` (exceptions), ``gocl.torch_backend`` (the
torch.distributed backend ``"gocl"``), ``gocl run`` (launcher, ``gocl.tools.launcher``)
and the pytest plugin (``@pytest.mark.ranks(n)``, ``gocl.testing.plugin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    ForkError,
    GoclError,
    GoclInternalError,
    GoclSystemError,
    GoclTimeoutError,
    InvalidArgumentError,
    InvalidUsageError,
    RemoteError,
)

# Written at build time from runtime/version/VERSION, gocl's one version (the
# library's goclGetVersion embeds the same file).
from ._version import __version__

# torch.distributed backend "gocl": registered now if torch is already imported, else
# right after `import torch` (one-shot import hook). Imports neither torch nor libgocl.so.
from .torch_backend import register_when_torch_imported as _register_torch_backend

_register_torch_backend()

# Names served lazily from gocl.comm (which imports numpy).
_COMM_NAMES = ("Communicator", "Work", "PreMulSum", "premul_sum", "group", "unique_id")

__all__ = [
    "__version__",
    "library_version",
    *_COMM_NAMES,
    "GoclError",
    "GoclSystemError",
    "GoclInternalError",
    "InvalidArgumentError",
    "InvalidUsageError",
    "RemoteError",
    "GoclTimeoutError",
    "ForkError",
]

if TYPE_CHECKING:  # pragma: no cover
    from .comm import Communicator, PreMulSum, Work, group, premul_sum, unique_id  # noqa: F401


def __getattr__(name: str):
    if name in _COMM_NAMES:
        from . import comm

        return getattr(comm, name)
    raise AttributeError(f"module 'gocl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def library_version() -> str:
    """The loaded libgocl.so's version as "MAJOR.MINOR.PATCH" (loads the library)."""
    from . import _core

    v = _core.version()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
