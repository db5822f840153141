"""gocl on Ray: a ``ray.util.collective`` backend and Ray Train's TorchTrainer.

Two ways in, both on a Ray cluster whose workers have gocl installed
(``pip install "gocl[ray]"``):

**ray.util.collective** (recent Ray has a registry of collective backends,
``ray.util.collective.backend_registry.register_collective_backend``, added
by ray-project/ray#60701 in 2026; tested with Ray 2.60).
:func:`register` adds the backend ``"GOCL"`` (:class:`GoclGroup`). Ray builds
a group's object in each process that uses it, from the registry of *that*
process, so every process registers: the driver (``create_collective_group``
checks its registry) and every actor. The simplest way is Ray's worker
setup hook (job level: ``ray.init``'s runtime_env), which runs in every
worker process Ray starts for the job::

    import ray, ray.util.collective as col, gocl.ray
    gocl.ray.register()                                # the driver
    ray.init(runtime_env={"worker_process_setup_hook": "gocl.ray.register"})

    @ray.remote
    class Worker:
        def setup(self, world_size, rank):
            col.init_collective_group(world_size, rank, backend="gocl", group_name="g")
        def step(self, x):
            col.allreduce(x, group_name="g")           # numpy or torch CPU tensors
            return x

(``import gocl.ray`` in the actor, then :func:`register`, works as well.)
Every ``ray.util.collective`` call is served: allreduce, reduce, broadcast,
allgather, reducescatter, barrier, send, recv.
The group's rank 0 makes the gocl unique id and publishes it in Ray's GCS
key-value store; the others wait for it up to GOCL_TIMEOUT (default 600 s).
Arrays are numpy arrays or torch tensors of any dtype numpy has (bfloat16
with ml_dtypes installed); torch CUDA tensors are copied through host memory
(correct, not fast). One tensor per call: the ``*_multigpu`` variants,
which pass several, are refused.

**Ray Train**: ``TorchConfig(backend="gocl")`` works as it is on a cluster
whose workers have gocl installed (torch >= 2.5 registers the torch backend
at ``import torch``). :func:`torch_config` gives a TorchConfig that also
registers the backend in each worker before the process group is made (for
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and older torch) and names the worker
and the fix when a worker cannot import gocl::

    from ray.train.torch import TorchTrainer
    trainer = TorchTrainer(train_fn, torch_config=gocl.ray.torch_config(),
                           scaling_config=ScalingConfig(num_workers=4))

Importing this module needs Ray (``ray.util.collective``), and torch only
for torch tensors and :func:`torch_config`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np

try:
    # Absolute imports: "ray" here is the top-level Ray package, not this module.
    import ray
    from ray.util.collective.collective_group.base_collective_group import BaseGroup
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gocl.ray needs Ray, which is not installed in this Python: pip install \"gocl[ray]\" "
        f"({_exc})") from _exc

from . import _gates, _rendezvous
from .comm import Communicator
from .errors import GoclTimeoutError, InvalidArgumentError, InvalidUsageError

__all__ = ["BACKEND", "GoclGroup", "register", "is_registered", "torch_config"]

BACKEND = "GOCL"  # ray.util.collective upper-cases backend names: "gocl" works too

_lock = threading.Lock()
_OPS = {"SUM": "sum", "PRODUCT": "prod", "MIN": "min", "MAX": "max"}


def _registry():
    try:
        from ray.util.collective import backend_registry  # noqa: PLC0415
    except ImportError:
        raise InvalidUsageError(
            f"gocl.ray: Ray {ray.__version__} has no collective backend registry "
            "(ray.util.collective.backend_registry, ray-project/ray#60701), so gocl cannot be added to "
            "ray.util.collective: upgrade Ray (pip install -U \"gocl[ray]\"); Ray Train's "
            "TorchConfig(backend=\"gocl\") does not need it") from None
    return backend_registry


def is_registered() -> bool:
    """Whether this process's ray.util.collective knows the backend "GOCL"."""
    return _registry().BackendRegistry().is_registered(BACKEND)


