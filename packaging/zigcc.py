#!/usr/bin/env python3
"""cgo's C compiler for builds without one, or aimed at an old glibc: ``zig cc``.

    GOCL_ZIG=/path/to/zig CC="packaging/zigcc.py -target aarch64-linux-gnu.2.17"

Runs ``$GOCL_ZIG cc`` (hatch_build.py points it at the zig binary of the
ziglang package from PyPI; default: ``python -m ziglang``) with the same
arguments. CC stays the same string whichever environment zig comes from, so
Go's build cache keeps serving the cgo packages it built before. One argument is replaced, because zig's linker front end refuses it:
``-Wl,--unresolved-symbols=ignore-in-object-files``. go-nvml (gocl-doctor)
links with it so that its NVML calls stay unresolved until it dlopen()s
libnvidia-ml.so.1 with RTLD_GLOBAL and the first call binds them (lazy
binding). Here the link gets the same result another way: the undefined
``nvml*`` symbols of the object files are defined by a stand-in shared
library whose soname is libm.so.6 (a library every glibc system has, on the
manylinux allow-list), so the executable needs nothing new, and ``-z lazy``
keeps them unbound until called.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile

IGNORED = "-Wl,--unresolved-symbols=ignore-in-object-files"
PREFIX = b"nvml"
SHT_SYMTAB, STB_GLOBAL = 2, 1
ZIG = [os.environ["GOCL_ZIG"], "cc"] if os.environ.get("GOCL_ZIG") else [sys.executable, "-m", "ziglang", "cc"]


def undefined(path: str, prefix: bytes = PREFIX) -> set[str]:
    """The undefined global symbols named prefix* of an ELF64 little-endian
    relocatable object (empty for anything else)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1 or struct.unpack_from("<H", data, 16)[0] != 1:
        return set()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_SYMTAB:
            continue
        strtab = sections[link][4]
        for sym in range(offset, offset + size, entsize):
            name, info, _, shndx = struct.unpack_from("<IBBH", data, sym)
            text = data[strtab + name:data.index(0, strtab + name)]
            if shndx == 0 and info >> 4 == STB_GLOBAL and text.startswith(prefix):
                names.add(text.decode())
    return names


def stand_in(names: set[str], target: list[str], folder: str) -> str:
    """Builds the stand-in library defining names (see the module comment)."""
    source = os.path.join(folder, "nvml_stand_in.c")
    with open(source, "w") as f:
        f.writelines(f"void {n}(void) {{}}\n" for n in sorted(names))
    lib = os.path.join(folder, "libm.so.6")
    subprocess.run([*ZIG, *target, "-shared", "-Wl,-soname,libm.so.6", source, "-o", lib], check=True)
    return lib


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != IGNORED]
    if len(args) == len(argv):
        os.execv(ZIG[0], [*ZIG, *args])
    names = set().union(*(undefined(a) for a in args if a.endswith(".o") and os.path.isfile(a)))
    i = args.index("-target") if "-target" in args else -1
    target = args[i:i + 2] if i >= 0 else []
    with tempfile.TemporaryDirectory() as folder:
        extra = [stand_in(names, target, folder), "-Wl,-z,lazy"] if names else []
        return subprocess.run([*ZIG, *args, *extra]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
