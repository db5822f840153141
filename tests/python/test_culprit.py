"""Failures name the rank that caused them, and abort unblocks a stuck rank.

A stopped rank (SIGSTOP) in a ring: the rank waiting on it and the rank
waiting on that one both name the stopped rank (the root of the wait chain),
not their neighbour. ``abort()`` from another thread ends a call stuck on a
peer within 1 s, over every transport.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gocl
from gocl.tools import cli, trace


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "NCCL_"))}
    env.update(extra)
    return env


# Rank 2 of 3 stops itself after a first all_reduce; in a ring rank 0 waits
# for rank 2 and rank 1 for rank 0. Both must blame rank 2.
STOPPED = """
    import os, signal, time
    import numpy as np, gocl
    comm = gocl.Communicator.from_env()
    comm.all_reduce(np.ones(4096, np.float32))
    print("PID", os.getpid(), flush=True)
    if comm.rank == 2:
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(4096, np.float32))
        print("NO ERROR", flush=True)
    except gocl.GoclTimeoutError as e:
        print(f"TIMEOUT after {time.monotonic() - t0:.2f} s: {e}", flush=True)
    comm.abort()
"""


def test_stopped_rank_is_named_by_every_survivor(tmp_path, capsys):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(STOPPED)],
                              env=clean_env(RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=str(port), GOCL_SOCKET_IFNAME="lo",
                                            GOCL_TIMEOUT="2", GOCL_ALGO="ring",
                                            GOCL_TRACE_FILE=str(tmp_path / "trace-%r.jsonl")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(3)]
    outs = {}
    try:
        for r in (0, 1):
            outs[r] = procs[r].communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for r in (0, 1):
        out, err = outs[r]
        assert procs[r].returncode == 0, out + err
        line = next((ln for ln in out.splitlines() if ln.startswith("TIMEOUT")), out + err)
        assert "rank 2 stalled" in line and "did not answer a liveness probe" in line, line
        assert line.count(f"rank {r}") == 1, line  # this rank is named once, by the call
        took = float(line.split()[2])
        assert 1.5 <= took < 8, line
    # the survivors wrote their flight recorders when they failed; the
    # stopped rank could not, and `gocl trace` says so
    files = sorted(str(p) for p in tmp_path.glob("trace-*.jsonl"))
    assert [os.path.basename(f) for f in files] == ["trace-0.jsonl", "trace-1.jsonl"], files
    assert cli.main(["trace", *files]) == 0
    report = capsys.readouterr().out
    assert "rank 2 wrote no trace" in report and "=> look at rank 2 (no trace)" in report, report
    assert "ranks 0, 1 still in allreduce #2 (count 4096, float32, sum)" in report, report


def rec(rank, seq, op="allreduce", count=8, state="completed", **kw):
    return {"comm": "c1", "rank": rank, "nranks": 3, "id": seq, "op": op, "seq": seq, "count": count,
            "dtype": "float32", "redop": "sum", "state": state, "duration_us": 10.0, "transport": "shm", **kw}


def test_trace_names_the_rank_behind_and_the_call_it_lacks():
    recs = [rec(0, 0), rec(0, 1, state="started"), rec(1, 0), rec(1, 1, state="started"), rec(2, 0)]
    report = "\n".join(trace.analyse(recs))
    assert "rank 2 is behind: it never started allreduce #1 (count 8, float32, sum), which ranks 0, 1 are in" in report
    assert "=> look at rank 2 (behind" in report, report


def test_trace_names_calls_that_differ(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    lines = [rec(0, 0), rec(1, 0), rec(2, 0), rec(0, 1, count=8), rec(1, 1, count=9), rec(2, 1, count=8)]
    path.write_text("\n".join(map(json.dumps, lines)) + "\nnot json\n")
    assert cli.main(["trace", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "collective #1 differs between ranks: ranks 0, 2: allreduce #1 (count 8" in out, out
    assert "rank 1: allreduce #1 (count 9" in out and "not a gocl trace record" in err, (out, err)


VIAS = {"inproc": {}, "shm": {"GOCL_P2P_DISABLE": "1"},
        "socket": {"GOCL_P2P_DISABLE": "1", "GOCL_SHM_DISABLE": "1", "GOCL_SOCKET_IFNAME": "lo"}}


@pytest.mark.parametrize("end", ["abort", "destroy"])  # destroy never waits on peers either
@pytest.mark.parametrize("via", list(VIAS))
def test_abort_from_another_thread_unblocks_within_a_second(monkeypatch, via, end):
    for k in ("GOCL_P2P_DISABLE", "GOCL_SHM_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GOCL_TIMEOUT", "60")
    for k, v in VIAS[via].items():
        monkeypatch.setenv(k, v)
    comms = gocl.Communicator.local(2)
    out = {}

    def stuck():  # rank 1 never joins: rank 0 waits for it
        try:
            comms[0].all_reduce(np.ones(1 << 16, np.float32))
            out["err"] = None
        except gocl.GoclError as e:
            out["err"] = e
        out["t"] = time.monotonic()

    t = threading.Thread(target=stuck)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), out
    start = time.monotonic()
    getattr(comms[0], end)()
    t.join(5)
    assert not t.is_alive(), f"{end} did not unblock the all_reduce over {via}"
    assert out["t"] - start < 1.0, f"{end} took {out['t'] - start:.2f} s over {via}"
    assert isinstance(out["err"], gocl.GoclError) and "abort" in str(out["err"]), out["err"]
    # the peer's next call fails naming rank 0 instead of waiting
    with pytest.raises(gocl.RemoteError, match="rank 0"):
        for _ in range(2):  # over sockets the first may complete from buffered data
            comms[1].all_reduce(np.ones(4, np.float32))
    comms[1].abort()


def test_dump_trace_on_request(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GOCL_TRACE_BUFFER", "16")
    comms = gocl.Communicator.local(2)
    xs = [np.ones(5, np.float32) for _ in comms]
    with gocl.group():
        for c, x in zip(comms, xs):
            c.all_reduce(x)
    for c in comms:
        c.dump_trace(tmp_path / f"t{c.rank}.jsonl")
        c.destroy()
    assert cli.main(["trace", str(tmp_path / "t0.jsonl"), str(tmp_path / "t1.jsonl")]) == 0
    report = capsys.readouterr().out
    assert "rank 1: last collective allreduce #1 (count 5, float32, sum) via " in report, report
    assert "=> every rank that wrote a trace reached the same call" in report, report
    monkeypatch.delenv("GOCL_TRACE_BUFFER")
    (solo,) = gocl.Communicator.local(1)
    with pytest.raises(gocl.InvalidUsageError, match="GOCL_TRACE_BUFFER"):
        solo.dump_trace(tmp_path / "x.jsonl")
    solo.destroy()
