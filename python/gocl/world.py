"""Where a rank learns its world: the launcher's environment, read in one place.

:func:`read` gives this process's :class:`World` (rank, size, local rank
and size, the address and port of rank 0's rendezvous) from whichever
launcher started it, nearest first:

1. **A per-rank launcher** - torchrun, ``gocl run``, or anything that sets
   ``RANK`` and ``WORLD_SIZE`` (with ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
   ``MASTER_ADDR``, ``MASTER_PORT``). torchrun's ``PET_*`` flags are its own
   and reach it, not the ranks.
2. **MPI** - OpenMPI/PMIx (``OMPI_COMM_WORLD_RANK``/``SIZE``/``LOCAL_RANK``/
   ``LOCAL_SIZE``, or ``PMIX_RANK``) and MPICH/Hydra (``PMI_RANK``,
   ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``). Rank 0's host is
   ``MASTER_ADDR`` when set, else the host mpirun runs on (from
   ``OMPI_MCA_orte_hnp_uri`` or ``PMI_PORT``), where rank 0 runs with
   mpirun's default mapping (``mpirun -x MASTER_ADDR=host`` otherwise).
3. **Slurm** - an srun task's ``SLURM_PROCID``, ``SLURM_NTASKS``,
   ``SLURM_LOCALID`` (a batch script, which has no ``SLURM_STEP_ID``, is
   not a rank); rank
   0's host is the first of ``SLURM_STEP_NODELIST`` (``node[01-03,07]``
   expanded as Slurm does), the port derived from ``SLURM_JOB_ID``.
4. **Kubernetes Indexed Jobs / JobSet** - ``JOB_COMPLETION_INDEX`` is the
   rank, ``WORLD_SIZE`` (set in the pod spec) the size; rank 0's host is
   this pod's name with its index replaced by 0 (``train-3.svc`` ->
   ``train-0.svc``, the headless service's name of index 0).

The spec of these rules is the table ``tests/testdata/launcher_worlds.json``
(environment in, world or error out): ``tests/python/test_world.py`` runs
it through :func:`read` and through the C reader of gocl's MPI ABI library
(``mpiabi/launcher_world.c``, for JAX's collectives over MPItrampoline),
which follows the same rules; change both readers and the table together.

``MASTER_ADDR``, ``MASTER_PORT`` and ``GOCL_MASTER_PORT`` always win over
what a scheduler implies. When a per-rank launcher's ``RANK`` and a
scheduler's rank disagree without a per-node launcher in between
(torchrun and ``gocl run`` set ``GROUP_RANK``: under ``srun`` their task is
a node, not a rank), the error names both: a ``RANK`` left in the
environment would otherwise give every task the same rank.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

from .errors import InvalidArgumentError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    local_size: int | None
    addr: str | None  # rank 0's host (None: unknown, only a world of 1 may go without)
    port: int  # rank 0's rendezvous port: GOCL_MASTER_PORT, MASTER_PORT, else derived from the job
    source: str  # whose variables gave it: "RANK/WORLD_SIZE", "OpenMPI", "MPICH (PMI)", "Slurm", "Kubernetes ..."


def _int(env: Mapping[str, str], name: str, who: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(f"{who}: ${name}={raw!r} is not an integer") from None


def expand_hostlist(spec: str) -> list[str]:
    """Slurm's host list syntax: ``node[01-03,07],login1`` -> node01,
    node02, node03, node07, login1 (zero padding kept; several bracket
    groups in one name multiply out, ``r[1-2]n[1-2]``)."""
    items, depth, cur = [], 0, ""
    for ch in spec.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InvalidArgumentError(f"host list {spec!r}: a ']' without its '['")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise InvalidArgumentError(f"host list {spec!r}: a '[' without its ']'")
    items.append(cur)
    hosts: list[str] = []
    for item in (i.strip() for i in items):
        if item:
            hosts += _expand_one(item, spec)
    return hosts


def _expand_one(item: str, spec: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    out = []
    for part in m[1].split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise InvalidArgumentError(f"host list {spec!r}: {part!r} is not a number or a range a-b")
        width = len(lo) if lo.startswith("0") else 0
        for n in range(int(lo), int(hi if sep else lo) + 1):
            out += _expand_one(f"{head}{n:0{width}d}{tail}", spec)
    return out


def _uri_host(uri: str) -> str | None:
    """The first address of an OpenMPI HNP URI
    (``jobid.0;tcp://10.0.0.1,192.168.1.2:45678``) or a PMI_PORT
    (``host:port``)."""
    m = re.search(r"tcp[46]?://\[?([^,:\]\s;]+)", uri)
    if m:
        return m[1]
    host, _, port = uri.rpartition(":")
    return host or None if port.isdigit() else None


def _derived_port(token: str | int) -> int:
    """A port every rank derives from its job's identity: even, in
    15000-24998, so that torch's store one above it (torch_env) never takes
    another job's; jobs numbered in a row get ports in a row (of 5000)."""
    digits = re.sub(r"\D", "", str(token))
    return 15000 + 2 * ((int(digits[-12:]) if digits else 0) % 5000)


def _rank(env: Mapping[str, str], name: str, who: str) -> int:
    """A scheduler's rank variable, which is set (present)."""
    rank = _int(env, name, who)
    if rank is None:
        raise InvalidArgumentError(f"{who}: ${name} is set but empty: it should be this process's rank")
    return rank


def _per_rank(env: Mapping[str, str], who: str) -> World | None:
    rank = _int(env, "RANK", who)
    if rank is None:
        return None
    size = _int(env, "WORLD_SIZE", who)
    if size is None:
        raise InvalidArgumentError(f"{who}: $RANK is set but $WORLD_SIZE is not: set both, as torchrun and "
                                   "`gocl run` do")
    if size < 1 or not 0 <= rank < size:
        raise InvalidArgumentError(f"{who}: RANK={rank} is not in [0, WORLD_SIZE={size})")
    local = _int(env, "LOCAL_RANK", who)
    return World(rank, size, rank if local is None else local, _int(env, "LOCAL_WORLD_SIZE", who), None,
                 DEFAULT_PORT, "RANK/WORLD_SIZE")


def _mpi(env: Mapping[str, str], who: str) -> World | None:
    if "OMPI_COMM_WORLD_RANK" in env or "PMIX_RANK" in env:
        rank = _int(env, "OMPI_COMM_WORLD_RANK", who)
        if rank is None:
            rank = _rank(env, "PMIX_RANK" if "PMIX_RANK" in env else "OMPI_COMM_WORLD_RANK", who)
        size = _int(env, "OMPI_COMM_WORLD_SIZE", who)
        if size is None:
            raise InvalidArgumentError(f"{who}: PMIx gives this process rank {rank} but no world size "
                                       "($OMPI_COMM_WORLD_SIZE): set WORLD_SIZE")
        local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", who)
        uri = env.get("OMPI_MCA_orte_hnp_uri") or env.get("PMIX_SERVER_URI41") or env.get("PMIX_SERVER_URI4") or ""
        job = env.get("OMPI_MCA_ess_base_jobid") or uri.split(";")[0] or env.get("PMIX_NAMESPACE", "")
        return World(rank, size, rank if local is None else local, _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", who),
                     _uri_host(uri) if uri else None, _derived_port(job), "OpenMPI")
    if "PMI_RANK" in env:
        rank, size = _rank(env, "PMI_RANK", who), _int(env, "PMI_SIZE", who)
        if size is None:
            raise InvalidArgumentError(f"{who}: PMI gives this process rank {rank} but no $PMI_SIZE: set WORLD_SIZE")
        local = _int(env, "MPI_LOCALRANKID", who)
        pmi = env.get("PMI_PORT", "")
        return World(rank, size, rank if local is None else local, _int(env, "MPI_LOCALNRANKS", who),
                     _uri_host(pmi) if pmi else None, _derived_port(pmi), "MPICH (PMI)")
    return None


def _slurm(env: Mapping[str, str], who: str) -> World | None:
    # srun's tasks: a batch script has SLURM_PROCID=0 too, but no step of its own
    if "SLURM_PROCID" not in env or not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return None
    rank = _rank(env, "SLURM_PROCID", who)
    size = _int(env, "SLURM_NTASKS", who)
    size = _int(env, "SLURM_NPROCS", who) if size is None else size
    if size is None:
        raise InvalidArgumentError(f"{who}: Slurm gives this task SLURM_PROCID={rank} but no $SLURM_NTASKS: "
                                   "run it with srun -n N")
    local = _int(env, "SLURM_LOCALID", who)
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = expand_hostlist(nodes) if nodes else []
    per_node = None
    m = re.fullmatch(r"(\d+)(\(x\d+\))?(,.*)?", env.get("SLURM_STEP_TASKS_PER_NODE", "") or "")
    if m and not m[3]:
        per_node = int(m[1])  # every node the same
    if env.get("SLURM_DISTRIBUTION", "").startswith("arbitrary") and env.get("SLURM_HOSTFILE"):
        # srun --distribution=arbitrary: task k runs on the hostfile's line k,
        # while the node list is sorted
        try:
            with open(env["SLURM_HOSTFILE"]) as f:
                lines = [ln.strip() for ln in f if ln.strip()]
            hosts = lines[:1] or hosts
        except OSError:
            pass
    # steps of one job running at once get ports of their own, and jobs in a row too
    job = _int(env, "SLURM_JOB_ID", who) or 0
    step = _int(env, "SLURM_STEP_ID", who) or 0
    return World(rank, size, rank if local is None else local, per_node, hosts[0] if hosts else None,
                 _derived_port(job + 997 * step), "Slurm")


def _kubernetes(env: Mapping[str, str], who: str) -> World | None:
    if "JOB_COMPLETION_INDEX" not in env:
        return None
    rank = _rank(env, "JOB_COMPLETION_INDEX", who)
    size = _int(env, "GOCL_WORLD_SIZE", who) or _int(env, "WORLD_SIZE", who)
    if size is None:
        raise InvalidArgumentError(
            f"{who}: a Kubernetes Indexed Job gives this pod index {rank} (JOB_COMPLETION_INDEX) but not the "
            "number of pods: set WORLD_SIZE (or GOCL_WORLD_SIZE) in the pod spec to the Job's completions")
    name = socket.getfqdn() if env is os.environ else env.get("HOSTNAME", "")
    first, _, domain = name.partition(".")
    m = re.fullmatch(r"(.*-)(\d+)", first)
    addr = (m[1] + "0" + (("." + domain) if domain else "")) if m else None
    return World(rank, size, 0, 1, addr, DEFAULT_PORT, "Kubernetes (JOB_COMPLETION_INDEX)")


_SCHEDULERS = (_mpi, _slurm, _kubernetes)

# What each launcher sets, for the error of a process none of them started.
LAUNCHERS = ("torchrun or `gocl run` (RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK, PMI_RANK), "
             "srun (SLURM_PROCID), a Kubernetes Indexed Job (JOB_COMPLETION_INDEX)")


def read(env: Mapping[str, str] | None = None, who: str = "gocl") -> World | None:
    """This process's world from its launcher's environment (see the module
    doc), or None when no launcher's variables are there."""
    env = os.environ if env is None else env
    explicit = _per_rank(env, who)
    sched = None
    for f in _SCHEDULERS:
        sched = f(env, who)
        if sched:
            break
    if explicit is None and sched is None:
        if _int(env, "WORLD_SIZE", who) is not None:
            raise InvalidArgumentError(f"{who}: $RANK is not set but $WORLD_SIZE is (set both, as torchrun and "
                                       "`gocl run` do)")
        return None
    if explicit and sched and "GROUP_RANK" not in env and (explicit.rank, explicit.size) != (sched.rank, sched.size):
        raise InvalidArgumentError(
            f"{who}: RANK={explicit.rank}, WORLD_SIZE={explicit.size} are set, but {sched.source} starts this "
            f"process as rank {sched.rank} of {sched.size}: unset RANK and WORLD_SIZE (left from another run?) "
            f"to take {sched.source}'s world, or start the ranks with torchrun or `gocl run`, whose RANK wins")
    w = explicit or sched
    if sched and sched is not w and "GROUP_RANK" not in env:  # the same world twice: the scheduler knows rank 0's host
        w = World(w.rank, w.size, w.local_rank, w.local_size or sched.local_size, sched.addr, sched.port, w.source)
    if w.size < 1 or not 0 <= w.rank < w.size:
        raise InvalidArgumentError(f"{who}: rank {w.rank} is not in [0, {w.size}) ({w.source})")
    addr = env.get("MASTER_ADDR") or w.addr
    port = _int(env, "GOCL_MASTER_PORT", who) or _int(env, "MASTER_PORT", who) or w.port
    return World(w.rank, w.size, w.local_rank, w.local_size, addr, port, w.source)


def torch_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What torch's ``env://`` rendezvous needs (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``;
    Lightning's ``NODE_RANK``) and this process's scheduler gives but
    nobody set: empty unless a scheduler (mpirun, srun, a Kubernetes
    Indexed Job) started it without a per-rank launcher. ``MASTER_PORT`` is
    one above gocl's port (``GOCL_MASTER_PORT``), so torch's store and
    ``Communicator.from_env`` never take the same one."""
    env = os.environ if env is None else env
    if "RANK" in env or "WORLD_SIZE" in env:
        return {}  # torchrun, gocl run, or the user: theirs as it is
    w = read(env, who="gocl (filling torch's env:// variables)")
    if w is None or w.addr is None:
        return {}
    out = {"RANK": str(w.rank), "WORLD_SIZE": str(w.size), "LOCAL_RANK": str(w.local_rank),
           "MASTER_ADDR": w.addr, "MASTER_PORT": env.get("MASTER_PORT") or str(w.port + 1)}
    if w.local_size is not None:
        out["LOCAL_WORLD_SIZE"] = str(w.local_size)
        # Lightning's rank is NODE_RANK * processes per node + LOCAL_RANK
        out["NODE_RANK"] = str((w.rank - w.local_rank) // max(w.local_size, 1))
    if "MASTER_PORT" not in env:
        # read() takes MASTER_PORT over the scheduler's port: Communicator.from_env
        # in the same process would then listen on torch's store port
        # (EADDRINUSE on rank 0, seen under a real srun)
        out["GOCL_MASTER_PORT"] = str(w.port)
    return {k: v for k, v in out.items() if k not in env}


def export_torch_env() -> dict[str, str]:
    """Sets :func:`torch_env` in ``os.environ`` (the torch backend does it at
    ``import torch``, so ``dist.init_process_group("gocl")`` works in an
    srun task or under mpirun as under torchrun); returns what it set."""
    add = torch_env()
    os.environ.update(add)
    return add
