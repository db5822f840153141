"""Every place gocl reads torch's internals, each gated on the torch
versions whose source was read for it (GATES). Outside its gate a hook
answers as if it found nothing, and gocl takes its plain path: correct,
only slower or named "custom". tests/python/torch/test_misc_ops.py reads
torch's source for each hook and fails when torch outgrows a gate (then
read the new source and raise it).

    hook              reads                                  saves
    none_ok_callers   the code of torch's all_reduce         ~1.6 us a synchronous all_reduce
    group_devices     _new_process_group_helper's            torch's C++ dispatch (half a small
                      backend_config (its device map)        call) and the name "gocl"
    caller_async      the async_op argument of the           running synchronous calls inline
                      torch.distributed function calling     (torch < 2.8 does not tell the
                                                             backend)
"""

from __future__ import annotations

import inspect
import os
import sys

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from .. import _gates
from . import BACKEND_NAME


TORCH = _gates.major_minor(torch.__version__)
HAS_ASYNC_OP = hasattr(c10d.AllreduceOptions(), "asyncOp")  # torch >= 2.8 tells the backend

# hook -> the (lowest, highest) torch (major, minor) whose source was read.
GATES = {
    "none_ok_callers": ((2, 8), (2, 15)),
    "group_devices": ((2, 8), (2, 15)),
    "caller_async": ((2, 5), (2, 7)),
}


def within(hook: str) -> bool:
    return _gates.within(GATES[hook], TORCH)


def none_ok_callers() -> frozenset:
    """The code objects of callers of pg.allreduce that take None for a
    finished synchronous call: torch's all_reduce, where it waits only on
    a Work it gets (``elif work is not None: work.wait()``, which came with
    asyncOp) and has no other wait; none elsewhere."""
    if not (HAS_ASYNC_OP and within("none_ok_callers")):
        return frozenset()
    return frozenset({inspect.unwrap(dist.distributed_c10d.all_reduce).__code__})


def group_devices(frame) -> list[str] | None:
    """The devices of the group being built when every one of them is
    gocl's (plain "gocl", or "cpu:gocl,cuda:gocl"), else None: only then
    may the creator hand torch the whole ProcessGroup (torch then calls the
    creator once for all devices). torch passes the creator no backend
    string, so it is read from the frame of torch's own
    _new_process_group_helper, found by identity above ``frame``; anything
    unexpected answers None, and torch builds the group itself."""
    if not within("group_devices"):
        return None
    helper = getattr(dist.distributed_c10d, "_new_process_group_helper", None)
    code = getattr(helper, "__code__", None)
    f = frame
    while f is not None and f.f_code is not code:
        f = f.f_back
    config = f.f_locals.get("backend_config") if f is not None else None
    get_map = getattr(config, "get_device_backend_map", None)
    devices = get_map() if get_map is not None else {}
    if not devices or set(map(str, devices.values())) != {BACKEND_NAME}:
        return None
    return list(devices)


_HERE = os.path.dirname(os.path.abspath(__file__))
_C10D_PY = os.path.join("torch", "distributed", "distributed_c10d.py")


def caller_async(opts) -> bool:
    """Whether the caller asked for an asynchronous call.

    torch >= 2.8 says so in ``opts.asyncOp``. Older torch does not tell the
    backend, so read the ``async_op`` argument of the torch.distributed
    function that called gocl (e.g. ``all_reduce``); calls from anywhere
    else (C++: DDP's reducer, functional collectives), and every call on a
    torch outside the gate, are asynchronous, as C++ option defaults say.
    """
    flag = getattr(opts, "asyncOp", None)
    if flag is not None:
        return bool(flag)
    if not within("caller_async"):
        return True
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_HERE):
        f = f.f_back
    if f is not None and f.f_code.co_filename.endswith(_C10D_PY):
        v = f.f_locals.get("async_op")
        if isinstance(v, bool):
            return v
    return True
