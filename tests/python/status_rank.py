"""A rank of test_status.py's jobs: all-reduces until DIR/stop appears, then
checks the communicator still works and exits 0. While DIR/busy-RANK
exists, that rank computes in Python (holding the GIL) between its calls.

    status_rank.py DIR
"""

import os
import sys
import time

import numpy as np

import gocl

stop = os.path.join(sys.argv[1], "stop")
with gocl.Communicator.from_env(timeout=120) as c:
    x = np.ones(4096, np.float32)
    open(os.path.join(sys.argv[1], f"up-{c.rank}"), "w").close()
    busy = os.path.join(sys.argv[1], f"busy-{c.rank}")
    while True:
        while os.path.exists(busy):
            sum(i * i for i in range(100_000))
        c.all_reduce(x)
        if c.all_reduce(np.array([os.path.exists(stop)], np.int32))[0]:  # every rank stops at the same call
            break
        time.sleep(0.001)
    y = c.all_reduce(np.ones(3, np.float64))
    assert (y == c.size).all(), y
print("done", flush=True)
