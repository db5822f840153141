"""Byte sizes as the bench scripts print and parse them (8 B, 4 KiB, 64 MiB;
--max-bytes 64M), and their tables."""

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


def print_table(head: list[str], body: list[list[str]], markdown: bool, text_cols: int = 0) -> None:
    """A Markdown table (the first text_cols columns left-aligned, the rest
    right-aligned), or right-aligned plain columns for a terminal."""
    if markdown:
        align = ["---"] * text_cols + ["---:"] * (len(head) - text_cols)
        print("\n".join(["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
                        + ["| " + " | ".join(r) + " |" for r in body]))
    else:
        w = [max(len(x) for x in col) for col in zip(head, *body)]
        print("\n".join("  ".join(f"{c:>{k}}" for c, k in zip(r, w)) for r in [head] + body))
