"""``gocl run -n N [--] cmd ...``: start N local ranks of a program.

Each rank gets torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), so both
``dist.init_process_group("gocl")`` and ``gocl.Communicator.from_env()``
work unchanged. Several hosts: run ``gocl run --nnodes M --node-rank K
--master-addr HOST0 --master-port P -n N`` on each (as torchrun's static
rendezvous): node K's ranks are K*N .. K*N+N-1 of M*N, and they meet at
rank 0's MASTER_ADDR:MASTER_PORT (from_env's exchange, or torch's store);
each launcher supervises its own node's ranks. Every output line is prefixed with ``[rank i]``. When a rank
fails, the others are stopped (SIGTERM to their process groups, SIGKILL after
a grace period) and the launcher exits with the failed rank's exit code after
a line naming it. Ctrl-C (SIGINT) and SIGTERM are forwarded to every rank; a
second Ctrl-C kills them.

This module does not load libgocl.so: the ranks do.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO, Sequence

from ._supervise import describe_exit, kill_running, signal_group, stop, watch

__all__ = ["free_port", "new_secret", "rank_env", "launch"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


SECRET_VAR = "GOCL_RENDEZVOUS_SECRET"


def new_secret() -> str:
    """A rendezvous secret: 256 random bits as 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


def rank_env(rank: int, world_size: int, master_addr: str, master_port: int,
             base: dict[str, str] | None = None, *, nnodes: int = 1, node_rank: int = 0,
             secret: str | None = None) -> dict[str, str]:
    """The environment of local rank `rank` of `world_size` on node
    `node_rank` of `nnodes`, as torchrun sets it (same ranks per node), plus
    the launch's rendezvous secret when given (from_env's id exchange proves
    it: a process without it cannot fetch the job's unique id)."""
    env = dict(os.environ if base is None else base)
    if secret is not None:
        env[SECRET_VAR] = secret
    grank, gworld = node_rank * world_size + rank, nnodes * world_size
    env.update({
        "RANK": str(grank),
        "WORLD_SIZE": str(gworld),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": str(node_rank),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_RANK": str(grank),
        "ROLE_WORLD_SIZE": str(gworld),
        "ROLE_NAME": "default",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "PYTHONUNBUFFERED": "1",  # lines show up as they are printed
    })
    # Many ranks on few cores: one OpenMP thread each unless told otherwise (torchrun does the same).
    if gworld > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def mpi_abi_path() -> Path:
    """gocl's library with MPItrampoline's MPI ABI (``gocl mpi-abi`` prints
    it): JAX with JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and
    MPITRAMPOLINE_LIB naming it runs its CPU collectives over gocl.
    GOCL_MPIABI_LIB names another build."""
    from .._locate import path

    return path("libgocl_mpiabi.so", "GOCL_MPIABI_LIB")


def jax_mpi_env(env: dict[str, str]) -> dict[str, str]:
    """Points JAX's cross-process CPU collectives at gocl (the MPI door:
    JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi, MPITRAMPOLINE_LIB=gocl's MPI ABI
    library), each unless the user set it; nothing when the library is
    missing or the user chose other collectives. JAX reads them only once
    jax.distributed is initialized."""
    lib = mpi_abi_path()
    if lib.is_file() and env.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi") == "mpi":
        env.setdefault("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi")
        env.setdefault("MPITRAMPOLINE_LIB", str(lib))
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


# torchrun's default port when several nodes meet (each must be told the same one).
DEFAULT_MASTER_PORT = 29500


def launch(cmd: Sequence[str], nprocs: int, *, master_addr: str = "127.0.0.1", master_port: int | None = None,
           prefix: bool = True, grace: float = 5.0, stdout: BinaryIO | None = None,
           stderr: BinaryIO | None = None, log: BinaryIO | None = None,
           nnodes: int = 1, node_rank: int = 0) -> int:
    """Run cmd as nprocs ranks of node `node_rank` (of `nnodes`); return the
    launcher's exit code (0 when every rank exited 0, else the first failed
    rank's code; 128+N for signal N)."""
    if nprocs < 1:
        raise ValueError(f"gocl run: -n must be at least 1, got {nprocs}")
    if nnodes < 1:
        raise ValueError(f"gocl run: --nnodes must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"gocl run: --node-rank is {node_rank} but --nnodes is {nnodes}: pass one in [0, {nnodes - 1}]")
    cmd = list(cmd)
    if not cmd:
        raise ValueError("gocl run: no command given (gocl run -n N [--] cmd ...)")
    if cmd[0].endswith(".py"):
        cmd.insert(0, sys.executable)
    out = stdout or sys.stdout.buffer
    err = stderr or sys.stderr.buffer
    log = log or err
    if nnodes > 1 and master_port is None:
        port = DEFAULT_MASTER_PORT  # every node must agree on it: a free port here means nothing elsewhere
    else:
        port = master_port or free_port()
    base = node_rank * nprocs  # global rank of this node's first rank
    lock = threading.Lock()
    # One node: a fresh secret for this launch. Several: every node's
    # launcher must pass the same one, so it comes from the environment.
    secret = os.environ.get(SECRET_VAR) or (new_secret() if nnodes == 1 else None)

    def say(text: str) -> None:
        with lock:
            try:
                log.write(f"gocl run: {text}\n".encode())
                log.flush()
            except (BrokenPipeError, ValueError):
                pass

    if secret is None:
        say(f"{SECRET_VAR} is not set: any process that reaches {master_addr}:{port} can fetch this job's unique id; "
            f"export the same random secret on every node (python -c 'import secrets; print(secrets.token_urlsafe(32))')")
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
                env = jax_mpi_env(rank_env(r, nprocs, master_addr, port, nnodes=nnodes, node_rank=node_rank,
                                           secret=secret))
                p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as e:
                say(f"cannot start rank {base + r}: {cmd[0]}: {e}")
                for q in procs:
                    signal_group(q, signal.SIGKILL)
                return 127
            procs.append(p)
            # Copied a line at a time (whole lines, never two ranks' bytes interleaved).
            tag = f"[rank {base + r}] ".encode() if prefix else b""
            pumps.append(_Output(p.stdout, out, tag, lock))
            pumps.append(_Output(p.stderr, err, tag, lock))

        def failed(r: int, codes: list) -> None:
            if state["signal"]:
                say(f"rank {base + r} {describe_exit(codes[r], sentence=True)} after "
                    f"{signal.Signals(state['signal']).name}")
            else:
                running = [base + i for i, c in enumerate(codes) if c is None]
                say(f"rank {base + r} {describe_exit(codes[r], sentence=True)}; stopping the other ranks"
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
