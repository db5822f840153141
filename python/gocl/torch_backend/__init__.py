"""gocl as a ``torch.distributed`` backend named ``"gocl"``.

Registration is cheap and safe: it imports ``torch.distributed`` (never at
the import of this module), records a creator function with
``dist.Backend.register_backend`` and does nothing else. In particular it
never loads libgocl.so: the Go runtime starts threads when it loads, and a
process that forks afterwards (DataLoader workers, ``multiprocessing`` with
the fork start method) cannot use it. The library loads when a process
group is created, in the process that creates it.

Three ways in, all idempotent:

* ``import torch`` alone: torch >= 2.5 calls :func:`_autoload` through the
  ``torch.backends`` entry point of the installed gocl package.
* ``import gocl``: calls :func:`register_when_torch_imported`, which
  registers at once if torch is already imported, else right after torch
  finishes importing.
* explicitly: ``gocl.torch_backend.register()``.

Then ``dist.init_process_group("gocl")`` works under torchrun / env://.

Which implementation torch gets (see ``_frontends``): a Python subclass of
c10d's ``Backend`` when the installed torch dispatches C++ calls to Python
overrides of it (the "PyBackend" trampoline, torch >= 2.14 builds), else a
``dist.ProcessGroup`` subclass (torch 2.5 ... 2.13). Set
``GOCL_TORCH_IMPL=processgroup`` or ``=backend`` to force one.

What to know:

* Every group (the default one and each ``new_group``) gets its own gocl
  communicator; the group's rank 0 publishes the unique id in torch's store
  and the others wait for it up to the group's timeout (gocl._rendezvous).
  The group's timeout also bounds every operation; torch's default timeout
  yields to ``GOCL_TIMEOUT`` when that is set.
* Synchronous calls on host tensors run inline when nothing is queued;
  ``async_op=True`` calls are queued on the group's libgocl stream and run
  inside libgocl, outside the GIL, with no Python thread; their Works
  complete from libgocl's events (``wait()``, ``is_completed()``) and host
  functions (``get_future()``).
* Tags of send/recv are ignored: a pair's messages match in order (as in
  NCCL). ``recv``/``irecv`` without ``src`` take the first message any
  rank sends (goclRecvAny; each pair's order is kept) and report the
  sender (``dist.recv`` returns it, ``work._source_rank()``); such a
  receive runs after the group's queued work and alone, so the message
  must have the receiving tensor's size. ``monitored_barrier`` checks
  ranks in through the group's store and names every rank that did not
  arrive (``wait_all_ranks``); on the ProcessGroup route torch's
  ``dist.monitored_barrier`` refuses before reaching gocl (2.7.1: a backend
  not named "gloo"), so call ``group.monitored_barrier(timeout,
  wait_all_ranks=...)`` on the group itself. Queued isend/irecv run together, in one gocl group, when one
  of them is waited on (or the group's next call is made): which ones is
  decided by program order, never by a timer (see ``_work``). An isend
  nobody waits for goes out with the next call on this or any other gocl
  group of the process (an isend to the next pipeline stage, then a
  collective on another group, completes as on gloo); a rank that blocks
  on something else (the store) first holds it back, so wait on it first.
  ``batch_isend_irecv`` always runs its ops together. Tags travel with
  their messages: gocl delivers a rank's messages in the order sent, so a
  receive meets the next message, and one sent with another tag fails
  naming both tags rather than delivering it (gloo reorders by tag; post
  receives in the order the peer sends).
* gocl has no bitwise reductions: BAND/BOR/BXOR gather every rank's data
  and reduce locally. Complex tensors reduce as real pairs (SUM, AVG,
  PREMUL_SUM with a real factor). Other unsupported dtype/op pairs raise a
  TypeError naming dtype, op and rank before anything is sent.
* CUDA tensors are staged through host memory (correct, not fast).
* Works of calls that ran inline are torch's own future-backed Works. Works
  of queued calls are Python Works (their wait() raises the call's error).
  On the Backend route torch's C++ holder forwards only ``wait()`` and
  ``get_future()`` of a Python Work, so a group that is gocl on every
  device is a ``GoclGroup`` (torch's ProcessGroup, named "gocl", as DDP's
  logs and ``group.name()`` show) whose send/recv/recv_anysource and
  collectives on gocl tensors go straight to gocl (their Works report
  ``is_completed()`` and ``_source_rank()``).
* Environment: GOCL_TORCH_IMPL, GOCL_TORCH_FORCE_STAGING=1 (stage every
  tensor, a debugging aid), and gocl's own GOCL_* variables
  (GOCL_DEBUG=INFO prints a line per group).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import warnings

BACKEND_NAME = "gocl"
DEVICES = ("cpu", "cuda")

_lock = threading.Lock()
_hook_installed = False
_autoloaded = False  # _autoload ran (its log lines and the environment, once)

__all__ = ["BACKEND_NAME", "register", "is_registered", "register_when_torch_imported", "new_backend"]


def is_registered() -> bool:
    """Whether torch.distributed knows the "gocl" backend in this process."""
    if "torch.distributed" not in sys.modules:
        return False
    dist = sys.modules["torch.distributed"]
    backend = getattr(dist, "Backend", None)
    if backend is None:
        return False
    plugins = getattr(backend, "_plugins", {})
    return BACKEND_NAME.upper() in plugins or BACKEND_NAME in getattr(backend, "backend_list", ())


def register() -> bool:
    """Register "gocl" with torch.distributed. Returns True if this call
    registered it, False if it already was (or torch has no distributed
    support). Never loads libgocl.so."""
    import torch.distributed as dist  # noqa: PLC0415  (lazy on purpose)

    if not dist.is_available():
        return False
    with _lock:
        if is_registered():
            return False
        dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=list(DEVICES))
        return True


def _create_backend(dist_backend_opts, backend_options=None):
    """The creator torch calls for every group that uses "gocl" (the
    default group and each new_group), on member ranks only."""
    from . import _frontends  # noqa: PLC0415  (imports torch; loads gocl when the group is built)

    return _frontends.create(dist_backend_opts, backend_options)


def new_backend(store, rank: int, size: int, timeout, global_ranks, group_id: str):
    """A gocl c10d backend (GoclBackend) of size ranks meeting through store,
    as torch's "gocl" backend builds for a group, for a caller that makes its
    own process groups (gocl.torchft). timeout: a timedelta; global_ranks:
    the group's ranks in the default group; group_id names it in logs."""
    from ._engine import Engine  # noqa: PLC0415  (imports torch)
    from ._frontends import GoclBackend  # noqa: PLC0415

    return GoclBackend(Engine.create(store, rank, size, timeout, global_ranks, group_id))


