"""Where the package's native files are: the library and the executables
built with it (``_native/`` next to this file), each overridable by a
variable naming another build."""

from __future__ import annotations

import os
from pathlib import Path

NATIVE = Path(__file__).resolve().parent / "_native"


def path(name: str, override: str) -> Path:
    """``$override`` when set, else ``_native/name``."""
    env = os.environ.get(override)
    return Path(env) if env else NATIVE / name


def executable(name: str, override: str, build: str, error: type[Exception] = FileNotFoundError) -> Path:
    """:func:`path`, checked to be an executable file; error says how to get one."""
    p = path(name, override)
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise error(f"{name} not found at {p}: reinstall gocl from a wheel, build it from the source tree "
                    f"({build}), or set {override}")
    return p