def register() -> bool:
    """Register :class:`GoclGroup` as ray.util.collective's backend "GOCL"
    in this process. Returns True if this call registered it, False if it
    already was. Cheap (loads no libgocl.so); usable as Ray's
    ``worker_process_setup_hook`` ("gocl.ray.register")."""
    reg = _registry()
    with _lock:
        if reg.BackendRegistry().is_registered(BACKEND):
            current = reg.BackendRegistry().get(BACKEND)
            if current is not GoclGroup and getattr(current, "__qualname__", "") != GoclGroup.__qualname__:
                raise InvalidUsageError(
                    f"gocl.ray.register: ray.util.collective already has a backend named {BACKEND} "
                    f"({current.__module__}.{current.__qualname__}), not gocl's: register it under "
                    "another name or remove the other registration")
            return False
        reg.register_collective_backend(BACKEND, GoclGroup)
        return True


# ------------------------------------------------------------------ arrays

class _Buffer:
    """A ray.util.collective argument (numpy array or torch tensor) seen as
    a C-contiguous numpy array: the argument's own memory when it can be
    (contiguous numpy, CPU torch tensors), else a host copy that
    :meth:`write_back` copies into the argument after the call."""

    __slots__ = ("obj", "array", "staged")

    def __init__(self, obj: Any, where: str):
        self.obj = obj
        self.staged = False
        if isinstance(obj, np.ndarray):
            if obj.flags.c_contiguous and obj.flags.writeable:
                self.array = obj
            else:
                self.array, self.staged = np.ascontiguousarray(obj).copy(), True
            return
        torch = _torch_if_tensor(obj)
        if torch is None:
            raise InvalidArgumentError(
                f"{where}: got a {type(obj).__module__}.{type(obj).__qualname__}; the gocl backend takes "
                "numpy arrays and torch tensors: convert it (np.asarray / torch.as_tensor) before the call")
        t = obj.detach()
        if t.device.type == "cpu" and t.is_contiguous() and not t.is_conj() and not t.is_neg():
            self.array = _tensor_numpy(torch, t, where)
        else:
            self.array, self.staged = _tensor_numpy(torch, t.to("cpu").contiguous().resolve_conj().resolve_neg(),
                                                    where), True

    def write_back(self) -> None:
        if not self.staged:
            return
        if isinstance(self.obj, np.ndarray):
            np.copyto(self.obj, self.array)
        else:
            _copy_into(self.obj, self.array)


def _torch_if_tensor(obj: Any):
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(obj, torch.Tensor) else None


def _tensor_numpy(torch, t, where: str) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        try:
            import ml_dtypes  # noqa: PLC0415
        except ImportError:
            raise InvalidArgumentError(
                f"{where}: a bfloat16 tensor needs ml_dtypes (numpy's bfloat16) for gocl's numpy API: "
                "pip install ml_dtypes, or pass float32") from None
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as exc:
        raise InvalidArgumentError(f"{where}: the gocl backend moves tensors as numpy arrays and a {t.dtype} "
                                   f"tensor has none ({exc}): pass another dtype") from None


def _copy_into(target: Any, src: np.ndarray) -> None:
    """Copy a numpy array into a numpy array or torch tensor of as many elements."""
    if isinstance(target, np.ndarray):
        np.copyto(target, src.reshape(target.shape))
        return
    torch = _torch_if_tensor(target)
    if src.dtype.name == "bfloat16":
        t = torch.from_numpy(np.ascontiguousarray(src).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(src))
    with torch.no_grad():
        target.copy_(t.reshape(target.shape))


def _one(arg: Any, what: str, where: str) -> Any:
    """ray.util.collective passes a list of one tensor per call (several:
    the *_multigpu calls, one per GPU of the process)."""
    if not isinstance(arg, (list, tuple)):
        return arg
    if len(arg) != 1:
        raise InvalidArgumentError(
            f"{where}: {what} holds {len(arg)} tensors; the gocl backend takes one per call (one rank per "
            "process): use the calls without _multigpu, or one actor per device")
    return arg[0]


def _op_name(opts: Any, where: str) -> str:
    op = getattr(opts, "reduceOp", None)
    name = getattr(op, "name", str(op))
    if name not in _OPS:
        raise InvalidArgumentError(f"{where}: reduce op {op!r} is not one of ray.util.collective's "
                                   "SUM, PRODUCT, MIN, MAX")
    return _OPS[name]


