"""Version gates on other packages' private names: gocl reads a package's
internals only in the versions whose source was read for it, and takes its
plain (public) path outside them. A gate is ((lowest major, minor), (highest
major, minor)); the tests of each front end fail when the installed package
outgrows its gate (then read the new source and raise it)."""

from __future__ import annotations

import re


def major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "2.60.0" or "2.8.0+cpu"; (0, 0) if none."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def within(gate: tuple[tuple[int, int], tuple[int, int]], version: tuple[int, int]) -> bool:
    lo, hi = gate
    return lo <= version <= hi
