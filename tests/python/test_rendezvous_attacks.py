"""from_env's id exchange under attack, as a stranger on the host would try
it (issue 38): another user asking rank 0 for the unique id over loopback
and over the host's external address, a squatter on MASTER_PORT posing as
rank 0, silent connections that used to stall rank 0, and the one warning
line a job without a rendezvous secret gets.

Jobs run under `gocl run`, which gives every rank a fresh
GOCL_RENDEZVOUS_SECRET.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import gocl
from gocl import _lib, _rendezvous as rv
from gocl.tools.launcher import free_port, new_secret

# Rank 1 comes late, so rank 0 is serving the id while the attacker asks.
JOB = textwrap.dedent("""
    import os, time, numpy as np, gocl
    if os.environ["RANK"] == "1":
        time.sleep(float(os.environ.get("LATE", "0")))
    with gocl.Communicator.from_env() as c:
        x = c.all_reduce(np.full(4, c.rank + 1.0, np.float32))
        print("sum", x[0], flush=True)
""")

# The stranger uses gocl's own library (a copy it can read), as rank 1 of
# the same world and round, from the system's Python.
STRANGER = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.goclGetLastError.restype = ctypes.c_char_p
    port = int(sys.argv[2])
    for addr in sys.argv[3:]:
        for secret in (b"", b"a-guessed-secret-0123456789abcdef"):
            uid = ctypes.create_string_buffer(128)
            rc = lib.goclExchangeUniqueId(uid, addr.encode(), port, 1, 2, 1, secret, ctypes.c_double(1.0))
            if rc == 0:
                print("GOT", addr, uid.raw.hex(), flush=True)
            else:
                print("REFUSED", addr, rc, lib.goclGetLastError(None).decode()[:300], flush=True)
""")


def external_ip() -> str | None:
    """An address of this host that is not loopback (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def wait_listening(port: int, within: float = 30) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {within} s")


def run_job(port: int, late: float, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, LATE=str(late), GOCL_TIMEOUT="60")
    env.update(env_extra or {})
    env.pop("GOCL_RENDEZVOUS_SECRET", None)  # gocl run makes one
    return subprocess.Popen([sys.executable, "-m", "gocl", "run", "-n", "2", "--master-port", str(port),
                             "--", sys.executable, "-c", JOB],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="needs root and the system's python3 to run the stranger as another user (uid 65534)")
def test_another_user_cannot_take_the_id():
    where = tempfile.mkdtemp(prefix="gocl-stranger-")  # pytest's tmp_path is root's alone
    os.chmod(where, 0o755)
    lib = os.path.join(where, "libgocl.so")
    shutil.copy(_lib.library_path(), lib)
    os.chmod(lib, 0o755)
    port = free_port()
    job = run_job(port, late=8)  # the stranger asks 4 times, 1 s each
    try:
        wait_listening(port)
        addrs = ["127.0.0.1"] + ([ip] if (ip := external_ip()) else [])
        stranger = subprocess.run(
            ["/usr/bin/python3", "-c", STRANGER, lib, str(port), *addrs], capture_output=True, text=True,
            timeout=60, cwd="/tmp",
            preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)),
            env=dict(os.environ, HOME="/tmp", GOCL_STATUS="0"))
        out = job.communicate(timeout=120)[0]
    finally:
        job.kill()
        shutil.rmtree(where, ignore_errors=True)
    lines = stranger.stdout.splitlines()
    assert "GOT" not in stranger.stdout, stranger.stdout + stranger.stderr
    assert len([ln for ln in lines if ln.startswith("REFUSED")]) == 2 * len(addrs), stranger.stdout + stranger.stderr
    over_loopback = [ln for ln in lines if ln.startswith("REFUSED 127.0.0.1")]
    assert all("did not prove it holds this job's rendezvous secret" in ln for ln in over_loopback), over_loopback
    if len(addrs) > 1:  # rank 0 listens on MASTER_ADDR (127.0.0.1) only: the external address is shut
        assert all("refused" in ln.lower() for ln in lines if ln.startswith(f"REFUSED {addrs[1]}")), lines
    assert job.returncode == 0 and out.count("sum 3.0") == 2, out


def test_a_squatter_on_master_port_is_not_taken_for_rank_zero():
    """Whoever holds MASTER_PORT without the secret (another job's rank 0, a
    plain server answering what the old exchange wanted) gets no rank to
    take its id: the rank fails naming the reason."""
    port = free_port()
    impostor = threading.Thread(target=lambda: pytest.raises(
        gocl.GoclError, rv.exchange, "127.0.0.1", port, 0, 2, 1, 6, new_secret()), daemon=True)
    impostor.start()
    wait_listening(port)
    with pytest.raises(gocl.GoclTimeoutError, match="did not prove it holds this job's rendezvous secret"):
        rv.exchange("127.0.0.1", port, 1, 2, 1, 2, new_secret())
    impostor.join(10)

    with socket.create_server(("127.0.0.1", 0)) as srv:  # answers every hello with "OK" and 128 bytes
        def answer():
            srv.settimeout(5)
            try:
                while True:
                    conn, _ = srv.accept()
                    with conn:
                        conn.sendall(b"\x00" + bytes(range(128)) * 2)
            except OSError:
                pass
        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(gocl.GoclTimeoutError, match="did not prove"):
            rv.exchange("127.0.0.1", srv.getsockname()[1], 1, 2, 1, 2, new_secret())


def test_silent_connections_do_not_stall_the_job():
    """Rank 0 serves fetchers concurrently: connections that say nothing
    (each held up to the 5 s handshake deadline) do not delay rank 1. Served
    one at a time, 8 of them would outlast the job's 10 s timeout."""
    port = free_port()
    job = run_job(port, late=1, env_extra={"GOCL_TIMEOUT": "10"})
    silent = []
    try:
        wait_listening(port)
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        out = job.communicate(timeout=120)[0]
    finally:
        job.kill()
        for s in silent:
            s.close()
    assert job.returncode == 0 and out.count("sum 3.0") == 2, out


def test_a_job_without_a_secret_says_so_once(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "GOCL_RENDEZVOUS_SECRET"}
    procs = [subprocess.Popen([sys.executable, "-c", JOB + "\nwith gocl.Communicator.from_env() as c: pass\n"],
                              env=dict(env, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), GOCL_TIMEOUT="60"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "sum 3.0" in out, out + err
        assert err.count("GOCL_RENDEZVOUS_SECRET is not set") == 1, err