# ------------------------------------------------------------------ the group

_generation: dict[str, int] = {}  # group name -> how many times this process has made it


# Ray's private key-value store (ray.experimental.internal_kv: _internal_kv_put(key,
# value, overwrite=True), _internal_kv_get(key), _internal_kv_del(key), in the GCS),
# read in the source of the Ray versions in this gate, (lowest, highest) (major, minor).
# Outside it gocl takes Ray's public API instead: a detached named actor holds the id
# (slower to start, the same rendezvous). tests/engines/test_ray.py runs both and fails
# when the installed Ray outgrows the gate (then read its source and raise it).
KV_GATE = ((2, 60), (2, 60))


class _PrivateKV:
    """The unique id in Ray's internal key-value store (KV_GATE's Ray versions)."""

    def __init__(self):
        from ray.experimental import internal_kv  # noqa: PLC0415

        self._kv = internal_kv

    def put(self, key: str, value: bytes) -> None:
        self._kv._internal_kv_put(key, value, overwrite=True)

    def get(self, key: str) -> bytes | None:
        return self._kv._internal_kv_get(key)

    def delete(self, key: str) -> None:
        self._kv._internal_kv_del(key)


class _ActorKV:
    """The unique id in a detached named actor (Ray's public API), one per key."""

    @staticmethod
    def _name(key: str) -> str:
        return "gocl-uid:" + key

    def put(self, key: str, value: bytes) -> None:
        box = ray.remote(num_cpus=0)(_UidBox).options(
            name=self._name(key), namespace="gocl", lifetime="detached", get_if_exists=True).remote()
        ray.get(box.put.remote(value))

    def get(self, key: str) -> bytes | None:
        try:
            box = ray.get_actor(self._name(key), namespace="gocl")
        except ValueError:  # not made yet
            return None
        return ray.get(box.get.remote())

    def delete(self, key: str) -> None:
        try:
            ray.kill(ray.get_actor(self._name(key), namespace="gocl"))
        except ValueError:
            pass


class _UidBox:
    def __init__(self):
        self._v = None

    def put(self, v: bytes) -> None:
        self._v = v

    def get(self) -> bytes | None:
        return self._v


def _kv():
    """Where rank 0 publishes a group's unique id: Ray's private store inside
    KV_GATE (and only if it still has the three functions), else an actor."""
    if _gates.within(KV_GATE, _gates.major_minor(getattr(ray, "__version__", ""))):
        try:
            kv = _PrivateKV()
            if all(callable(getattr(kv._kv, f, None)) for f in ("_internal_kv_put", "_internal_kv_get", "_internal_kv_del")):
                return kv
        except ImportError:
            pass
    return _ActorKV()


def _kv_key(group_name: str, generation: int) -> str:
    try:
        job = ray.get_runtime_context().get_job_id()
    except Exception:  # noqa: BLE001 - outside a job: the name alone
        job = "nojob"
    return f"gocl/ray/unique_id/{job}/{group_name}/{generation}"


