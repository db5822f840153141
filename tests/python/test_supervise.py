"""The process-supervision helper shared by ``gocl run`` and the pytest plugin."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from gocl.tools._supervise import describe_exit, first_failure, kill_running, stop, watch


def test_describe_exit():
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(3, sentence=True) == "exited with code 3"
    assert describe_exit(-signal.SIGTERM) == "killed by signal SIGTERM"
    assert describe_exit(-signal.SIGKILL, sentence=True) == "was killed by signal SIGKILL"
    assert describe_exit(None) == "still running"
    assert describe_exit(-200) == "killed by signal 200"


def test_first_failure():
    assert first_failure([0, None, 0]) is None
    assert first_failure([0, None, 2, 1]) == 2
    assert first_failure([75, 0, 1], ok=(0, 75)) == 2


def _group(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_stop_reaches_the_group_and_kills_after_grace():
    # The rank ignores SIGTERM and has a child that would outlive it: SIGKILL
    # after the grace takes both (the child's pid is printed to check).
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(c.pid, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    quick = _group("import time; time.sleep(60)")
    start = time.monotonic()
    stop([p, quick], signal.SIGTERM, grace=0.5)
    assert 0.4 < time.monotonic() - start < 10
    assert p.returncode == -signal.SIGKILL and quick.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"child {child} of the stopped rank still runs")


def test_kill_running_reaps_only_the_living():
    done = _group("pass")
    done.wait()
    alive = _group("import time; time.sleep(60)")
    kill_running([done, alive])
    assert done.returncode == 0 and alive.returncode == -signal.SIGKILL


def test_watch_until_failure_linger_or_deadline():
    seen = []
    ok = _group("import time; time.sleep(0.3)")
    bad = _group("import sys, time; time.sleep(0.2); sys.exit(3)")
    slow = _group("import time; time.sleep(60)")
    procs = [ok, bad, slow]
    try:
        start = time.monotonic()
        out = watch(procs, linger=0.5, on_failure=lambda r, codes: seen.append((r, codes[r])))
        assert 0.6 < time.monotonic() - start < 10  # the failure plus the linger, not slow's 60 s
        assert (out.first_failed, out.running, out.timed_out) == (1, [2], False)
        assert seen == [(1, 3)]
        skip = _group("import sys; sys.exit(75)")
        out = watch([skip, slow], ok=(0, 75), deadline=time.monotonic() + 0.3)
        assert (out.first_failed, out.running, out.timed_out) == (None, [1], True)
        assert watch([ok, skip]).running == []  # all exited: done, whatever the codes
    finally:
        kill_running(procs)