def _autoload() -> None:
    """Entry point ``torch.backends: gocl = "gocl.torch_backend:_autoload"``.

    torch calls it from inside ``import torch``; an exception here would
    break every ``import torch`` on the machine, so failures become a warning.
    """
    try:
        register()
    except Exception as exc:  # pragma: no cover - defensive, see docstring
        warnings.warn(f"gocl: could not register the torch.distributed backend 'gocl': {exc!r}",
                      RuntimeWarning, stacklevel=2)
    global _autoloaded
    if _autoloaded:  # torch's entry point and gocl's import hook may both call it
        return
    _autoloaded = True
    _info("registered torch.distributed backend 'gocl' (dist.init_process_group(\"gocl\"))")
    # An srun task or an mpirun rank has no RANK or MASTER_ADDR: torch's
    # env:// would refuse it. The scheduler's world fills them in.
    try:
        from .. import world  # noqa: PLC0415

        added = world.export_torch_env()
        if added:
            _info("set for torch's env:// from the launcher's world: "
                  + ", ".join(f"{k}={v}" for k, v in sorted(added.items())))
    except Exception as exc:  # noqa: BLE001 - a malformed launcher environment; init_process_group says more
        warnings.warn(f"gocl: could not read the launcher's world for torch's env:// ({exc})", RuntimeWarning,
                      stacklevel=2)


def register_when_torch_imported() -> None:
    """Register now if torch is imported, else as soon as it is.

    Importing gocl must not import torch (it takes seconds and most numpy
    users do not need it). If torch is not imported yet, a one-shot import
    hook registers right after ``import torch`` completes. An installed gocl
    gets the same from torch's own entry-point autoload; the hook covers
    source checkouts (PYTHONPATH) and TORCH_DEVICE_BACKEND_AUTOLOAD=0.
    """
    global _hook_installed
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "distributed"):
        _autoload()
        return
    with _lock:
        if _hook_installed:
            return
        _hook_installed = True
        sys.meta_path.insert(0, _TorchImportHook())
    _info("import hook installed: it registers the torch.distributed backend 'gocl' once torch is imported, "
          "then removes itself")


def _info(line: str, rank: int | str = "-") -> None:
    """One line in the library's GOCL_DEBUG=INFO format, beside its own: what
    importing gocl or torch did to this process (an import hook,
    os.environ), and each torch group made."""
    if os.environ.get("GOCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        sys.stderr.write(f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()} [{rank}] GOCL INFO {line}\n")


class _TorchImportHook:
    """A meta path finder that only watches for the top-level ``torch``
    module: it lets the normal finders build the spec, then wraps the
    loader's exec_module so registration runs once torch's ``__init__`` has
    finished. It removes itself on first use."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util  # noqa: PLC0415

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                del loader.exec_module  # back to the class's method
            except AttributeError:
                pass
            _autoload()

        loader.exec_module = exec_module
        return spec


def __getattr__(name):
    # The classes live in _frontends, which imports torch: load on demand.
    if name in ("ProcessGroupGocl", "GoclBackend", "implementation"):
        from . import _frontends  # noqa: PLC0415

        return getattr(_frontends, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