class GoclGroup(BaseGroup):
    """One rank of a ray.util.collective group over a gocl communicator.

    Ray makes it (``init_collective_group(..., backend="gocl")``, or an
    actor's first call in a group declared with ``create_collective_group``);
    its rank 0 makes the unique id and publishes it in Ray's key-value store
    (the GCS) under the job, the group's name and the count of groups of that
    name this process has made, and deletes it once every rank has joined.
    """

    def __init__(self, world_size: int, rank: int, group_name: str):
        super().__init__(world_size, rank, group_name)
        kv = _kv()

        gen = _generation.get(group_name, 0)
        _generation[group_name] = gen + 1
        key = _kv_key(group_name, gen)
        timeout = _rendezvous.default_timeout()
        where = f"gocl.ray: group {group_name!r} rank {rank} of {world_size}"
        if rank == 0:
            from .comm import unique_id  # noqa: PLC0415

            uid = unique_id()
            kv.put(key, uid)
        else:
            deadline = time.monotonic() + timeout
            pause = 0.01
            while True:
                uid = kv.get(key)
                if uid is not None:
                    break
                if time.monotonic() > deadline:
                    raise GoclTimeoutError(
                        f"{where}: rank 0 did not publish the group's unique id in Ray's key-value store "
                        f"({key!r}) within {timeout:g} s: check that rank 0 of {group_name!r} was created "
                        "(init_collective_group, or a first call in a group declared with "
                        "create_collective_group) with backend 'gocl', and that every rank makes this group "
                        "as many times; GOCL_TIMEOUT sets the wait")
                time.sleep(pause)
                pause = min(pause * 2, 0.2)
        try:
            self._comm = Communicator(uid, rank, world_size)
        finally:
            if rank == 0:
                # every rank has joined (the init is collective); the barrier
                # below keeps any rank from making the next group of this name
                # before the key is gone.
                try:
                    kv.delete(key)
                except Exception:  # noqa: BLE001 - a stale key only names an old round
                    pass
        self._comm.barrier()

    @classmethod
    def backend(cls) -> str:
        return BACKEND

    @classmethod
    def check_backend_availability(cls) -> bool:
        # Whether libgocl.so is there, without loading it: Ray asks in the
        # driver too, which may fork later (a loaded Go runtime forbids that).
        from . import _lib  # noqa: PLC0415

        return _lib.loaded() or _lib.library_path().is_file()

    def _where(self, name: str) -> str:
        return f"gocl.ray {name} on rank {self._rank} of group {self._group_name!r}"

    def destroy_group(self) -> None:
        comm, self._comm = getattr(self, "_comm", None), None
        if comm is not None:
            comm.destroy()

    def _c(self, name: str) -> Communicator:
        if self._comm is None:
            raise InvalidUsageError(f"{self._where(name)}: the group was destroyed: make it again "
                                    "(init_collective_group) before calling it")
        return self._comm

    def allreduce(self, tensor, allreduce_options=None) -> None:
        name = "allreduce"
        where = self._where(name)
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._c(name).all_reduce(b.array, op=_op_name(allreduce_options, where))
        b.write_back()

    def barrier(self, barrier_options=None) -> None:
        self._c("barrier").barrier()

    def reduce(self, tensor, reduce_options=None) -> None:
        name = "reduce"
        where = self._where(name)
        root = int(getattr(reduce_options, "root_rank", 0))
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._c(name).reduce(b.array, op=_op_name(reduce_options, where), root=root)
        if self._rank == root:
            b.write_back()

    def broadcast(self, tensor, broadcast_options=None) -> None:
        name = "broadcast"
        where = self._where(name)
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._c(name).broadcast(b.array, root=int(getattr(broadcast_options, "root_rank", 0)))
        b.write_back()

    def allgather(self, tensor_list, tensor, allgather_options=None) -> None:
        name = "allgather"
        where = self._where(name)
        outs = _one(tensor_list, "tensor_list", where)
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._check_list(outs, b.array, "tensor_list", where)
        gathered = self._c(name).all_gather(b.array)
        for i, t in enumerate(outs):
            _copy_into(t, gathered[i])

    def reducescatter(self, tensor, tensor_list, reducescatter_options=None) -> None:
        name = "reducescatter"
        where = self._where(name)
        out = _Buffer(_one(tensor, "tensor", where), where)
        ins = _one(tensor_list, "tensor_list", where)
        self._check_list(ins, out.array, "tensor_list", where)
        stacked = np.stack([_Buffer(t, where).array.reshape(out.array.shape) for t in ins])
        self._c(name).reduce_scatter(stacked, op=_op_name(reducescatter_options, where), out=out.array)
        out.write_back()

    def send(self, tensor, send_options) -> None:
        name = "send"
        where = self._where(name)
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._c(name).send(self._first(b.array, send_options, where), int(send_options.dst_rank))

    def recv(self, tensor, recv_options) -> None:
        name = "recv"
        where = self._where(name)
        b = _Buffer(_one(tensor, "tensor", where), where)
        self._c(name).recv(self._first(b.array, recv_options, where), int(recv_options.src_rank))
        b.write_back()

    def _check_list(self, items, like: np.ndarray, what: str, where: str) -> None:
        if not isinstance(items, (list, tuple)) or len(items) != self._world_size:
            n = len(items) if isinstance(items, (list, tuple)) else type(items).__name__
            raise InvalidArgumentError(f"{where}: {what} must hold world_size={self._world_size} tensors, "
                                       f"one per rank; got {n}")
        for i, t in enumerate(items):
            size = int(np.prod(getattr(t, "shape", ())))
            if size != like.size:
                raise InvalidArgumentError(
                    f"{where}: {what}[{i}] has {size} elements but this rank's tensor has {like.size}: "
                    "every tensor of the call needs the same number of elements")

    @staticmethod
    def _first(a: np.ndarray, opts: Any, where: str) -> np.ndarray:
        n = int(getattr(opts, "n_elements", 0) or 0)
        if n == 0:
            return a
        if not 0 < n <= a.size:
            raise InvalidArgumentError(f"{where}: n_elements={n} but the tensor has {a.size} elements")
        return a.reshape(-1)[:n]


