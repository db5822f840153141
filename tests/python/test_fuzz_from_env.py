"""Fuzz from_env's unique-id exchange at its port: rank 0 serves the id on
MASTER_PORT while random connections send it garbage, truncated hellos and
well-formed hellos with wrong fields; then the real rank 1 fetches the id and
both all_reduce. Runs GOCL_FUZZ_SECONDS (default 1; `make fuzz` sets more).

The exchange carries the id itself, so it cannot demand proof of the id's
secret; what it must do is ignore what is not a rank of this round and keep
serving (gocl's bootstrap then authenticates every connection).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import sys
import time

from gocl.launcher import free_port, rank_env

SECONDS = float(os.environ.get("GOCL_FUZZ_SECONDS", "1"))
MAGIC = b"GOCLUID1"  # from_env's hello: magic, rank, world size, round (network order)
RANK = ("import gocl, numpy as np\n"
        "with gocl.Communicator.from_env() as c:\n"
        "    x = c.all_reduce(np.full(3, c.rank + 1, np.float32))\n"
        "    print('sum', x[0], flush=True)\n")


def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # random bytes
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 1:  # a truncated hello
        return (MAGIC + rng.randbytes(12))[: rng.randrange(0, 20)]
    if kind == 2:  # the magic, then random fields
        return MAGIC + rng.randbytes(12)
    if kind == 3:  # a hello of another world size or round (never this round's: that would be rank 1 itself)
        world, gen = rng.choice([(rng.randrange(-5, 99), 1), (2, rng.randrange(2, 1 << 31))])
        if (world, gen) == (2, 1):
            world = 3
        return MAGIC + struct.pack("!iii", 1, world, gen)
    return b"\x00" * rng.randrange(1, 4096) + MAGIC  # a flood, the magic late


def test_from_env_exchange_survives_garbage():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOCL_MASTER")}
    env["GOCL_TIMEOUT"] = "30"
    rank0 = subprocess.Popen([sys.executable, "-c", RANK], env=rank_env(0, 2, "127.0.0.1", port, env),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rng = random.Random(int(os.environ.get("GOCL_FUZZ_SEED", time.time_ns())))
    sent = 0
    try:
        end = None  # the clock starts once rank 0 listens
        limit = time.monotonic() + 60
        while (end is None or time.monotonic() < end) and time.monotonic() < limit and rank0.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(_garbage(rng))
                    s.shutdown(socket.SHUT_WR)
                    s.recv(256)  # whatever rank 0 answers (nothing, retry, or a refusal)
                sent += 1
                end = end or time.monotonic() + SECONDS
            except OSError:
                time.sleep(0.01)  # not listening yet, or reset
        assert rank0.poll() is None, rank0.communicate()[0]
        rank1 = subprocess.run([sys.executable, "-c", RANK], env=rank_env(1, 2, "127.0.0.1", port, env),
                               capture_output=True, text=True, timeout=60)
        out0 = rank0.communicate(timeout=60)[0]
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait()
    assert sent > 0
    assert rank1.returncode == 0 and "sum 3.0" in rank1.stdout, rank1.stdout + rank1.stderr
    assert rank0.returncode == 0 and "sum 3.0" in out0, out0
