"""Heartbeats: a rank whose process stops answering (SIGSTOP here; a
debugger, a frozen VM or a host cut off look the same) is named on every
survivor within GOCL_HEARTBEAT_TIMEOUT, though GOCL_TIMEOUT is 600 s: in a
call, and between calls. The torch side (all_reduce raises, shrink_group
drops it) is in torch/test_torch_recovery.py; the 64-rank and no-false-alarm
runs in bench/heartbeat.py (make bench-heartbeat)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import gocl

VICTIM = 3
HB = 2.0  # GOCL_HEARTBEAT_TIMEOUT here
# A loaded 2-core host may delay each step by seconds; what matters is that
# the survivors do not wait for GOCL_TIMEOUT (600 s).
SLACK = 20.0


def _setup():
    os.environ.update(GOCL_TIMEOUT="600", GOCL_HEARTBEAT_TIMEOUT=str(HB))
    comm = gocl.Communicator.from_env()
    pids = comm.all_gather(np.array([os.getpid()], np.int64)).ravel()
    box = Path("/tmp") / f"gocl-heartbeat-test-{os.environ['MASTER_PORT']}-{pids[0]}"
    box.mkdir(exist_ok=True)
    return comm, pids, box


def _stop_self():
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)  # resumed by rank 0 once every survivor has its error


def _check_and_release(comm, err: Exception, pids, box: Path):
    msg = str(err)
    assert isinstance(err, gocl.errors.GoclTimeoutError), msg
    assert f"rank {VICTIM} stalled" in msg and "stopped answering gocl's heartbeats" in msg, msg
    assert f"pid {pids[VICTIM]}" in msg, msg
    (box / f"seen-{comm.rank}").write_text(msg)
    if comm.rank == 0:  # every survivor has its error: let the victim exit
        end = time.monotonic() + 60
        while len(list(box.glob("seen-*"))) < comm.world_size - 1 and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(int(pids[VICTIM]), signal.SIGCONT)
        for f in box.iterdir():
            f.unlink()
        box.rmdir()
    comm.abort()


@pytest.mark.ranks(8)
def test_a_rank_stopped_during_calls_is_named_within_the_heartbeat_timeout():
    comm, pids, box = _setup()
    x = np.ones(1 << 14, np.float32)
    last = time.monotonic()
    try:
        for i in range(1_000_000):
            if comm.rank == VICTIM and i == 20:
                _stop_self()
            comm.all_reduce(x, out=x)
            x.fill(1.0)
            last = time.monotonic()
        pytest.fail("the loop ended without an error")
    except gocl.errors.GoclError as e:
        waited = time.monotonic() - last
        assert waited < HB + SLACK, f"failed {waited:.1f} s after the last good call: {e}"
        _check_and_release(comm, e, pids, box)


@pytest.mark.ranks(8)
def test_a_rank_stopped_between_calls_fails_the_next_call_at_once():
    comm, pids, box = _setup()
    comm.barrier()
    if comm.rank == VICTIM:
        _stop_self()
    time.sleep(HB + 3.0)  # idle, while the heartbeats find it
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(1000, np.float64))
        pytest.fail("an all_reduce with a stopped rank succeeded")
    except gocl.errors.GoclError as e:
        assert time.monotonic() - t0 < SLACK, f"the call waited {time.monotonic() - t0:.1f} s: {e}"
        _check_and_release(comm, e, pids, box)