# ------------------------------------------------------------------ Ray Train

def _register_in_train_worker() -> None:
    """Run in each Ray Train worker before its process group is made. Made
    inside :func:`_train_classes` and shipped by value (it names nothing of
    gocl's), so that a worker without gocl gets this sentence instead of
    failing to unpickle a gocl function."""
    import ray as _ray  # noqa: PLC0415

    try:
        from gocl import torch_backend  # noqa: PLC0415
    except ImportError as exc:
        try:
            rank = _ray.train.get_context().get_world_rank()
        except Exception:  # noqa: BLE001
            rank = "?"
        raise ImportError(
            f"gocl: Ray Train worker rank {rank} (node {_ray.util.get_node_ip_address()}) cannot import gocl "
            f"({exc}): install gocl in every node's Python (pip install \"gocl[ray]\"), or pass "
            "runtime_env={'pip': ['gocl[ray]']} to ray.init") from None
    torch_backend.register()


_train: dict[str, type] = {}


def _train_classes() -> dict[str, type]:
    """GoclTorchConfig and its backend, made on first use (they subclass Ray
    Train's torch classes, whose import imports torch). They live in this
    module's namespace (module __getattr__), so that pickles name them."""
    with _lock:
        if not _train:
            from ray.train.torch import TorchConfig  # noqa: PLC0415
            from ray.train.torch.config import _TorchBackend  # noqa: PLC0415

            setup = _by_value(_register_in_train_worker)

            class GoclTorchBackend(_TorchBackend):
                """Ray Train's torch backend, with gocl registered in every
                worker before init_process_group."""

                def on_start(self, worker_group, backend_config):
                    worker_group.execute(setup)
                    super().on_start(worker_group, backend_config)

            class GoclTorchConfig(TorchConfig):
                """TorchConfig(backend="gocl") whose workers register gocl first."""

                @property
                def backend_cls(self):
                    return GoclTorchBackend

            for cls in (GoclTorchBackend, GoclTorchConfig):
                cls.__module__ = __name__
                cls.__qualname__ = cls.__name__
                _train[cls.__name__] = cls
    return _train


def _by_value(fn):
    """A copy of fn, globals reduced to the builtins, that no module holds:
    cloudpickle ships such a function by value."""
    import types  # noqa: PLC0415

    copy = types.FunctionType(fn.__code__, {"__builtins__": __builtins__}, fn.__name__, fn.__defaults__)
    copy.__qualname__ = f"{fn.__qualname__}.<shipped by value>"
    copy.__doc__ = fn.__doc__
    return copy


def __getattr__(name: str):
    if name in ("GoclTorchConfig", "GoclTorchBackend"):
        return _train_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_config(**kwargs: Any):
    """``ray.train.torch.TorchConfig(backend="gocl", **kwargs)`` that also
    registers gocl's torch backend in every worker before Ray Train calls
    ``init_process_group`` there (needed where torch's backend autoload is
    off: TORCH_DEVICE_BACKEND_AUTOLOAD=0), and says which worker lacks gocl
    when one does."""
    backend = kwargs.pop("backend", "gocl")
    if backend != "gocl":
        raise InvalidArgumentError(f"gocl.ray.torch_config: backend={backend!r}; this config is for 'gocl' "
                                   "(use ray.train.torch.TorchConfig for other backends)")
    return _train_classes()["GoclTorchConfig"](backend="gocl", **kwargs)
