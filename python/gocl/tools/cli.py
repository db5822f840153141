"""The ``gocl`` command: ``gocl run`` (launcher), ``gocl mpi-abi``, ``gocl version``, ``gocl doctor``, ``gocl perf``, ``gocl trace``, ``gocl status`` and ``gocl top``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .. import __version__


def _cmd_run(args: argparse.Namespace) -> int:
    from .launcher import launch

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("gocl run: no command given: gocl run -n N [--] cmd ...", file=sys.stderr)
        return 2
    from .. import world
    from ..errors import InvalidArgumentError

    try:
        w = world.read(who="gocl run")
    except InvalidArgumentError as e:
        print(e, file=sys.stderr)
        return 2
    # -n given: the user's own ranks, even inside an allocation
    if args.nproc is None and w is not None and w.source != "RANK/WORLD_SIZE":
        return _run_as_task(cmd, args, w)
    if args.nproc is None:
        print("gocl run: -n N is required (ranks per node), unless srun, mpirun or a Kubernetes Indexed Job "
              "started this process as one of its tasks", file=sys.stderr)
        return 2
    if args.nproc < 1:
        print(f"gocl run: -n must be at least 1, got {args.nproc}", file=sys.stderr)
        return 2
    if args.nnodes < 1:
        print(f"gocl run: --nnodes must be at least 1, got {args.nnodes}", file=sys.stderr)
        return 2
    if not 0 <= args.node_rank < args.nnodes:
        print(f"gocl run: --node-rank is {args.node_rank} but --nnodes is {args.nnodes}: "
              f"pass one in [0, {args.nnodes - 1}]", file=sys.stderr)
        return 2
    if args.nnodes > 1 and args.master_addr is None:
        print("gocl run: --nnodes > 1 needs --master-addr (the address of node 0, reachable from every node)",
              file=sys.stderr)
        return 2
    return launch(cmd, args.nproc, master_addr=args.master_addr or "127.0.0.1", master_port=args.master_port,
                  prefix=not args.no_prefix, grace=args.grace, nnodes=args.nnodes, node_rank=args.node_rank)


def _run_as_task(cmd: list[str], args: argparse.Namespace, w) -> int:
    """Under srun, mpirun or an Indexed Job each task is a rank: exec cmd as
    that rank with torchrun's variables, instead of starting ranks of its own."""
    import os

    if args.nnodes != 1:
        print(f"gocl run: {w.source} started this process as rank {w.rank} of {w.size}, so each task is one rank: "
              "drop --nnodes (or pass -n to start ranks of its own)", file=sys.stderr)
        return 2
    if w.size > 1 and not (args.master_addr or w.addr):
        print(f"gocl run: {w.source} does not say where rank 0 runs: pass --master-addr (or set MASTER_ADDR)",
              file=sys.stderr)
        return 2
    env = dict(os.environ, RANK=str(w.rank), WORLD_SIZE=str(w.size), LOCAL_RANK=str(w.local_rank),
               MASTER_ADDR=args.master_addr or w.addr or "127.0.0.1", MASTER_PORT=str(args.master_port or w.port),
               PYTHONUNBUFFERED="1")
    if w.local_size:
        env["LOCAL_WORLD_SIZE"] = str(w.local_size)
    from .launcher import jax_mpi_env

    jax_mpi_env(env)  # JAX's CPU collectives over gocl's MPI ABI, unless the user chose
    if cmd[0].endswith(".py"):
        cmd = [sys.executable, *cmd]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print(f"gocl run: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 127


def _cmd_version(args: argparse.Namespace) -> int:
    import gocl

    from .. import _lib

    print(f"gocl {__version__} (python package at {gocl.__path__[0]})")
    try:
        lib = gocl.library_version()
    except Exception as e:  # noqa: BLE001 - report whatever stopped the load
        print(f"libgocl: not loadable from {_lib.library_path()}: {e}")
        return 1
    print(f"libgocl {lib} ({_lib.library_path()})")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import main as doctor_main

    extra = list(args.args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return doctor_main(extra)


def _cmd_perf(args: argparse.Namespace) -> int:
    extra = list(args.args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if any(a == "--hosts" or a.startswith("--hosts=") for a in extra):  # across network namespaces
        from .perf_hosts import main as hosts_main

        return hosts_main(extra)
    from .perf import main as perf_main

    return perf_main(extra)


def _cmd_trace(args: argparse.Namespace) -> int:
    from .trace import main as trace_main

    return trace_main(args.files)


def _cmd_status(args: argparse.Namespace) -> int:
    from .status import main as status_main

    return status_main(json_out=args.json, directory=args.dir, connect=args.connect)


def _cmd_top(args: argparse.Namespace) -> int:
    from .top import main as top_main

    return top_main(interval=args.interval, once=args.once, directory=args.dir, connect=args.connect)


def _cmd_mpi_abi(args: argparse.Namespace) -> int:
    from .launcher import mpi_abi_path

    lib = mpi_abi_path()
    if not lib.is_file():
        print(f"gocl mpi-abi: {lib} is missing: reinstall gocl from a wheel, or run `make venv` in the source tree",
              file=sys.stderr)
        return 1
    print(lib)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gocl", description="gocl: collective communication in Go (NCCL-shaped)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run", help="start N local ranks of a program (torchrun-style environment), on one node or several",
        description="Start N local ranks of cmd with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, "
                    "MASTER_ADDR and MASTER_PORT set; prefix their output with [rank i]; when one fails, stop the "
                    "others and exit with its code. A cmd ending in .py runs with this Python.")
    run.add_argument("-n", "--nproc", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, default=None,
                     help="number of ranks (per node); under srun, mpirun or a Kubernetes Indexed Job, leave it out: "
                          "each task runs cmd as its rank")
    run.add_argument("--nnodes", type=int, default=1,
                     help="number of nodes (hosts); run gocl run once on each, with the same --master-addr/--master-port "
                          "and -n (default 1)")
    run.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0,
                     help="this node's index in [0, nnodes): its ranks are node_rank*n .. node_rank*n+n-1 (default 0)")
    run.add_argument("--master-addr", "--master_addr", dest="master_addr", default=None,
                     help="MASTER_ADDR: node 0's address (default 127.0.0.1; required with --nnodes > 1)")
    run.add_argument("--master-port", "--master_port", dest="master_port", type=int, default=None,
                     help="MASTER_PORT (default: a free port; with --nnodes > 1, 29500 as torchrun)")
    run.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [rank i]")
    run.add_argument("--grace", type=float, default=5.0,
                     help="seconds the other ranks get after SIGTERM before SIGKILL, when one fails (default 5)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="the program and its arguments ([--] cmd ...)")
    run.set_defaults(func=_cmd_run)

    mpi = sub.add_parser(
        "mpi-abi", help="print the path of gocl's MPI ABI library (JAX's CPU collectives over gocl)",
        description="Prints the path of libgocl_mpiabi.so, gocl behind MPItrampoline's MPI ABI: a JAX program run "
                    "with JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and MPITRAMPOLINE_LIB=$(gocl mpi-abi) (gocl run "
                    "sets both) runs its cross-process CPU collectives over gocl.")
    mpi.set_defaults(func=_cmd_mpi_abi)

    ver = sub.add_parser("version", help="print the Python package's and the library's versions")
    ver.set_defaults(func=_cmd_version)

    doc = sub.add_parser(
        "doctor", add_help=False, help="explain CUDA / driver / torch / JAX / NCCL mismatches (gocl-doctor)",
        description="Runs the gocl-doctor executable for this Python; its options: gocl doctor --help.")
    doc.add_argument("args", nargs=argparse.REMAINDER, help="gocl-doctor's options (--json, --facts FILE, ...)")
    doc.set_defaults(func=_cmd_doctor)

    perf = sub.add_parser(
        "perf", add_help=False, help="nccl-tests' benchmark for every collective (the gocl-perf executable)",
        description="gocl perf all_reduce|all_gather|broadcast|reduce|reduce_scatter|alltoall|sendrecv "
                    "[nccl-tests options] [--json[=FILE]] [--plot FILE.png [RESULTS.json ...]]; gocl perf --help.")
    perf.add_argument("args", nargs=argparse.REMAINDER, help="gocl-perf's options")
    perf.set_defaults(func=_cmd_perf)

    trace = sub.add_parser(
        "trace", help="line up the ranks' flight-recorder files: which rank is behind, on which call",
        description="Reads the JSON lines each rank wrote (GOCL_TRACE_FILE, on failure or Communicator.dump_trace()) "
                    "and says which ranks wrote nothing, which rank is behind and on which call, and which calls "
                    "differ between ranks.")
    trace.add_argument("files", nargs="+", help="the ranks' trace files")
    trace.set_defaults(func=_cmd_trace)

    # where gocl status and gocl top look
    asking = argparse.ArgumentParser(add_help=False)
    asking.add_argument("--dir", help="the status directory (default: GOCL_STATUS_DIR, $XDG_RUNTIME_DIR/gocl, "
                                      "/tmp/gocl-UID)")
    asking.add_argument("--connect", metavar="HOST:PORT", help="a TCP endpoint (the job's GOCL_STATUS=tcp:HOST:PORT; "
                                                                "GOCL_STATUS_TOKEN holds its secret)")

    st = sub.add_parser(
        "status", parents=[asking], help="where the running jobs are: each rank's call, whom it waits on and for how long, the straggler",
        description="Asks every gocl process of this user on this host (their status endpoints, GOCL_STATUS); a "
                    "process that is rank 0 of a communicator asks its ranks on every host. Prints one row per rank "
                    "and names the rank the others wait on.")
    st.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    st.set_defaults(func=_cmd_status)

    top = sub.add_parser(
        "top", parents=[asking], help="gocl status live: a terminal view refreshed every second, the straggler highlighted, GPUs (NVML)",
        description="Asks the processes as gocl status does, every --interval seconds, and shows each communicator's "
                    "ranks, the straggler in reverse video (and marked *, << STRAGGLER), and each GPU's utilisation "
                    "and memory when NVML is present. Keys: q quits, p pauses, arrows/PgUp/PgDn scroll.")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between looks (default 1)")
    top.add_argument("--once", action="store_true", help="print one frame as plain text and exit (also when stdout "
                                                          "is not a terminal)")
    top.set_defaults(func=_cmd_top)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:  # every option is gocl-doctor's (argparse would claim --help, --json...)
        return _cmd_doctor(argparse.Namespace(args=argv[1:]))
    if argv[:1] == ["perf"]:  # likewise gocl-perf's (-h, -n, -b, ... are not gocl's)
        return _cmd_perf(argparse.Namespace(args=argv[1:]))
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
