"""Fuzz from_env's unique-id exchange at its port: rank 0 serves the id on
MASTER_PORT while random connections send it garbage, truncated
handshakes, handshakes whose proof is wrong and handshakes made with a
wrong secret; then the real rank 1 fetches the id and both all_reduce.
Runs GOCL_FUZZ_SECONDS (default 1; `make fuzz` sets more).

Every fetcher must prove the launcher's rendezvous secret before the id
moves (runtime/bootstrap/exchange.go): none of these gets it, and rank 0
keeps serving.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import socket
import subprocess
import sys
import time

from gocl.tools.launcher import free_port, new_secret, rank_env

SECONDS = float(os.environ.get("GOCL_FUZZ_SECONDS", "1"))
AUTH = b"GOCLAUTH"  # the bootstrap handshake's magic, then the dialer's 32-byte nonce
RANK = ("import gocl, numpy as np\n"
        "with gocl.Communicator.from_env() as c:\n"
        "    x = c.all_reduce(np.full(3, c.rank + 1, np.float32))\n"
        "    print('sum', x[0], flush=True)\n")


def _mac(key: bytes, role: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(key, role + a + b, hashlib.sha256).digest()


def _attack(rng: random.Random, s: socket.socket) -> None:
    kind = rng.randrange(5)
    if kind == 0:  # random bytes
        s.sendall(rng.randbytes(rng.randrange(0, 64)))
    elif kind == 1:  # a truncated handshake
        s.sendall((AUTH + rng.randbytes(32))[: rng.randrange(0, 40)])
    elif kind == 2:  # a whole hello, then a made-up proof
        s.sendall(AUTH + rng.randbytes(32))
        s.recv(64)
        s.sendall(rng.randbytes(32))
    elif kind == 3:  # the handshake done right with a guessed secret, then a forged frame
        key = _mac(new_secret().encode(), b"gocl rendezvous v1", b"", b"")
        nd = rng.randbytes(32)
        s.sendall(AUTH + nd)
        reply = s.recv(64)
        s.sendall(_mac(key, b"D", nd, reply[:32]) + rng.randbytes(rng.randrange(0, 64)))
    else:  # a flood, the magic late
        s.sendall(b"\x00" * rng.randrange(1, 4096) + AUTH)


def test_from_env_exchange_survives_garbage():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOCL_MASTER")}
    env["GOCL_TIMEOUT"] = "30"
    secret = new_secret()
    rank0 = subprocess.Popen([sys.executable, "-c", RANK], env=rank_env(0, 2, "127.0.0.1", port, env, secret=secret),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rng = random.Random(int(os.environ.get("GOCL_FUZZ_SEED", time.time_ns())))
    sent = 0
    try:
        end = None  # the clock starts once rank 0 listens
        limit = time.monotonic() + 60
        while (end is None or time.monotonic() < end) and time.monotonic() < limit and rank0.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    _attack(rng, s)
                    s.shutdown(socket.SHUT_WR)
                    s.recv(256)  # whatever rank 0 answers (nothing: it hangs up)
                sent += 1
                end = end or time.monotonic() + SECONDS
            except OSError:
                time.sleep(0.01)  # not listening yet, or reset
        assert rank0.poll() is None, rank0.communicate()[0]
        rank1 = subprocess.run([sys.executable, "-c", RANK], env=rank_env(1, 2, "127.0.0.1", port, env, secret=secret),
                               capture_output=True, text=True, timeout=60)
        out0 = rank0.communicate(timeout=60)[0]
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait()
    assert sent > 0
    assert rank1.returncode == 0 and "sum 3.0" in rank1.stdout, rank1.stdout + rank1.stderr
    assert rank0.returncode == 0 and "sum 3.0" in out0, out0
