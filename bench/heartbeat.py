#!/usr/bin/env python3
"""Heartbeats at scale (issue 41), two runs of N processes under `gocl run`
on this host (64 by default: 32 ranks per core on 2 cores):

* **no false alarms** (`--mode quiet`): for --seconds, rank 0 picks phases
  and broadcasts them: collectives (all_reduce 4 KiB..1 MiB, all_gather,
  broadcast, for ~3 s), idle (every rank sleeps 1..12 s, past the
  heartbeat timeout), and busy in Python (a pure-Python loop holding the
  GIL for 1..12 s); with --load busy-looping processes beside them (extra
  CPU load). A heartbeat verdict fails a call; the run counts them (the goal
  is zero) and the calls made.
* **detection** (`--mode stop`): the ranks all-reduce 64 KiB in a loop with
  GOCL_TIMEOUT=600; rank --victim stops itself (SIGSTOP) during the loop
  (`--when call`) or after a barrier while the others sleep (`--when idle`,
  then they call). Each survivor reports the seconds from the stop to its
  error and what the error names; the table gives the median and max.

Timed runs belong under the shared CPU lock:
flock /tmp/gocl-cpu.lock python bench/heartbeat.py ...
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def worker_quiet(seconds: float) -> int:
    import numpy as np

    import gocl

    comm = gocl.Communicator.from_env()
    rng = np.random.default_rng(1234)
    calls = 0
    phases = {"calls": 0, "idle": 0, "gil": 0}
    t0 = time.monotonic()
    bufs = {n: np.ones(n // 4, np.float32) for n in (4096, 65536, 1 << 20)}
    gathered = np.empty(comm.world_size * 1024, np.float32)
    try:
        while True:
            # Rank 0 decides the phase (and the end) for everyone.
            plan = np.zeros(2, np.float64)
            if comm.rank == 0:
                kind = rng.choice([0, 1, 2], p=[0.5, 0.25, 0.25])
                plan[:] = (-1 if time.monotonic() - t0 > seconds else kind, rng.uniform(1, 12))
            comm.broadcast(plan, root=0)
            kind, secs = int(plan[0]), float(plan[1])
            if kind < 0:
                break
            if kind == 0:
                phases["calls"] += 1
                end = time.monotonic() + 3
                go = np.ones(1, np.int32)
                while go[0]:
                    for b in bufs.values():
                        comm.all_reduce(b, out=b)
                        b.fill(1.0)
                    comm.all_gather(bufs[4096][:1024], out=gathered)
                    go[0] = int(time.monotonic() < end)
                    comm.broadcast(go, root=0)
                    calls += len(bufs) + 2
            elif kind == 1:
                phases["idle"] += 1
                time.sleep(secs)
            else:
                phases["gil"] += 1
                end = time.monotonic() + secs
                x = 0
                while time.monotonic() < end:  # the GIL held, in Python
                    for i in range(10000):
                        x += i * i
            comm.barrier()
            calls += 2
    except gocl.GoclError as e:
        print(f"VERDICT rank {comm.rank} after {time.monotonic() - t0:.1f} s: {e}", flush=True)
        return 1
    print(f"DONE rank {comm.rank} calls {calls} phases {phases['calls']}/{phases['idle']}/{phases['gil']}", flush=True)
    comm.destroy()
    return 0


def worker_stop(victim: int, when: str) -> int:
    import numpy as np

    import gocl

    os.environ["GOCL_TIMEOUT"] = "600"
    comm = gocl.Communicator.from_env()
    pids = comm.all_gather(np.array([os.getpid()], np.int64)).ravel()
    box = Path(os.environ["HB_BOX"])
    x = np.ones(1 << 14, np.float32)
    try:
        if when == "idle":
            comm.barrier()
            if comm.rank == victim:
                (box / "stopped").write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGSTOP)
                return 0
            time.sleep(float(os.environ.get("GOCL_HEARTBEAT_TIMEOUT", "5")) + 3)
            t_call = time.time()
            comm.all_reduce(x, out=x)
        else:
            for i in range(1_000_000):
                if comm.rank == victim and i == 50:
                    (box / "stopped").write_text(str(time.time()))
                    os.kill(os.getpid(), signal.SIGSTOP)
                    return 0
                comm.all_reduce(x, out=x)
                x.fill(1.0)
        print(f"NOERROR rank {comm.rank}", flush=True)
        return 1
    except gocl.GoclError as e:
        now = time.time()
        stopped = float((box / "stopped").read_text())
        call = now - t_call if when == "idle" else float("nan")
        named = re.search(r"rank (\d+) stalled: it stopped answering", str(e))
        print(f"DETECT rank {comm.rank} after {now - stopped:.3f} s call {call:.3f} s names "
              f"{named.group(1) if named else 'OTHER: ' + str(e)[:300]}", flush=True)
        (box / f"seen-{comm.rank}").write_text("")
        if comm.rank == 0 or (comm.rank == 1 and victim == 0):
            end = time.monotonic() + 120
            while len(list(box.glob("seen-*"))) < comm.world_size - 1 and time.monotonic() < end:
                time.sleep(0.05)
            os.kill(int(pids[victim]), signal.SIGCONT)  # it returns and exits
        comm.abort()
        return 0


def _seconds(d: str) -> float:
    """A Go duration as Go prints it (1.5s, 12.3ms, 800µs) in seconds."""
    total = 0.0
    for num, unit in re.findall(r"([\d.]+)(ns|µs|us|ms|s|m|h)", d):
        total += float(num) * {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def run(args, mode_args: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    cmd = [sys.executable, "-m", "gocl", "run", "-n", str(args.ranks), "--", sys.executable, str(HERE), "--worker",
           *mode_args]
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 600)
    finally:
        for q in load:
            q.kill()
            q.wait()
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["quiet", "stop"], default="quiet")
    ap.add_argument("-n", "--ranks", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600, help="quiet: how long to run")
    ap.add_argument("--load", type=int, default=2, help="busy-looping processes beside the ranks")
    ap.add_argument("--victim", type=int, default=37)
    ap.add_argument("--when", choices=["call", "idle"], default="call")
    ap.add_argument("--heartbeat", default="", help="GOCL_HEARTBEAT_TIMEOUT for the run (unset: gocl's default)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_quiet(args.seconds) if args.mode == "quiet" else worker_stop(args.victim, args.when)
    env = dict(os.environ)
    if "GOCL_DEBUG" not in env:  # each watcher logs its slowest answer at INFO when its communicator ends
        env.update(GOCL_DEBUG="INFO", GOCL_DEBUG_SUBSYS="INIT")
    if args.heartbeat:
        env["GOCL_HEARTBEAT_TIMEOUT"] = args.heartbeat
    hb = env.get("GOCL_HEARTBEAT_TIMEOUT", "default (5)")
    print(f"# {args.ranks} processes on {os.cpu_count()} CPUs ({args.ranks / os.cpu_count():.0f} per core), "
          f"{args.load} busy-looping processes beside them, GOCL_HEARTBEAT_TIMEOUT={hb}")
    if args.mode == "quiet":
        rc, out, took = run(args, ["--mode", "quiet", "--seconds", str(args.seconds)], env)
        done = [m for m in re.finditer(r"^(?:\[rank \d+\] )?DONE rank (\d+) calls (\d+) phases (\d+)/(\d+)/(\d+)", out, re.M)]
        verdicts = re.findall(r"^(?:\[rank \d+\] )?VERDICT .*", out, re.M)
        calls = sum(int(m[2]) for m in done)
        ph = done[0].groups()[2:] if done else ("?", "?", "?")
        print(f"quiet: {took:.0f} s, exit {rc}, ranks done {len(done)}/{args.ranks}, calls {calls} in all, "
              f"phases (collectives/idle/busy in Python) {'/'.join(ph)}, heartbeat verdicts {len(verdicts)}")
        for v in verdicts[:5]:
            print("  " + v[:400])
        slow = [_seconds(m[1]) for m in re.finditer(r"heartbeat on rank \d+: \d+ asks, slowest answer (\S+)", out)]
        asks = sum(int(m[1]) for m in re.finditer(r"heartbeat on rank \d+: (\d+) asks", out))
        if slow:
            print(f"heartbeat answers: {asks} asks by {len(slow)} watchers; each watcher's slowest answer: median "
                  f"{statistics.median(slow) * 1e3:.1f} ms, max {max(slow) * 1e3:.1f} ms")
        if rc != 0 and not verdicts:
            print(out[-3000:])
        return 0 if rc == 0 and not verdicts and len(done) == args.ranks else 1
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gocl-hb-") as box:
        env["HB_BOX"] = box
        rc, out, took = run(args, ["--mode", "stop", "--victim", str(args.victim), "--when", args.when], env)
    det = [(int(m[1]), float(m[2]), float(m[3]), m[4]) for m in
           re.finditer(r"^(?:\[rank \d+\] )?DETECT rank (\d+) after ([\d.]+) s call ([\d.na]+) s names (.*)$", out, re.M)]
    wrong = [d for d in det if d[3] != str(args.victim)]
    if not det:
        print(out[-3000:])
        return 1
    after = [d[1] for d in det]
    calls = [d[2] for d in det if d[2] == d[2]]
    line = (f"stop ({args.when}): {len(det)}/{args.ranks - 1} survivors failed naming rank {args.victim}: "
            f"{len(det) - len(wrong)}; from the stop to the error: median {statistics.median(after):.2f} s, "
            f"max {max(after):.2f} s")
    if calls:
        line += f"; the call after the idle period took median {statistics.median(calls):.3f} s, max {max(calls):.3f} s"
    print(line + f" (run {took:.0f} s, exit {rc})")
    for d in wrong[:5]:
        print(f"  rank {d[0]} named: {d[3]}")
    return 0 if len(det) == args.ranks - 1 and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
