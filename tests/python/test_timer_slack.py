"""The Go runtime's own threads (its first thread, sysmon and what they start)
get a coarse timer slack from capi/gocl.c's constructors; the thread that loads
the library keeps its own. A thread the runtime starts while it runs a call on
the caller's thread inherits the caller's slack, so only the threads present
after loading are checked."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is Linux's")

_PROBE = r"""
import os, time
import numpy as np
import gocl
from gocl import _lib

def slacks():
    return {int(t): int(open(f"/proc/{t}/timerslack_ns").read()) for t in os.listdir("/proc/self/task")}

before = slacks()
_lib.lib()
time.sleep(0.2)  # the runtime's first thread starts sysmon and its helpers
loaded = slacks()
with gocl.Communicator.local(1)[0] as comm:
    x = np.arange(5, dtype=np.float32)
    comm.all_reduce(x)
after = slacks()
go = {t: s for t, s in loaded.items() if t not in before}
print(before[os.getpid()], after[os.getpid()], len(go), min(go.values()), max(go.values()))
"""


def test_go_threads_get_the_slack_and_the_loader_keeps_its_own():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loader_before, loader_after, n, low, high = map(int, out.stdout.split())
    assert loader_after == loader_before  # the caller's thread is untouched
    assert n >= 2  # the runtime's first thread and sysmon at least
    assert low == high == 1_000_000  # GOCL_GO_TIMER_SLACK_NS in capi/gocl.c
