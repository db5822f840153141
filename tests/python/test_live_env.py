"""Settings made inside the program take effect (issue: libgocl used to read
Go's copy of the environment, taken when the library loaded, so
``os.environ["GOCL_TIMEOUT"] = "5"`` at the top of a script did nothing).

Each case is a fresh process that starts without the variables and sets them
through ``os.environ`` before (or between) communicator inits, as users do.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "NCCL_"))}
    env["GOCL_TIMEOUT"] = "60"  # the process starts with this; the scripts override it
    env.update(extra)
    return env


def code(*parts: str) -> str:
    return "\n".join(textwrap.dedent(p) for p in parts)


def run(script: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-c", script], env=env or clean_env(),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


TWO_LOCAL = """
    def two_local():
        comms = gocl.Communicator.local(2)
        xs = [np.ones(3, np.float32) for _ in comms]
        with gocl.group():
            for c, x in zip(comms, xs):
                c.all_reduce(x)
        assert [x.tolist() for x in xs] == [[2.0] * 3] * 2
        for c in comms:
            c.destroy()
"""


def test_set_before_the_first_call():
    p = run(code("""
        import os
        os.environ["GOCL_DEBUG"] = "INFO"
        os.environ["GOCL_DEBUG_SUBSYS"] = "INIT"
        os.environ["NCCL_P2P_DISABLE"] = "1"      # NCCL_ fallbacks
        os.environ["NCCL_SHM_DISABLE"] = "1"
        os.environ["NCCL_SOCKET_IFNAME"] = "lo"
        import numpy as np, gocl
    """, TWO_LOCAL, """
        two_local()
    """))
    assert "GOCL INFO" in p.stderr, p.stderr
    assert "via socket" in p.stderr and "via inproc" not in p.stderr, p.stderr


def test_changed_between_two_inits():
    p = run(code("""
        import os, sys
        import numpy as np, gocl
    """, TWO_LOCAL, """
        two_local()                                # nothing set: silent
        print("---", file=sys.stderr, flush=True)
        os.environ["GOCL_DEBUG"] = "INFO"
        os.environ["GOCL_DEBUG_SUBSYS"] = "INIT"
        two_local()                                # logs, in-process ranks
        print("---", file=sys.stderr, flush=True)
        os.environ["NCCL_P2P_DISABLE"] = "1"
        two_local()                                # over shared memory now
        print("---", file=sys.stderr, flush=True)
        os.environ["NCCL_SHM_DISABLE"] = "1"
        os.environ["NCCL_SOCKET_IFNAME"] = "lo"
        two_local()                                # over sockets now
    """))
    first, second, third, fourth = p.stderr.split("---\n")
    assert "GOCL INFO" not in first, first
    assert "via inproc" in second and "via s" not in second, second
    assert "via shm" in third and "via inproc" not in third, third
    assert "via socket" in fourth and "via shm" not in fourth, fourth


def test_bad_value_set_in_code_names_the_variable():
    p = run(code("""
        import os
        import gocl
        os.environ["GOCL_TIMEOUT"] = "soon"
        try:
            gocl.Communicator.local(1)
        except gocl.errors.InvalidArgumentError as e:
            print("ERR", e)
    """))
    assert "ERR" in p.stdout and "GOCL_TIMEOUT" in p.stdout, p.stdout


# Rank 1 stops itself (SIGSTOP) after a first all_reduce; rank 0's next call
# must fail after the 2 s that the script set, naming rank 1, though the
# process started with GOCL_TIMEOUT=60.
STOPPED_PEER = """
    import os, signal, time
    os.environ["GOCL_TIMEOUT"] = "2"
    import numpy as np, gocl
    comm = gocl.Communicator.from_env()
    pids = comm.all_gather(np.array([os.getpid()], np.int64))
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(4, np.float32))
        print("NO ERROR")
    except gocl.errors.GoclTimeoutError as e:
        print(f"TIMEOUT after {time.monotonic() - t0:.2f} s: {e}")
    finally:
        os.kill(int(pids[1][0]), signal.SIGKILL)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_timeout_set_in_code_names_the_stopped_rank():
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(STOPPED_PEER)],
                              env=clean_env(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=str(port), GOCL_SOCKET_IFNAME="lo"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:
        out, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert procs[0].returncode == 0, out + err
    line = next((ln for ln in out.splitlines() if ln.startswith("TIMEOUT")), out + err)
    assert "timed out" in line and "rank 1" in line, line
    took = float(line.split()[2])
    assert 1.5 <= took < 15, line


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="torch not installed")
def test_torch_script_sets_gocl_debug_before_init_process_group():
    port = free_port()
    p = run(code("""
        import os
        os.environ["GOCL_DEBUG"] = "INFO"
        os.environ["GOCL_DEBUG_SUBSYS"] = "INIT"
        import torch, torch.distributed as dist
        import gocl  # noqa: F401  (registers the backend)
        dist.init_process_group("gocl", rank=0, world_size=1, init_method="tcp://127.0.0.1:%d")
        t = torch.ones(3)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
        dist.destroy_process_group()
    """ % port))
    assert "GOCL INFO" in p.stderr and "init done" in p.stderr, p.stderr
