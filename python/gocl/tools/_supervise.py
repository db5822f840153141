"""Supervising local ranks: the part ``gocl run`` (launcher.py) and the
pytest plugin share.

Each rank is started with ``start_new_session=True``, so it leads its own
process group and a signal reaches whatever it started too (torch's and
JAX's helper processes). The helpers here say how a rank ended, watch the
ranks until one fails, and stop ranks: a signal, a grace period, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Sequence

# How often the waits here look at the ranks again.
POLL = 0.02


def describe_exit(rc: int | None, *, sentence: bool = False) -> str:
    """How a rank ended, from Popen.returncode: "exit code 3", "killed by
    signal SIGTERM", "still running"; with sentence, the verb phrase that
    follows "rank i" ("exited with code 3", "was killed by signal SIGTERM")."""
    if rc is None:
        return "is still running" if sentence else "still running"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        return ("was killed" if sentence else "killed") + f" by signal {name}"
    return f"exited with code {rc}" if sentence else f"exit code {rc}"


def first_failure(codes: Sequence[int | None], ok: Collection[int] = (0,)) -> int | None:
    """The index of the first rank that ended with a code not in ok, if any."""
    for r, rc in enumerate(codes):
        if rc is not None and rc not in ok:
            return r
    return None


@dataclass
class Outcome:
    """How a watch ended: the first rank that failed (None: none did), the
    ranks still running at the end (for the caller to stop), and whether
    the deadline ended it."""

    first_failed: int | None = None
    running: list[int] = field(default_factory=list)
    timed_out: bool = False


def watch(procs: Sequence[subprocess.Popen], *, ok: Collection[int] = (0,), linger: float = 0.0,
          deadline: float = math.inf, on_failure: Callable[[int, list], None] | None = None) -> Outcome:
    """Wait until every rank has exited, or linger seconds after the first
    failure (a code not in ok; on_failure(rank, codes) is called then, once),
    or the deadline (time.monotonic()). Stops nothing: the caller decides how."""
    out = Outcome()
    failed_at = math.inf
    while True:
        codes = [p.poll() for p in procs]
        out.running = [r for r, c in enumerate(codes) if c is None]
        now = time.monotonic()
        if out.first_failed is None:
            out.first_failed = first_failure(codes, ok)
            if out.first_failed is not None:
                failed_at = now
                if on_failure is not None:
                    on_failure(out.first_failed, codes)
        if not out.running or now - failed_at >= linger:
            return out
        if now >= deadline:
            out.timed_out = True
            return out
        time.sleep(POLL)


def signal_group(p: subprocess.Popen, sig: int) -> None:
    """Send sig to p's process group (the rank and whatever it started)."""
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(procs: Sequence[subprocess.Popen], sig: int, grace: float) -> None:
    """Send sig to procs' groups, give them grace seconds to exit, then
    SIGKILL the groups and reap every process."""
    for p in procs:
        signal_group(p, sig)
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL)
    for p in procs:
        signal_group(p, signal.SIGKILL)
    for p in procs:
        p.wait()


def kill_running(procs: Sequence[subprocess.Popen]) -> None:
    """SIGKILL the groups of the ranks still running and reap them (the last
    word of every supervisor, whatever happened before)."""
    for p in procs:
        if p.poll() is None:
            signal_group(p, signal.SIGKILL)
            p.wait()
