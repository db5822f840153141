"""gocl collectives inside jitted JAX programs (XLA FFI custom calls).

One JAX process per rank (``gocl run -n N``, torchrun or the pytest
plugin's ``@pytest.mark.ranks(n)``), and optionally several local devices per
process (``shard_map``), each device its own rank::

    import jax, jax.numpy as jnp
    import gocl.jax as gj

    @jax.jit
    def step(g):
        return gj.all_reduce(g, op="avg")

To run JAX's *own* collectives (``psum`` and the rest under ``shard_map`` or
sharded ``jit``) over gocl instead, call :func:`initialize` in place of
``jax.distributed.initialize``; the functions below are gocl's explicit
collectives, for those who want them.

The world comes up from the environment on first use (or ``gocl.jax.init``).
Ranks are numbered ``process_rank * local_devices + device``. Collectives run
through gocl's handlers in libgocl.so (``jaxffi/``); every call carries its
call site, so collectives that XLA runs concurrently or in another order on
each rank still pair up (see the README, "JAX").
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import sys
import threading
from typing import Sequence

import numpy as np


def _point_mpitrampoline_at_gocl() -> None:
    """jaxlib embeds MPItrampoline, which reads MPITRAMPOLINE_LIB once, when
    jaxlib loads (a constructor at ``import jax``), and then loads that MPI
    library for good: set later, it is never seen. So this module, before it
    imports jax, points it at gocl's MPI ABI library when jaxlib is not loaded
    yet and nobody chose another library or other collectives. Nothing runs
    over MPI unless JAX's CPU collectives are "mpi" (:func:`initialize`, or
    JAX_CPU_COLLECTIVES_IMPLEMENTATION): otherwise the library sits idle."""
    if "MPITRAMPOLINE_LIB" in os.environ or "jaxlib" in sys.modules:
        return
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi") != "mpi":
        return
    from .tools.launcher import mpi_abi_path

    lib = mpi_abi_path()
    if lib.is_file():
        os.environ["MPITRAMPOLINE_LIB"] = str(lib)


_point_mpitrampoline_at_gocl()

import jax  # noqa: E402  (after MPITRAMPOLINE_LIB: see above)
import jax.numpy as jnp  # noqa: E402

from . import _jax_sites, _lib, _rendezvous  # noqa: E402
from . import world as _world_mod  # noqa: E402
from .errors import InvalidArgumentError, InvalidUsageError, error_for  # noqa: E402

__all__ = ["initialize", "init", "shutdown", "world_size", "process_rank", "local_devices", "all_reduce", "all_gather",
           "reduce_scatter", "broadcast", "all_to_all", "ppermute"]

_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_TARGETS = {  # FFI target name -> handler symbol in libgocl.so
    "gocl_all_reduce": "goclJaxAllReduce",
    "gocl_all_gather": "goclJaxAllGather",
    "gocl_reduce_scatter": "goclJaxReduceScatter",
    "gocl_broadcast": "goclJaxBroadcast",
    "gocl_all_to_all": "goclJaxAllToAll",
    "gocl_ppermute": "goclJaxPermute",
}


class _Session:
    """This process's ranks of the world (jaxffi's session), from init to shutdown."""

    def __init__(self, handle: int, rank: int, nprocs: int, ndev: int):
        self.handle, self.rank, self.nprocs, self.ndev = handle, rank, nprocs, ndev

    @property
    def size(self) -> int:
        return self.nprocs * self.ndev


_lock = threading.RLock()
_session: _Session | None = None
_registered: set[str] = set()
_names: dict[int, str] = {}  # site -> where its call is, for error sentences


def _register(platform: str) -> None:
    """Register the handlers for platform "cpu" or "CUDA" (the CUDA ones
    stage through host memory on XLA's stream; JAX keeps a registration for
    a platform whose plugin is not loaded, so this works without a GPU)."""
    if platform in _registered:
        return
    lib = _lib.lib()
    suffix = "Cuda" if platform == "CUDA" else ""
    for name, sym in _TARGETS.items():
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, sym + suffix)), platform=platform)
    _registered.add(platform)


# ------------------------------------------------- JAX's own collectives over gocl

# The variables each launcher's world comes from (gocl.world's World.source),
# for errors that name them: (rank's, size's).
_LAUNCHER_VARS = {
    "RANK/WORLD_SIZE": ("RANK", "WORLD_SIZE"),
    "OpenMPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    "MPICH (PMI)": ("PMI_RANK", "PMI_SIZE"),
    "Slurm": ("SLURM_PROCID", "SLURM_NTASKS"),
    "Kubernetes (JOB_COMPLETION_INDEX)": ("JOB_COMPLETION_INDEX", "WORLD_SIZE"),
}


def _launcher_vars(w) -> tuple[str, str]:
    rank_var, size_var = _LAUNCHER_VARS.get(w.source, ("rank", "size"))
    env = os.environ
    if w.source == "OpenMPI" and "OMPI_COMM_WORLD_RANK" not in env:
        rank_var = "PMIX_RANK"
    if w.source == "Slurm" and "SLURM_NTASKS" not in env:
        size_var = "SLURM_NPROCS"
    if w.source.startswith("Kubernetes") and env.get("GOCL_WORLD_SIZE"):
        size_var = "GOCL_WORLD_SIZE"
    return rank_var, size_var


def _coordinator_port(port: int) -> int:
    """JAX's coordinator, beside gocl's id exchange on ``port`` (torch's store
    takes port + 1): port + 10001, so that schedulers' derived ports (even,
    15000-24998: gocl's; odd, one above: torch's) never meet another job's."""
    return port + 10001 if port + 10001 <= 65535 else port - 10001


