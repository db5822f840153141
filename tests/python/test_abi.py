"""The Python side of the ABI against capi/gocl.h, its source of truth.

_core.py and errors.py repeat the header's enum values, and _lib.py its
prototypes and goclConfig_t, by hand (ctypes cannot read a header). This
test parses the header and compares every value, every signature and the
struct layout, so a change on one side cannot silently break the other. The
Go side is checked at compile time (capi/abi.go). Nothing here loads the
library.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from gocl import _core, _lib, errors

HEADER = Path(__file__).resolve().parents[2] / "capi" / "gocl.h"


def _source() -> str:
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _enums(src: str) -> dict[str, dict[str, int]]:
    """typedef enum { a = 1, b = 2 } name_t; -> {name_t: {a: 1, b: 2}}."""
    out = {}
    for body, name in re.findall(r"typedef\s+enum\s*\{(.*?)\}\s*(\w+)\s*;", src, re.S):
        values = {}
        for item in body.split(","):
            key, _, value = item.partition("=")
            values[key.strip()] = int(value.strip(), 0)
        out[name] = values
    return out


def _defines(src: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*#define\s+(\w+)[ \t]+([^\n]+?)\s*$", src, re.M))


def _prototypes(src: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (return type, [parameter types]), parameter names dropped."""
    out = {}
    for ret, name, params in re.findall(r"^\s*((?:const\s+)?\w+\s*\*?)\s*(gocl\w+)\s*\(([^)]*)\)\s*;", src, re.M):
        types = []
        for p in params.split(","):
            p = " ".join(p.replace("*", " * ").split())
            if p in ("", "void"):
                continue
            words = p.split(" ")
            types.append(" ".join(words[:-1]))  # the last word is the name
        out[name] = (" ".join(ret.replace("*", " * ").split()), types)
    return out


def _struct(src: str, tag: str) -> list[tuple[str, str]]:
    body = re.search(r"typedef\s+struct\s+" + tag + r"\s*\{(.*?)\}", src, re.S).group(1)
    fields = []
    for decl in body.split(";"):
        words = decl.split()
        if words:
            fields.append((words[-1], " ".join(words[:-1])))
    return fields


SRC = _source()
ENUMS = _enums(SRC)
DEFINES = _defines(SRC)
PROTOTYPES = _prototypes(SRC)

# C types of gocl.h as ctypes declares them.
_HANDLES = ("goclComm_t", "goclStream_t", "goclEvent_t")
_ENUM_TYPES = ("goclResult_t", "goclDataType_t", "goclRedOp_t", "goclScalarResidence_t")
CTYPES = {
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "unsigned int": ctypes.c_uint,
    "double": ctypes.c_double,
    "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p,
    "const char *": ctypes.c_char_p,
    "int *": ctypes.POINTER(ctypes.c_int),
    "const int *": ctypes.POINTER(ctypes.c_int),
    "goclUniqueId": _lib.UniqueId,
    "goclUniqueId *": ctypes.POINTER(_lib.UniqueId),
    "const goclUniqueId *": ctypes.POINTER(_lib.UniqueId),
    "goclConfig_t *": ctypes.POINTER(_lib.Config),
    "goclHostFn_t": ctypes.c_void_p,  # a function pointer
    **{t: ctypes.c_int for t in _ENUM_TYPES},
    **{t + " *": ctypes.POINTER(ctypes.c_int) for t in _ENUM_TYPES},
    **{t: ctypes.c_void_p for t in _HANDLES},
    **{"const " + t: ctypes.c_void_p for t in _HANDLES},
    **{t + " *": ctypes.POINTER(ctypes.c_void_p) for t in _HANDLES},
}


def test_parser_sees_the_whole_header():
    # A parser that finds nothing would make every comparison below vacuous.
    assert set(ENUMS) == {"goclResult_t", "goclDataType_t", "goclRedOp_t", "goclScalarResidence_t"}
    assert len(ENUMS["goclDataType_t"]) == 16 and len(ENUMS["goclResult_t"]) == 10
    assert len(PROTOTYPES) == 46
    assert {"GOCL_UNIQUE_ID_BYTES", "GOCL_CONFIG_MAGIC", "GOCL_SPLIT_NOCOLOR"} <= set(DEFINES)


@pytest.mark.parametrize("name, header", [
    ("INT8", "goclInt8"), ("UINT8", "goclUint8"), ("INT32", "goclInt32"), ("UINT32", "goclUint32"),
    ("INT64", "goclInt64"), ("UINT64", "goclUint64"), ("FLOAT16", "goclFloat16"), ("FLOAT32", "goclFloat32"),
    ("FLOAT64", "goclFloat64"), ("BFLOAT16", "goclBfloat16"),
])
def test_dtype_values(name, header):
    assert getattr(_core, name) == ENUMS["goclDataType_t"][header]


