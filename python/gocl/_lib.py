"""Loads libgocl.so lazily and declares the C signatures.

The Go runtime starts threads when the library is loaded, and a process
that forks after that cannot use it. So nothing here runs at import time:
the library is loaded by the first call that needs it (importing gocl, or
registering the torch backend, never loads it). ``ctypes.CDLL`` releases the
GIL during every call, so a blocking collective does not freeze Python.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from . import _locate
from .errors import ForkError

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_loaded_pid: int | None = None
_forked = False

c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
UNIQUE_ID_BYTES = 128


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]

    # Never UniqueId(data) or uid.internal: ctypes treats a c_char array as a
    # C string and stops at the first NUL byte, which corrupts the id.
    @classmethod
    def from_bytes(cls, data: bytes) -> "UniqueId":
        if len(data) != UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id is {UNIQUE_ID_BYTES} bytes, got {len(data)}")
        uid = cls()
        ctypes.memmove(ctypes.addressof(uid), data, UNIQUE_ID_BYTES)
        return uid

    def to_bytes(self) -> bytes:
        return ctypes.string_at(ctypes.addressof(self), UNIQUE_ID_BYTES)


class Config(ctypes.Structure):
    """goclConfig_t (gocl.h); make it with config()."""

    _fields_ = [("size", c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("timeout", ctypes.c_double)]


CONFIG_MAGIC = 0x676F636C
CONFIG_UNDEF_DOUBLE = -1.0


def config(timeout: float | None = None) -> Config:
    """A goclConfig_t as GOCL_CONFIG_INITIALIZER makes it, with the given fields set."""
    cfg = Config(ctypes.sizeof(Config), CONFIG_MAGIC, 0, CONFIG_UNDEF_DOUBLE)
    if timeout is not None:
        cfg.timeout = timeout
    return cfg


# name -> argtypes of the functions that return goclResult_t (an int), and
# of those that return a C string. tests/python/test_abi.py checks both
# against gocl.h's prototypes.
_SIGNATURES = {
    "goclGetVersion": [ctypes.POINTER(c_int)],
    "goclGetUniqueId": [ctypes.POINTER(UniqueId)],
    "goclGetUniqueIdAt": [ctypes.POINTER(UniqueId), ctypes.c_char_p],
    "goclExchangeUniqueId": [ctypes.POINTER(UniqueId), ctypes.c_char_p, c_int, c_int, c_int, c_int, ctypes.c_char_p,
                             ctypes.c_double],
    "goclCommInitRank": [ctypes.POINTER(c_void_p), c_int, UniqueId, c_int],
    "goclCommInitRankConfig": [ctypes.POINTER(c_void_p), c_int, UniqueId, c_int, ctypes.POINTER(Config)],
    "goclCommInitAll": [ctypes.POINTER(c_void_p), c_int, ctypes.POINTER(c_int)],
    "goclCommSplit": [c_void_p, c_int, c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(Config)],
    "goclCommShrink": [c_void_p, ctypes.POINTER(c_int), c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(Config), c_int],
    "goclCommRevoke": [c_void_p, c_int],
    "goclCommGetUniqueId": [c_void_p, ctypes.POINTER(UniqueId)],
    "goclCommGrow": [c_void_p, c_int, ctypes.POINTER(UniqueId), c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(Config)],
    "goclCommDestroy": [c_void_p],
    "goclCommAbort": [c_void_p],
    "goclCommGetAsyncError": [c_void_p, ctypes.POINTER(c_int)],
    "goclCommDumpTrace": [c_void_p, ctypes.c_char_p],
    "goclCommCount": [c_void_p, ctypes.POINTER(c_int)],
    "goclCommUserRank": [c_void_p, ctypes.POINTER(c_int)],
    "goclCommCuDevice": [c_void_p, ctypes.POINTER(c_int)],
    "goclRedOpCreatePreMulSum": [ctypes.POINTER(c_int), c_void_p, c_int, c_int, c_void_p],
    "goclRedOpDestroy": [c_int, c_void_p],
    "goclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, c_void_p, c_void_p],
    "goclAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
    "goclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclAlltoAll": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
    "goclGather": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclSend": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclRecv": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
    "goclRecvAny": [c_void_p, c_size_t, c_int, ctypes.POINTER(c_int), c_void_p, c_void_p],
    "goclGroupStart": [],
    "goclGroupEnd": [],
    "goclStreamCreate": [ctypes.POINTER(c_void_p)],
    "goclStreamSynchronize": [c_void_p],
    "goclStreamQuery": [c_void_p],
    "goclStreamDestroy": [c_void_p],
    "goclEventCreate": [ctypes.POINTER(c_void_p)],
    "goclEventRecord": [c_void_p, c_void_p],
    "goclEventQuery": [c_void_p],
    "goclEventSynchronize": [c_void_p],
    "goclEventDestroy": [c_void_p],
    "goclLaunchHostFunc": [c_void_p, c_void_p, c_void_p],  # fn: a ctypes CFUNCTYPE(None, c_void_p)
}
_STRING_SIGNATURES = {
    "goclGetErrorString": [c_int],
    "goclGetLastError": [c_void_p],
}


def library_path() -> Path:
    """Where libgocl.so is: $GOCL_LIBRARY, else next to this file."""
    return _locate.path("libgocl.so", "GOCL_LIBRARY")


def _mark_forked() -> None:
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_mark_forked)


def lib() -> ctypes.CDLL:
    """The loaded library (loading it on first use)."""
    global _lib, _loaded_pid
    if _forked:
        raise ForkError(
            "gocl was loaded in a parent process and this process was created by fork(): the Go runtime "
            "inside gocl does not survive fork. Use the spawn or forkserver start method "
            "(multiprocessing.set_start_method('spawn'), torch.multiprocessing.spawn, "
            "DataLoader(multiprocessing_context='spawn')).")
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            if not path.exists():
                raise OSError(
                    f"libgocl.so not found at {path}: reinstall gocl (uv pip install -e .) or set GOCL_LIBRARY")
            dll = ctypes.CDLL(str(path))  # its constructors give Go's threads their timer slack (capi/gocl.c)
            for signatures, restype in ((_SIGNATURES, c_int), (_STRING_SIGNATURES, c_char_p)):
                for name, argtypes in signatures.items():
                    fn = getattr(dll, name)
                    fn.argtypes = argtypes
                    fn.restype = restype
            _loaded_pid = os.getpid()
            _lib = dll
    return _lib


def loaded() -> bool:
    """Whether the library is loaded in this process (tests of laziness use it)."""
    return _lib is not None
