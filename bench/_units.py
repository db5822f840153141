"""Byte sizes as the bench scripts print and parse them (8 B, 4 KiB, 64 MiB; --max-bytes 64M)."""

from __future__ import annotations


def human(n: int) -> str:
    """8 -> "8 B", 4096 -> "4 KiB", 64 << 20 -> "64 MiB" (bytes where not a whole unit)."""
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def parse_bytes(s: str) -> int:
    """"64M", "4k", "512", "1.5MB" -> bytes (K, M, G are powers of 1024)."""
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)
