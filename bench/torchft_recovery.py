#!/usr/bin/env python3
"""torchft, a real run: recovery time and steady-state speed of gocl's
ProcessGroupGocl beside torchft's ProcessGroupGloo and ProcessGroupBabyGloo.

One trial, for one process group (--pg gocl|gloo|babygloo):

1. start torchft's lighthouse (the torchft_lighthouse executable);
2. start 2 replica groups (one process each, its own TCPStore), each training
   the same small MLP with torchft's Manager, torchft's DDP and
   OptimizerWrapper over that process group (min_replica_size=1, so a lone
   replica keeps training);
3. when both have committed --kill-step steps, SIGKILL replica 1 and start it
   again at once (same replica id, a new process); it joins the next quorum
   and heals from replica 0 (torchft's checkpoint transfer over HTTP). With
   --fault stop, replica 1 is first stopped (SIGSTOP: hung, its sockets
   open) until replica 0 has committed a step begun after the stop, then
   killed and restarted the same way; the times count from the stop;
4. once the restarted replica has committed --after steps, both are told a
   final step and stop there; their parameters and optimizer state are
   compared (they must be equal, bit for bit).

Measured, on CLOCK_MONOTONIC (one clock for every process of the machine):

* steady steps/s: replica 0's committed steps per second between --warmup
  and --kill-step, both replicas in the quorum;
* survivor recovery: from the kill to the end of replica 0's first committed
  step begun after it (the first good step; it then trains alone);
* rejoin: from the kill to the first step the restarted replica commits
  (it includes starting Python, importing torch and healing, which every
  process group pays alike);
* configure: the median time of the process group's configure() (torchft's
  Manager calls it at every new quorum), over both replicas' quorums of 2
  replicas, and of 1 (the survivor alone).

Trials alternate the process groups (gocl, gloo, babygloo, gocl, ...) for
--rounds rounds; the table holds medians. Timed runs belong under the shared
CPU lock: flock /tmp/gocl-cpu.lock python bench/torchft_recovery.py ...
--short runs one round with few steps (make test-torchft).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PGS = ("gocl", "gloo", "babygloo")
HERE = Path(__file__).resolve()


# ---------------------------------------------------------------- the replica

def _model(width: int, depth: int):
    import torch
    from torch import nn

    torch.manual_seed(1234)  # every replica starts from the same weights
    layers = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers += [nn.Linear(width, 10)]
    return nn.Sequential(*layers)


def _make_pg(name: str, timeout, as_is: bool = False):
    if name == "gocl":
        from gocl.torchft import ProcessGroupGocl

        return ProcessGroupGocl(timeout=timeout)
    from torchft.process_group import ProcessGroupBabyGloo, ProcessGroupGloo

    if name == "gloo":
        pg = ProcessGroupGloo(timeout=timeout)
    elif name == "babygloo":
        pg = ProcessGroupBabyGloo(timeout=timeout)
    else:
        raise ValueError(f"--pg {name!r}: use one of {', '.join(PGS)}")
    if not as_is:
        pg.allreduce = _adapted(pg.allreduce, timeout.total_seconds())
    return pg


def _adapted(allreduce, timeout_s: float):
    """torchft's gloo groups' allreduce with Works that keep two torchft
    0.2.0 bugs out of the way (ProcessGroupGocl's Works behave so by
    themselves); --as-is runs them unchanged.

    1. A failed call's wait() raises (gloo: "Connection reset by peer"
       when the other replica is killed mid-allreduce). torchft's
       _ManagedWork.wait reports the exception, but never builds its future
       chain, so DistributedDataParallel's comm hook fails ``assert
       fut._fut`` and the surviving replica dies with an AssertionError.
       Here wait() returns False and the future carries the error, which the
       Manager's wrap_future reports (the step is not committed).
    2. Baby's futures complete after wait() returns, on its future thread.
       _ManagedWork._set_future_callback chains callbacks in a loop whose
       closure reads the loop variable (``nonlocal managed_fut``), so a
       callback that runs after the loop moved on sees the chain's tail
       and fails ``assert managed_fut._callback``: every step fails and
       none is ever committed. Here wait() returns once the future is
       complete, as gloo's and gocl's are."""
    import threading

    import torch
    import torch.distributed as dist

    class AdaptedWork(dist.Work):
        def __init__(self, work):
            super().__init__()
            self._work, self._fut = work, None

        def wait(self, timeout=None):
            err = None
            try:
                ok = bool(self._work.wait())
            except Exception as exc:  # noqa: BLE001 - goes to the future
                ok, err = False, exc
            fut = None
            if ok:
                fut = self._work.get_future()
                done = threading.Event()
                fut.add_done_callback(lambda _: done.set())
                if not done.wait(timeout_s):
                    fut, err = None, TimeoutError(f"the future was not complete {timeout_s:g} s after wait()")
            if fut is None:
                fut = torch.futures.Future()
                fut.set_exception(err)
            self._fut = fut
            return ok

        def get_future(self):
            return self._fut if self._fut is not None else self._work.get_future()

    return lambda tensors, opts: AdaptedWork(allreduce(tensors, opts))


def replica_main(a) -> None:
    from datetime import timedelta

    import torch
    from torch import nn
    from torch.distributed import TCPStore
    from torchft import Manager
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper

    torch.set_num_threads(1)
    log = open(a.log, "a", buffering=1)

    def emit(**kv):
        log.write(json.dumps(kv) + "\n")

    emit(ev="start", t=time.monotonic(), pid=os.getpid())
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=a.timeout)
    pg = _make_pg(a.pg, timeout, a.as_is)
    configure_s = []
    configure = pg.configure

    def timed_configure(*args, **kwargs):
        t0 = time.monotonic()
        configure(*args, **kwargs)
        configure_s.append(time.monotonic() - t0)
        emit(ev="configure", t=time.monotonic(), s=configure_s[-1], world=args[3])

    pg.configure = timed_configure

    model = _model(a.width, a.depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    manager = Manager(
        pg=pg, min_replica_size=1, load_state_dict=load_state_dict, state_dict=state_dict,
        replica_id=f"bench_{a.replica}", store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
        lighthouse_addr=a.lighthouse, timeout=timeout, quorum_timeout=timedelta(seconds=a.timeout),
        hostname="127.0.0.1")
    # One bucket: torchft 0.2.0's DDP comm hook fails (AttributeError: 'Future'
    # object has no attribute '_fut') on every bucket after the first once a
    # step has failed, whatever the process group (Manager.allreduce then
    # returns a _DummyWork, whose future is a plain one).
    ddp = DistributedDataParallel(manager, model, bucket_cap_mb=a.bucket_mb)
    optimizer = OptimizerWrapper(manager, opt)
    loss_fn = nn.CrossEntropyLoss()
    stop_file = Path(a.stop_file)
    final = None
    it = 0
    while True:
        if final is None and stop_file.exists():
            final = int(stop_file.read_text() or 0)
        if final is not None and manager.current_step() >= final:
            break
        g = torch.Generator().manual_seed(a.replica * 1_000_003 + it)
        x = torch.randn(a.batch, 64, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        it += 1
        t0 = time.monotonic()
        optimizer.zero_grad()  # starts the quorum (async, during the forward)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        before = manager.current_step()
        optimizer.step()  # should_commit, then the optimizer's step
        step = manager.current_step()
        emit(ev="step", t0=t0, t=time.monotonic(), step=step, ok=step > before, n=manager.num_participants())
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"model": out, "optim": opt.state_dict(), "step": manager.current_step()}, a.out)
    emit(ev="done", t=time.monotonic(), step=manager.current_step(), configure_s=configure_s)
    manager.shutdown(wait=False)
    pg.shutdown()
    log.close()
    os._exit(0)  # torchft's threads and the store must not hold the exit


# ---------------------------------------------------------------- the driver

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    evs = []
    for line in path.read_text().splitlines():
        try:
            evs.append(json.loads(line))
        except ValueError:  # a line being written
            pass
    return evs


def _committed(evs) -> list[dict]:
    return [e for e in evs if e["ev"] == "step" and e["ok"]]


def _wait(cond, what: str, limit: float, procs):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        for name, p in procs.items():
            if p is not None and p.poll() not in (None, 0, -signal.SIGKILL):
                raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}")
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {limit:g} s waiting for {what}")


def run_trial(pg: str, a, work: Path) -> dict:
    import torch

    work.mkdir(parents=True, exist_ok=True)
    lh_port = _free_port()
    lighthouse_bin = shutil.which("torchft_lighthouse") or str(Path(sys.executable).parent / "torchft_lighthouse")
    lh = subprocess.Popen([lighthouse_bin, "--min_replicas", "1", "--bind", f"[::]:{lh_port}",
                           "--join_timeout_ms", str(a.join_timeout_ms),
                           "--heartbeat_timeout_ms", str(a.heartbeat_timeout_ms),
                           "--quorum_tick_ms", str(a.quorum_tick_ms)],
                          stdout=open(work / "lighthouse.log", "w"), stderr=subprocess.STDOUT)
    stop_file = work / "final_step"
    logs = [work / f"replica{i}.jsonl" for i in range(2)]
    outs = [work / f"replica{i}.pt" for i in range(2)]

    def start(i: int, attempt: int):
        cmd = [sys.executable, str(HERE), "--replica", str(i), "--pg", pg, "--lighthouse", f"http://127.0.0.1:{lh_port}",
               "--log", str(logs[i]), "--out", str(outs[i]), "--stop-file", str(stop_file),
               "--width", str(a.width), "--bucket-mb", str(a.bucket_mb), "--depth", str(a.depth), "--batch", str(a.batch), "--timeout", str(a.timeout)] + (["--as-is"] if a.as_is else [])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        return subprocess.Popen(cmd, env=env, stdout=open(work / f"replica{i}.{attempt}.out", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    procs = {"lighthouse": lh}
    try:
        time.sleep(0.2)
        procs["replica 0"], procs["replica 1"] = start(0, 0), start(1, 0)

        def joint():  # replica 0's first step committed with both replicas in the quorum
            return next((e["step"] for e in _committed(_events(logs[0])) if e["n"] == 2), None)

        s0 = _wait(joint, "both replicas in one quorum", a.limit, procs)
        lo, hi = s0 + a.warmup, s0 + a.kill_step

        def both_at():
            return all(any(e["step"] >= hi and e["n"] == 2 for e in _committed(_events(p))) for p in logs)

        _wait(both_at, f"both replicas at step {hi}", a.limit, procs)
        victim = procs["replica 1"]
        if a.fault == "stop":  # hung, not dead: its sockets stay open
            os.killpg(victim.pid, signal.SIGSTOP)
            t_kill = time.monotonic()
            _wait(lambda: next((e for e in _committed(_events(logs[0])) if e["t0"] > t_kill), None),
                  "the survivor's first step begun after the stop", a.limit, procs)
        else:
            t_kill = time.monotonic()
        os.killpg(victim.pid, signal.SIGKILL)  # the replica (babygloo: its gloo subprocess too)
        victim.wait()
        n_before = len(_events(logs[1]))
        procs["replica 1"] = start(1, 1)

        def rejoined():
            evs = _events(logs[1])[n_before:]
            ok = [e for e in _committed(evs) if e["t"] > t_kill]
            return ok if len(ok) >= a.after else None

        _wait(rejoined, f"the restarted replica's {a.after} steps", a.limit, procs)
        top = max(e["step"] for p in logs for e in _committed(_events(p)))
        final = top + a.tail
        tmp = stop_file.with_suffix(".tmp")
        tmp.write_text(str(final))
        tmp.rename(stop_file)
        _wait(lambda: all(any(e["ev"] == "done" for e in _events(p)) for p in logs), "both replicas to finish",
              a.limit, procs)
        for name in ("replica 0", "replica 1"):
            procs[name].wait(timeout=30)

        ev0, ev1 = _events(logs[0]), _events(logs[1])[n_before:]
        c0 = _committed(ev0)
        window = [e for e in c0 if lo <= e["step"] <= hi and e["n"] == 2 and e["t"] < t_kill]
        steady = (window[-1]["step"] - window[0]["step"]) / (window[-1]["t"] - window[0]["t"])
        survivor = next(e for e in c0 if e["t0"] > t_kill)  # a step begun after the kill
        rejoin = next(e for e in _committed(ev1) if e["t"] > t_kill)
        both_again = next(e for e in c0 if e["t0"] > t_kill and e["n"] == 2)
        post = [e for e in c0 if e["t"] > rejoin["t"] and e["n"] == 2]
        post_rate = (post[-1]["step"] - post[0]["step"]) / (post[-1]["t"] - post[0]["t"]) if len(post) > 2 else None
        s0, s1 = torch.load(outs[0], weights_only=False), torch.load(outs[1], weights_only=False)
        equal = (s0["step"] == s1["step"] == final
                 and all(torch.equal(s0["model"][k], s1["model"][k]) for k in s0["model"])
                 and _same(s0["optim"], s1["optim"]))
        every = ev0 + _events(logs[1])  # both replicas, the killed process too
        cfg2 = [e["s"] for e in every if e["ev"] == "configure" and e["world"] == 2]
        cfg1 = [e["s"] for e in every if e["ev"] == "configure" and e["world"] == 1]
        healed = any(e["ev"] == "configure" for e in ev1)
        return {
            "pg": pg, "steady_steps_per_s": steady, "post_steps_per_s": post_rate,
            "survivor_recovery_s": survivor["t"] - t_kill, "rejoin_s": rejoin["t"] - t_kill,
            "both_again_s": both_again["t"] - t_kill,
            "configure_s": statistics.median(cfg2) if cfg2 else None,
            "configure_1_s": statistics.median(cfg1) if cfg1 else None,
            "final_step": final, "equal": bool(equal), "healed": healed,
            "kill_at_step": max(e["step"] for e in c0 if e["t"] < t_kill),
        }
    finally:
        for name, p in procs.items():
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL) if name != "lighthouse" else p.kill()
                except ProcessLookupError:
                    pass
                p.wait()


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _params(width: int, depth: int) -> int:
    return 64 * width + width + (depth - 1) * (width * width + width) + width * 10 + 10


def _fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def report(results: list[dict], a, pgs) -> str:
    med = {}
    for pg in pgs:
        rs = [r for r in results if r["pg"] == pg]
        med[pg] = {k: statistics.median([r[k] for r in rs if r[k] is not None] or [float("nan")])
                   for k in ("steady_steps_per_s", "post_steps_per_s", "survivor_recovery_s", "rejoin_s",
                             "both_again_s", "configure_s", "configure_1_s")}
        med[pg]["equal"] = all(r["equal"] for r in rs)
        med[pg]["trials"] = len(rs)
    f = a.fault
    lines = [f"| process group | trials | steady steps/s | after rejoin steps/s | {f} -> survivor's first good step (s) "
             f"| {f} -> restarted replica's first step (s) | {f} -> both in the quorum again (s) "
             "| configure, 2 replicas (ms) | configure, 1 replica (ms) | equal parameters |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for pg in pgs:
        m = med[pg]
        lines.append(f"| {pg} | {m['trials']} | {_fmt(m['steady_steps_per_s'], 1)} | {_fmt(m['post_steps_per_s'], 1)} "
                     f"| {_fmt(m['survivor_recovery_s'])} | {_fmt(m['rejoin_s'])} | {_fmt(m['both_again_s'])} "
                     f"| {_fmt(1000 * m['configure_s'], 1)} | {_fmt(1000 * m['configure_1_s'], 1)} | {'yes' if m['equal'] else 'NO'} |")
    if "gocl" in med:
        g = med["gocl"]
        for other in (p for p in pgs if p != "gocl"):
            o = med[other]
            lines.append("")
            lines.append(f"gocl vs {other}: steady speed {g['steady_steps_per_s'] / o['steady_steps_per_s']:.2f}x, "
                         f"survivor recovery {o['survivor_recovery_s'] / g['survivor_recovery_s']:.2f}x faster "
                         f"({o['survivor_recovery_s'] - g['survivor_recovery_s']:+.2f} s), rejoin "
                         f"{o['rejoin_s'] / g['rejoin_s']:.2f}x faster "
                         f"({o['rejoin_s'] - g['rejoin_s']:+.2f} s)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg", default="gocl,gloo,babygloo", help="process groups, comma-separated, alternated per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--short", action="store_true", help="one round, few steps (make test-torchft)")
    p.add_argument("--warmup", type=int, default=20, help="steps, from the first step both replicas commit together, before the steady-state window")
    p.add_argument("--kill-step", type=int, default=220, help="kill replica 1 once both committed this many steps together")
    p.add_argument("--fault", choices=["kill", "stop"], default="kill",
                   help="kill: SIGKILL replica 1; stop: SIGSTOP it (hung: its sockets stay open) until the survivor "
                        "has committed a step begun after the stop, then SIGKILL it; either way it is restarted")
    p.add_argument("--after", type=int, default=20, help="steps the restarted replica commits before the stop")
    p.add_argument("--tail", type=int, default=10, help="steps after the stop is decided")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (one bucket: see replica_main)")
    p.add_argument("--timeout", type=float, default=30.0, help="torchft Manager and process group timeout (s)")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=1000)
    p.add_argument("--join-timeout-ms", type=int, default=5000)
    p.add_argument("--quorum-tick-ms", type=int, default=10)
    p.add_argument("--limit", type=float, default=120.0, help="seconds any phase of a trial may take")
    p.add_argument("--as-is", action="store_true",
                   help="torchft's gloo groups without the bench's adapter for torchft 0.2.0's bugs (see _adapted)")
    p.add_argument("--json", help="write every trial's figures here")
    p.add_argument("--keep", help="keep the trials' logs in this folder")
    # a replica (started by the driver)
    p.add_argument("--replica", type=int, help=argparse.SUPPRESS)
    p.add_argument("--lighthouse", help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--stop-file", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.replica is not None:
        replica_main(a)
        return 0
    if a.short:
        a.rounds, a.warmup, a.kill_step, a.after, a.tail = 1, 5, 30, 5, 5
    pgs = [x.strip() for x in a.pg.split(",") if x.strip()]
    for pg in pgs:
        if pg not in PGS:
            p.error(f"--pg {pg!r}: use {', '.join(PGS)}")
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="torchft-bench-"))
    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"# load: {os.getloadavg()}, cores: {os.cpu_count()}, model: {_params(a.width, a.depth)} parameters "
          f"({a.depth + 1} linear layers, width {a.width}), batch {a.batch}")
    results = []
    failed = False
    for rnd in range(a.rounds):
        for pg in pgs:
            try:
                r = run_trial(pg, a, base / f"r{rnd}-{pg}")
            except Exception as exc:  # noqa: BLE001 - reported, and the run fails
                print(f"round {rnd} {pg}: FAILED: {exc} (logs: {base / f'r{rnd}-{pg}'})", flush=True)
                failed = True
                continue
            results.append(r)
            failed |= not r["equal"]
            print(f"round {rnd} {pg}: steady {r['steady_steps_per_s']:.1f} steps/s, survivor's first good step "
                  f"{r['survivor_recovery_s']:.2f} s after the {a.fault}, restarted replica's first step "
                  f"{r['rejoin_s']:.2f} s, configure {1000 * (r['configure_s'] or 0):.1f} ms (2 replicas), "
                  f"killed at step {r['kill_at_step']}, final step {r['final_step']}, "
                  f"parameters equal: {r['equal']}", flush=True)
    if results:
        print()
        print(report(results, a, [pg for pg in pgs if any(r["pg"] == pg for r in results)]))
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "results": results}, indent=1) + "\n")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
