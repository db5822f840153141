"""A peer rank for tests/python/test_hygiene.py, driven line by line on stdin:

    init HEX RANK WORLD   -> Communicator(bytes.fromhex(HEX), RANK, WORLD)
    ar K COUNT            -> K all_reduces of COUNT float32 ones (checked)
    destroy | abort       -> end the communicator
    exit
Each command answers one line: "ok" or "err <type>: <message>".
"""

from __future__ import annotations

import sys

import numpy as np

import gocl

comm = None
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "init":
            comm = gocl.Communicator(bytes.fromhex(args[0]), int(args[1]), int(args[2]), timeout=20)
        elif cmd == "ar":
            x = np.ones(int(args[1]), np.float32)
            for _ in range(int(args[0])):
                comm.all_reduce(np.ones_like(x), out=x)
                if x[0] != comm.world_size:
                    raise AssertionError(f"sum {x[0]}, want {comm.world_size}")
        elif cmd == "destroy":
            comm.destroy()
        elif cmd == "abort":
            comm.abort()
        elif cmd == "exit":
            break
        print("ok", flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the driver
        print(f"err {type(e).__name__}: {e}".replace("\n", " "), flush=True)
