"""``gocl run -n N [--] cmd ...``: start N local ranks of a program.

Each rank gets torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK=0, ROLE_RANK, ROLE_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), so both
``dist.init_process_group("gocl")`` and ``gocl.Communicator.from_env()``
work unchanged. Every output line is prefixed with ``[rank i]``. When a rank
fails, the others are stopped (SIGTERM to their process groups, SIGKILL after
a grace period) and the launcher exits with the failed rank's exit code after
a line naming it. Ctrl-C (SIGINT) and SIGTERM are forwarded to every rank; a
second Ctrl-C kills them.

This module does not load libgocl.so: the ranks do.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from typing import BinaryIO, Sequence

from ._supervise import describe_exit, kill_running, signal_group, stop, watch

__all__ = ["free_port", "rank_env", "launch"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_env(rank: int, world_size: int, master_addr: str, master_port: int,
             base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one local rank, as torchrun sets it (one node)."""
    env = dict(os.environ if base is None else base)
    env.update({
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "default",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "PYTHONUNBUFFERED": "1",  # lines show up as they are printed
    })
    # Many ranks on few cores: one OpenMP thread each unless told otherwise (torchrun does the same).
    if world_size > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


class _Output:
    """Copies one child stream to ours, a line at a time, with a prefix."""

    def __init__(self, src: BinaryIO, dst: BinaryIO, prefix: bytes, lock: threading.Lock):
        self.thread = threading.Thread(target=self._pump, args=(src, dst, prefix, lock), daemon=True)
        self.thread.start()

    @staticmethod
    def _pump(src: BinaryIO, dst: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
        try:
            for line in iter(src.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                with lock:
                    try:
                        dst.write(prefix + line)
                        dst.flush()
                    except (BrokenPipeError, ValueError):
                        pass
        finally:
            src.close()


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def launch(cmd: Sequence[str], nprocs: int, *, master_addr: str = "127.0.0.1", master_port: int | None = None,
           prefix: bool = True, grace: float = 5.0, stdout: BinaryIO | None = None,
           stderr: BinaryIO | None = None, log: BinaryIO | None = None) -> int:
    """Run cmd as nprocs ranks; return the launcher's exit code (0 when every
    rank exited 0, else the first failed rank's code; 128+N for signal N)."""
    if nprocs < 1:
        raise ValueError(f"gocl run: -n must be at least 1, got {nprocs}")
    cmd = list(cmd)
    if not cmd:
        raise ValueError("gocl run: no command given (gocl run -n N [--] cmd ...)")
    if cmd[0].endswith(".py"):
        cmd.insert(0, sys.executable)
    out = stdout or sys.stdout.buffer
    err = stderr or sys.stderr.buffer
    log = log or err
    port = master_port or free_port()
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            try:
                log.write(f"gocl run: {text}\n".encode())
                log.flush()
            except (BrokenPipeError, ValueError):
                pass

    procs: list[subprocess.Popen] = []
    pumps: list[_Output] = []
    state = {"signal": 0, "count": 0}

    def forward(signum, frame):  # Ctrl-C / SIGTERM: pass it on; twice: kill
        state["signal"] = state["signal"] or signum
        state["count"] += 1
        for p in procs:
            if p.poll() is None:
                signal_group(p, signum if state["count"] == 1 else signal.SIGKILL)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, forward)
    try:
        for r in range(nprocs):
            try:
                p = subprocess.Popen(cmd, env=rank_env(r, nprocs, master_addr, port), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as e:
                say(f"cannot start rank {r}: {cmd[0]}: {e}")
                for q in procs:
                    signal_group(q, signal.SIGKILL)
                return 127
            procs.append(p)
            # Copied a line at a time (whole lines, never two ranks' bytes interleaved).
            tag = f"[rank {r}] ".encode() if prefix else b""
            pumps.append(_Output(p.stdout, out, tag, lock))
            pumps.append(_Output(p.stderr, err, tag, lock))

        def failed(r: int, codes: list) -> None:
            if state["signal"]:
                say(f"rank {r} {describe_exit(codes[r], sentence=True)} after {signal.Signals(state['signal']).name}")
            else:
                running = [i for i, c in enumerate(codes) if c is None]
                say(f"rank {r} {describe_exit(codes[r], sentence=True)}; stopping the other ranks"
                    + (f" ({', '.join(map(str, running))})" if running else ""))

        outcome = watch(procs, on_failure=failed)
        if outcome.first_failed is not None:
            stop(procs, signal.SIGTERM, grace)
    finally:
        kill_running(procs)
        for pump in pumps:
            pump.thread.join(timeout=2.0)
        for s, h in old.items():
            signal.signal(s, h)
    if state["signal"]:
        return 128 + state["signal"]
    if outcome.first_failed is not None:
        return _exit_code(procs[outcome.first_failed].returncode)
    return 0