def test_every_dtype_has_a_python_name():
    real = {v for k, v in ENUMS["goclDataType_t"].items() if k != "goclNumTypes"}
    ours = {getattr(_core, n) for n in ("INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FLOAT16",
                                         "FLOAT32", "FLOAT64", "BFLOAT16")}
    assert ours == real


@pytest.mark.parametrize("name, header", [
    ("SUM", "goclSum"), ("PROD", "goclProd"), ("MAX", "goclMax"), ("MIN", "goclMin"), ("AVG", "goclAvg"),
])
def test_op_values(name, header):
    assert getattr(_core, name) == ENUMS["goclRedOp_t"][header]


def test_result_codes():
    codes = ENUMS["goclResult_t"]
    assert _core.SUCCESS == codes["goclSuccess"]
    assert _core.IN_PROGRESS == codes["goclInProgress"]
    assert errors.GoclSystemError.code == codes["goclSystemError"]
    assert errors.GoclInternalError.code == codes["goclInternalError"]
    assert errors.InvalidArgumentError.code == codes["goclInvalidArgument"]
    assert errors.InvalidUsageError.code == codes["goclInvalidUsage"]
    assert errors.RemoteError.code == codes["goclRemoteError"]
    assert errors.GoclTimeoutError.code == codes["goclTimeout"]
    # every failure code but the CUDA one (no CUDA in gocl) has its own class
    failures = {v for k, v in codes.items() if k not in ("goclSuccess", "goclInProgress", "goclNumResults",
                                                          "goclUnhandledCudaError")}
    assert {c for c in failures if errors.error_for(c, "m").__class__ is not errors.GoclError} == failures


def test_defines():
    assert _lib.UNIQUE_ID_BYTES == int(DEFINES["GOCL_UNIQUE_ID_BYTES"])
    assert ctypes.sizeof(_lib.UniqueId) == _lib.UNIQUE_ID_BYTES
    assert _lib.CONFIG_MAGIC == int(DEFINES["GOCL_CONFIG_MAGIC"].rstrip("uU"), 0)
    assert _lib.CONFIG_UNDEF_DOUBLE == float(DEFINES["GOCL_CONFIG_UNDEF_DOUBLE"].strip("()"))
    assert _core.SPLIT_NOCOLOR == int(DEFINES["GOCL_SPLIT_NOCOLOR"])
    assert _core.SHRINK_DEFAULT == int(DEFINES["GOCL_SHRINK_DEFAULT"], 0)
    assert _core.SHRINK_ABORT == int(DEFINES["GOCL_SHRINK_ABORT"], 0)


def test_config_layout():
    fields = _struct(SRC, "goclConfig_v1")
    assert [(name, CTYPES[ctype]) for name, ctype in fields] == [(n, t) for n, t in _lib.Config._fields_]

    class Mirror(ctypes.Structure):  # the same fields as C declares them, laid out by ctypes
        _fields_ = [(name, CTYPES[ctype]) for name, ctype in fields]
    assert ctypes.sizeof(_lib.Config) == ctypes.sizeof(Mirror)
    assert [getattr(_lib.Config, n).offset for n, _ in fields] == [getattr(Mirror, n).offset for n, _ in fields]
    assert _lib.config().size == ctypes.sizeof(_lib.Config)


def test_every_prototype_is_declared():
    declared = set(_lib._SIGNATURES) | set(_lib._STRING_SIGNATURES)
    assert declared == set(PROTOTYPES), (
        f"missing in _lib.py: {sorted(set(PROTOTYPES) - declared)}, not in gocl.h: {sorted(declared - set(PROTOTYPES))}")
    assert not set(_lib._SIGNATURES) & set(_lib._STRING_SIGNATURES)


@pytest.mark.parametrize("name", sorted(PROTOTYPES))
def test_signature(name):
    ret, params = PROTOTYPES[name]
    if name in _lib._STRING_SIGNATURES:
        argtypes, restype = _lib._STRING_SIGNATURES[name], ctypes.c_char_p
    else:
        argtypes, restype = _lib._SIGNATURES[name], ctypes.c_int
    assert CTYPES[ret] is restype, f"{name} returns {ret}"
    want = [CTYPES[p] for p in params]
    assert len(argtypes) == len(want), f"{name} takes {len(want)} arguments ({', '.join(params)})"
    for i, (got, exp) in enumerate(zip(argtypes, want)):
        assert got is exp, f"{name} argument {i} ({params[i]}): _lib.py has {got.__name__}, gocl.h {exp.__name__}"