def _mapped(path: str) -> bool | None:
    """Whether path is loaded in this process (None: cannot tell)."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return None
    return os.path.realpath(path) in maps


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, **kwargs) -> None:
    """``jax.distributed.initialize(...)`` that also runs JAX's own CPU
    collectives over gocl (``psum``, ``psum_scatter``, ``all_gather``,
    ``ppermute``, ``all_to_all`` under ``shard_map`` or sharded ``jit``):
    a drop-in, same arguments (``**kwargs`` go to JAX as they are).

    - **Collectives**: sets ``jax_cpu_collectives_implementation`` to ``"mpi"``
      (JAX's door to MPI, which jaxlib's MPItrampoline opens onto
      ``MPITRAMPOLINE_LIB``: gocl's MPI ABI library, set when ``gocl.jax`` was
      imported before jax, or by ``gocl run``) unless you chose an
      implementation yourself (``JAX_CPU_COLLECTIVES_IMPLEMENTATION`` or
      ``jax.config.update``): your choice stands.
    - **World**: arguments left out come from the launcher, as gocl reads it
      (``gocl.world``: ``gocl run``, torchrun, mpirun, srun, Kubernetes Indexed
      Jobs): ``num_processes`` its size, ``process_id`` its rank, the
      coordinator on rank 0's host (``MASTER_ADDR`` or the scheduler's) at
      gocl's rendezvous port + 10001 (``JAX_COORDINATOR_ADDRESS`` wins); with
      no launcher, a world of one. Given arguments that disagree with the
      launcher's world (another size or rank) raise
      :class:`gocl.InvalidArgumentError` naming both, on every rank, before
      anything waits: gocl's MPI library forms its world from the launcher, so
      JAX's must be the same.
    - **When**: before JAX's backends initialise (any computation,
      ``jax.devices()``, ``jax.device_put``...), as ``jax.distributed.initialize``;
      afterwards it raises :class:`gocl.InvalidUsageError` saying so.
    """
    from jax._src import xla_bridge

    who = "gocl.jax.initialize"
    if xla_bridge.backends_are_initialized():
        raise InvalidUsageError(
            f"{who}: JAX's backends are already initialised (a computation, jax.devices(), jax.device_put... ran "
            "first), so JAX's world and collectives can no longer be chosen: call gocl.jax.initialize() first, "
            "as jax.distributed.initialize()")
    if jax.distributed.is_initialized():
        raise InvalidUsageError(f"{who}: jax.distributed is already initialised: call gocl.jax.initialize() "
                                "instead of jax.distributed.initialize(), not after it")
    chosen = os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION")
    if chosen is None:
        chosen = jax.config.jax_cpu_collectives_implementation
        if chosen in (None, "gloo"):  # JAX's default: nobody chose
            chosen = "mpi"
    w = _world_mod.read(who=who)
    if w is not None:
        rank_var, size_var = _launcher_vars(w)
        if num_processes is not None and int(num_processes) != w.size:
            raise InvalidArgumentError(
                f"{who}: num_processes={num_processes}, but the launcher ({w.source}) started {w.size} processes "
                f"(${size_var}={w.size}): leave num_processes out to take the launcher's, or launch "
                f"{num_processes} processes")
        if process_id is not None and int(process_id) != w.rank:
            raise InvalidArgumentError(
                f"{who}: process_id={process_id}, but the launcher ({w.source}) started this process as rank "
                f"{w.rank} (${rank_var}={w.rank}) of {w.size}: leave process_id out to take the launcher's rank")
    mpi_lib = os.environ.get("MPITRAMPOLINE_LIB", "")
    if chosen == "mpi":
        if w is None and num_processes not in (None, 1):
            raise InvalidArgumentError(
                f"{who}: num_processes={num_processes}, but no launcher's variables are set, so gocl's MPI world "
                f"would be this process alone: start the processes with {_world_mod.LAUNCHERS} (or set RANK, "
                "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
        loaded = _mapped(mpi_lib) if mpi_lib else False
        if loaded is False:
            raise InvalidUsageError(
                f"{who}: JAX's MPI collectives would find no MPI library: jaxlib's MPItrampoline reads "
                "MPITRAMPOLINE_LIB once, when jax is imported, and " +
                ("it was not set then" if not mpi_lib else f"did not load {mpi_lib}") + ". Import gocl.jax before "
                "jax, or set MPITRAMPOLINE_LIB=$(gocl mpi-abi) in the environment, or start the ranks with `gocl "
                "run`, which sets it")
        jax.config.update("jax_cpu_collectives_implementation", "mpi")
    if num_processes is None:
        num_processes = w.size if w is not None else 1
    if process_id is None:
        process_id = w.rank if w is not None else 0
    if coordinator_address is None and not os.environ.get("JAX_COORDINATOR_ADDRESS"):
        if w is None or int(num_processes) == 1:
            from .tools.launcher import free_port

            coordinator_address = f"127.0.0.1:{free_port()}"
        elif w.addr:
            coordinator_address = f"{w.addr}:{_coordinator_port(w.port)}"
        else:
            raise InvalidArgumentError(
                f"{who}: the launcher ({w.source}) does not say where rank 0 runs: set MASTER_ADDR (rank 0's host), "
                "or pass coordinator_address")
    jax.distributed.initialize(coordinator_address, int(num_processes), int(process_id), **kwargs)


def init(unique_id: bytes | None = None, rank: int | None = None, world_size: int | None = None,
         local_devices: int | None = None, timeout: float | None = None) -> None:
    """Join the world: ``world_size`` processes (``rank`` is this process's),
    each with ``local_devices`` ranks (default: ``jax.local_device_count()``).
    Without arguments the launcher's environment is used (torchrun or `gocl
    run`, mpirun, srun, a Kubernetes Indexed Job: gocl.world), as
    ``Communicator.from_env`` does.
    Collectives call this on first use."""
    global _session
    with _lock:
        if _session is not None:
            raise InvalidArgumentError(
                f"gocl.jax.init on rank {_session.rank}: already initialised (call gocl.jax.shutdown() first)")
        if unique_id is None:
            if world_size not in (None, 1):
                raise InvalidArgumentError(
                    f"gocl.jax.init: world_size={world_size} needs the unique_id from rank 0 "
                    "(gocl.unique_id()), or no arguments to use the environment")
            if world_size == 1:
                uid, rank, world_size = None, 0, 1
            else:
                uid, rank, world_size = _rendezvous.from_env(timeout)
                if world_size == 1:
                    uid = None
        else:
            uid = bytes(unique_id)
            if rank is None or world_size is None:
                raise InvalidArgumentError("gocl.jax.init: with unique_id, pass rank and world_size too")
        ndev = jax.local_device_count() if local_devices is None else int(local_devices)
        lib = _lib.lib()
        fn = lib.goclJaxSessionInit
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                       ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
        out = ctypes.c_int64()
        msg = ctypes.create_string_buffer(2048)
        # uid may hold NUL bytes: pass a buffer, never a bytes object ctypes would cut.
        ubuf = None if uid is None else ctypes.create_string_buffer(uid, len(uid))
        # The ordinal XLA reports for each local device (its id; under
        # jax.distributed XLA:CPU numbers devices across processes).
        local = jax.local_devices()
        ids = (ctypes.c_int64 * ndev)(*[d.id for d in local[:ndev]]) if ndev <= len(local) else None
        rc = fn(ubuf, int(world_size), int(rank), ndev, ids, ctypes.byref(out), msg, len(msg))
        if rc != 0:
            raise error_for(rc, msg.value.decode("utf-8", "replace"))
        for platform in ("cpu", "CUDA"):
            _register(platform)
        _session = _Session(out.value, int(rank), int(world_size), ndev)


def shutdown(abort: bool = False) -> None:
    """Wait for the collectives already started and free the world;
    ``abort=True`` fails them instead, so peers fail rather than wait.
    gocl's calls are not JAX effects (see ``_ffi``), so a jitted call that
    was dispatched but has not reached its collective yet is not waited for:
    block on the results you need first (``jax.block_until_ready``).
    ``jax.effects_barrier`` still waits for computations with effects."""
    global _session
    with _lock:
        w, _session = _session, None
    if w is None:
        return
    if not abort:
        try:
            jax.effects_barrier()
        except Exception:  # an earlier collective failed: its error was raised there
            pass
    fn = _lib.lib().goclJaxSessionDestroy
    fn.argtypes = [ctypes.c_int64, ctypes.c_int]
    fn.restype = None
    fn(w.handle, 1 if abort else 0)


atexit.register(shutdown)


def _get() -> _Session:
    with _lock:
        if _session is None:
            init()
        return _session


def world_size() -> int:
    """Ranks in the world: processes × local devices."""
    return _get().size


def process_rank() -> int:
    return _get().rank


def local_devices() -> int:
    return _get().ndev


# ------------------------------------------------------------------ calls


def _op(name: str, op: str) -> int:
    if op not in _OPS:
        raise InvalidArgumentError(
            f"gocl.jax.{name} on rank {_get().rank}: op {op!r} is not one of {sorted(_OPS)}")
    return _OPS[op]


def _ffi(target: str, x, shape, vmap_method: str, site: int, in_place: bool = False, **attrs):
    # No has_side_effect: an effectful jitted function leaves JAX's C++
    # dispatch path (about 150 us more per call). Each rank's result is a pure
    # function of all ranks' inputs, and every rank compiles the same program,
    # so XLA keeps or drops (result unused) a collective on every rank alike;
    # the site attribute, unique per call in a compiled program
    # (_jax_sites), keeps two collectives from merging and names the call.
    w = _get()
    attrs = {k: (np.asarray(v, np.int64) if isinstance(v, np.ndarray) else np.int64(v)) for k, v in attrs.items()}
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(tuple(shape), x.dtype), vmap_method=vmap_method,
                            input_output_aliases={0: 0} if in_place else None)
    return call(x, comm=np.int64(w.handle), site=np.int64(site), **attrs)


def _name_site(site: int, name: str) -> None:
    """Tell libgocl where the call of site is (its error sentences say it)."""
    with _lock:
        if _names.get(site) == name:
            return
        _names[site] = name
    b = name.encode("utf-8", "replace")
    fn = _lib.lib().goclJaxNameSite
    fn.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = None
    fn(site, b, len(b))


def _site() -> int:
    """The site of a gocl.jax call made by the caller's caller (the public
    function): its line of user code and its place among that line's calls
    in the current trace (_jax_sites.trace_site). Compiling then gives every
    call in a program a site of its own (_jax_sites.make_unique)."""
    site, name = _jax_sites.trace_site(sys._getframe(1))
    _name_site(site, name)
    return site


def _grad_site(site: int) -> int:
    """The site of the collective a gradient rule issues for the call of site."""
    grad = _jax_sites.digest("grad", site)
    _name_site(grad, f"{_names.get(site, f'site {site}')}, its gradient")
    return grad


def _compiled_site(new: int, old: int, note: str) -> None:
    _name_site(new, f"{_names.get(old, f'site {old}')} ({note})")


_jax_sites.install(_compiled_site)


def _widen(x):
    """gocl reduces no 16-bit integers: reduce them as int32 (same results
    modulo 2^16 for sum and prod, exact for max and min)."""
    if x.dtype in (jnp.int16, jnp.uint16):
        return x.astype(jnp.int32), x.dtype
    return x, None


def _all_reduce_raw(x, op: int, site: int, in_place: bool = False):
    y, narrow = _widen(x)
    y = _ffi("gocl_all_reduce", y, y.shape, "broadcast_all", site, in_place=in_place, op=op)
    return y if narrow is None else y.astype(narrow)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _all_reduce(x, op: int, in_place: bool, site: int):
    return _all_reduce_raw(x, op, site, in_place)


def _all_reduce_fwd(x, op, in_place, site):
    return _all_reduce_raw(x, op, site, in_place), None


def _all_reduce_bwd(op, in_place, site, _, ct):
    if op == _OPS["sum"]:
        return (ct,)
    if op == _OPS["avg"]:
        return (ct / _get().size,)
    name = {v: k for k, v in _OPS.items()}[op]
    raise NotImplementedError(f"gocl.jax.all_reduce: no gradient for op {name!r} (sum and avg have one)")


_all_reduce.defvjp(_all_reduce_fwd, _all_reduce_bwd)


def all_reduce(x, op: str = "sum", in_place: bool = False):
    """Elementwise reduction over all ranks; every rank gets the result.
    Gradient (sum, avg): the cotangent passes through (divided by the world
    size for avg), as for a loss every rank computes the same way.

    ``in_place=True`` reduces into ``x``'s buffer (XLA output aliasing): no
    new result buffer when ``x`` is an intermediate no longer needed (a
    gradient) or a donated argument; XLA copies ``x`` first otherwise, which
    is slower than the default."""
    return _all_reduce(jnp.asarray(x), _op("all_reduce", op), bool(in_place), _site())


def _gathered(x, site: int):  # (n, *x.shape), block i from rank i
    n = _get().size
    return _ffi("gocl_all_gather", x, (n, *x.shape), "sequential", site)


def _place(g, axis: int, tiled: bool):
    g = jnp.moveaxis(g, 0, axis)
    if tiled:
        s = g.shape
        g = g.reshape(s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2:])
    return g


def _unplace(ct, axis: int, tiled: bool, n: int):
    if tiled:
        s = ct.shape
        ct = ct.reshape(s[:axis] + (n, s[axis] // n) + s[axis + 1:])
    return jnp.moveaxis(ct, axis, 0)


def _reduce_scatter_raw(x, op: int, site: int):
    n = _get().size
    if x.ndim == 0 or x.shape[0] % n:
        raise InvalidArgumentError(
            f"gocl.jax.reduce_scatter on rank {_get().rank}: axis 0 of shape {tuple(x.shape)} must split into "
            f"world size {n} equal blocks")
    y, narrow = _widen(x)
    y = _ffi("gocl_reduce_scatter", y, (x.shape[0] // n, *x.shape[1:]), "sequential", site, op=op)
    return y if narrow is None else y.astype(narrow)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _all_gather(x, axis: int, tiled: bool, site: int):
    return _place(_gathered(x, site), axis, tiled)


def _all_gather_fwd(x, axis, tiled, site):
    return _all_gather(x, axis, tiled, site), None


def _all_gather_bwd(axis, tiled, site, _, ct):
    n = _get().size
    blocks = _unplace(ct, axis, tiled, n)  # (n, *x.shape): block i is rank i's share
    flat = blocks.reshape((-1,) + blocks.shape[2:])
    return (_reduce_scatter_raw(flat, _OPS["sum"], _grad_site(site)).reshape(blocks.shape[1:]),)


_all_gather.defvjp(_all_gather_fwd, _all_gather_bwd)


def all_gather(x, axis: int = 0, tiled: bool = False):
    """Every rank's ``x``, as ``jax.lax.all_gather``: a new axis ``axis`` of
    size world_size (or, ``tiled``, concatenated along ``axis``). Gradient:
    reduce_scatter (sum) of the cotangent."""
    x = jnp.asarray(x)
    nd = x.ndim + (0 if tiled else 1)
    if not -nd <= axis < nd or (tiled and x.ndim == 0):
        raise InvalidArgumentError(
            f"gocl.jax.all_gather on rank {_get().rank}: axis {axis} is out of range for shape {tuple(x.shape)}"
            f"{' (tiled)' if tiled else ''}")
    return _all_gather(x, axis % nd, bool(tiled), _site())


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _reduce_scatter(x, op: int, site: int):
    return _reduce_scatter_raw(x, op, site)


def _reduce_scatter_fwd(x, op, site):
    return _reduce_scatter_raw(x, op, site), None


def _reduce_scatter_bwd(op, site, _, ct):
    if op != _OPS["sum"]:
        raise NotImplementedError("gocl.jax.reduce_scatter: only op 'sum' has a gradient")
    return (_place(_gathered(ct, _grad_site(site)), 0, True),)


_reduce_scatter.defvjp(_reduce_scatter_fwd, _reduce_scatter_bwd)


def reduce_scatter(x, op: str = "sum"):
    """Axis 0 cut into world-size blocks; rank i gets the reduction of block
    i over all ranks (``jax.lax.psum_scatter(..., tiled=True)``). Gradient
    (sum): all_gather of the cotangent, tiled."""
    return _reduce_scatter(jnp.asarray(x), _op("reduce_scatter", op), _site())


def broadcast(x, root: int = 0):
    """Rank ``root``'s ``x`` on every rank (no gradient)."""
    x = jnp.asarray(x)
    n = _get().size
    if not 0 <= int(root) < n:
        raise InvalidArgumentError(
            f"gocl.jax.broadcast on rank {_get().rank}: root {root} is not a rank of this world of {n}")
    return _ffi("gocl_broadcast", x, x.shape, "broadcast_all", _site(), root=int(root))


def _all_to_all_raw(x, site: int):
    n = _get().size
    if x.ndim == 0 or x.shape[0] % n:
        raise InvalidArgumentError(
            f"gocl.jax.all_to_all on rank {_get().rank}: axis 0 of shape {tuple(x.shape)} must split into "
            f"world size {n} equal blocks")
    return _ffi("gocl_all_to_all", x, x.shape, "sequential", site)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _all_to_all(x, site: int):
    return _all_to_all_raw(x, site)


_all_to_all.defvjp(lambda x, site: (_all_to_all_raw(x, site), None),
                   lambda site, _, ct: (_all_to_all_raw(ct, _grad_site(site)),))


def all_to_all(x):
    """Axis 0 cut into world-size blocks: block j goes to rank j; the result
    has ``x``'s shape, block i from rank i. It is its own gradient."""
    return _all_to_all(jnp.asarray(x), _site())


def _ppermute_raw(x, perm: tuple, site: int):
    return _ffi("gocl_ppermute", x, x.shape, "broadcast_all", site, perm=np.asarray(perm, np.int64).reshape(-1))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _ppermute(x, perm: tuple, site: int):
    return _ppermute_raw(x, perm, site)


_ppermute.defvjp(lambda x, perm, site: (_ppermute_raw(x, perm, site), None),
                 lambda perm, site, _, ct: (_ppermute_raw(ct, tuple((d, s) for s, d in perm), _grad_site(site)),))


def ppermute(x, perm: Sequence[tuple[int, int]]):
    """``jax.lax.ppermute`` over gocl ranks: for each (source, destination)
    pair, source's ``x`` goes to destination; ranks nobody sends to get
    zeros. Gradient: the inverse permutation."""
    pairs = tuple((int(s), int(d)) for s, d in perm)
    return _ppermute(jnp.asarray(x), pairs, _site())
