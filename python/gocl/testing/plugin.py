"""pytest plugin (entry point ``pytest11: gocl``): tests across ranks.

``@pytest.mark.ranks(n, timeout=120)`` runs the test function's body on n
ranks, each a fresh Python process (never forked from one that loaded
libgocl.so, whose Go runtime does not survive fork: see Start-up below)
with torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT: a free port per test), so the body can call
``dist.init_process_group("gocl")`` or ``gocl.Communicator.from_env()``::

    @pytest.mark.ranks(4)
    def test_sum():
        with gocl.Communicator.from_env() as comm:
            x = np.full(3, comm.rank, np.float32)
            assert (comm.all_reduce(x) == 6).all()

The test passes only when every rank passes. When a rank fails, the others
get a few seconds to finish or fail on their own (a dead peer makes gocl fail
them quickly), then are killed; the report holds the traceback of every
failing rank and the output of the others. After ``timeout`` seconds the ranks'
Python stacks are dumped (faulthandler) and they are killed: a hang becomes a
failure that shows where each rank was. ``pytest.skip()`` on every rank skips.

Start-up: a rank is forked from a zygote (gocl.testing.zygote) that has
imported the test module's heavy dependencies once (``gocl_ranks_preload``:
numpy, torch, torch.distributed, pytest, those whose package the test module
uses), unless that is unsafe: the zygote checks that libgocl.so is not loaded
and that it has one thread, else it refuses and ranks are spawned. The rank
then runs as a spawned one would. One zygote serves every test with the same
preload and the same rank environment but for the per-rank variables.
``gocl_ranks_start = spawn`` (ini) or ``GOCL_PYTEST_START=spawn`` spawns
every rank.

Fixtures: the body runs in other processes, so fixture values are computed
once here and pickled to every rank: parametrize values and plain data
fixtures (``tmp_path`` included: every rank gets the same path) work;
fixtures that act on this process (monkeypatch, capsys, caplog, request, ...)
are refused. Module-level code of the test module runs on every rank (it is
imported there, with pytest's assertion rewriting when available). Test
functions may be module-level or methods of a test class that takes no
constructor arguments.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from .runner import SKIP_CODE
from ..tools._supervise import describe_exit, kill_running, stop, watch
from ..tools.launcher import free_port, new_secret, rank_env

DEFAULT_TIMEOUT = 120.0
# How long the other ranks may run on after one failed, to report their own failures.
FAIL_GRACE = 3.0
# How long killed ranks get to write their Python stacks (SIGUSR1, faulthandler).
STACK_DUMP_TIME = 0.5
# Fixtures that act on the pytest process itself: meaningless in a rank.
_REFUSED_FIXTURES = {
    "request", "monkeypatch", "capsys", "capsysbinary", "capfd", "capfdbinary", "caplog", "recwarn",
    "pytester", "testdir", "cache", "record_property", "record_xml_attribute", "record_testsuite_property",
    "doctest_namespace", "pytestconfig",
}
_TAIL_LINES = 60
# What a zygote imports before forking ranks (the expensive imports of the suites that use ranks).
DEFAULT_PRELOAD = "numpy torch torch.distributed pytest"
# The rank environment's variables that differ between ranks and tests: one zygote serves
# every environment that is equal but for these (the ranks' own values are set after the fork).
_PER_RANK_VARS = frozenset({
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "GOCL_RENDEZVOUS_SECRET", "GOCL_PYTEST_RANK",
    "PYTEST_CURRENT_TEST"})  # pytest sets it per test (the ranks get its value after the fork too)
# How long a zygote may take to import its modules.
ZYGOTE_START_TIMEOUT = 300.0
# Zygotes kept at once (one per distinct base environment; 1-rank tests keep numpy's threads).
_MAX_ZYGOTES = 2


def pytest_addoption(parser):
    parser.addini("gocl_ranks_timeout", f"default timeout (s) of @pytest.mark.ranks tests ({DEFAULT_TIMEOUT:g})",
                  default=None)
    parser.addini("gocl_ranks_start", "how ranks start: zygote (forked from a process that imported "
                  "gocl_ranks_preload, when safe; the default) or spawn (fresh interpreters)", default=None)
    parser.addini("gocl_ranks_preload", f"modules a rank zygote imports ({DEFAULT_PRELOAD!r})", default=None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "ranks(n, timeout=120): run the test body on n ranks, each a fresh process with RANK, "
        "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set; it passes only if every rank passes (gocl)")


class _ZygoteRank:
    """The part of subprocess.Popen that _supervise uses, for a rank a zygote forked."""

    def __init__(self, zygote: "_Zygote", pid: int):
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.pump(0)
            self.returncode = self.zygote.codes.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            self.zygote.pump(left)
        return self.returncode


class _Zygote:
    """A running gocl.testing.zygote: forks ranks on request and reports their ends."""

    def __init__(self, env: dict[str, str], preload: list[str], cwd: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "gocl.testing.zygote", *preload], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True, cwd=cwd)
        self.codes: dict[int, int] = {}
        self.replies: dict[int, dict] = {}
        self.ready: bool | None = None
        self.why = ""
        self._buf = b""
        self._next_id = 0

    def pump(self, timeout: float) -> bool:
        """Read what the zygote said within timeout; False once it has exited."""
        fd = self.proc.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], max(timeout, 0))
        if not readable:
            return True
        data = os.read(fd, 1 << 16)
        if not data:
            self._lost()
            return False
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            msg = json.loads(line)
            if "ready" in msg:
                self.ready, self.why = msg["ready"], msg.get("why") or ""
            elif "id" in msg:
                self.replies[msg["id"]] = msg
            else:
                self.codes[msg["pid"]] = msg["code"]
        return True

    def _lost(self) -> None:
        """The zygote exited: its ranks' ends can no longer be known; stop them."""
        if self.ready is None:
            self.why = "the zygote exited while importing"
        self.ready = False
        for pid in list(self._pending):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.codes.setdefault(pid, -signal.SIGKILL)

    @property
    def _pending(self) -> set[int]:
        return {m["pid"] for m in self.replies.values() if "pid" in m} - set(self.codes)

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + ZYGOTE_START_TIMEOUT
        while self.ready is None and time.monotonic() < deadline:
            if not self.pump(deadline - time.monotonic()):
                break
        if self.ready is None:
            self.ready, self.why = False, f"not ready after {ZYGOTE_START_TIMEOUT:g} s"
        return bool(self.ready)

    def start(self, spec: Path, env: dict[str, str], log: Path, cwd: str) -> _ZygoteRank | None:
        """Fork a rank, or None when the zygote refuses (then spawn it)."""
        if not self.wait_ready():
            return None
        rid, self._next_id = self._next_id, self._next_id + 1
        req = {"id": rid, "spec": str(spec), "env": env, "cwd": cwd, "log": str(log)}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            self.ready = False
            return None
        while rid not in self.replies:
            if not self.pump(1.0):
                return None
        reply = self.replies[rid]
        if "pid" not in reply:
            self.ready, self.why = False, reply.get("error", "refused")
            return None
        return _ZygoteRank(self, reply["pid"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygotes: dict[tuple, _Zygote] = {}
_refused: set[tuple] = set()


def _preload(item) -> list[str]:
    """What the zygote for item's ranks imports: the gocl_ranks_preload modules whose package
    the test module uses (a rank of a JAX test must not get torch, which a spawned one lacks),
    and the assertion rewriter the runner always uses."""
    used = {v.__name__.partition(".")[0] for v in vars(item.module).values() if isinstance(v, types.ModuleType)}
    wanted = (item.config.getini("gocl_ranks_preload") or DEFAULT_PRELOAD).split()
    return [m for m in wanted if m.partition(".")[0] in used] + ["_pytest.assertion.rewrite"]


def _zygote_for(config, env: dict[str, str], preload: list[str]) -> _Zygote | None:
    """The zygote for ranks with this environment and preload (started on first use), or None to spawn."""
    mode = os.environ.get("GOCL_PYTEST_START") or config.getini("gocl_ranks_start") or "zygote"
    if mode not in ("zygote", "spawn"):
        raise pytest.UsageError(f"gocl_ranks_start / GOCL_PYTEST_START must be zygote or spawn, got {mode!r}")
    if mode == "spawn":
        return None
    base = {k: v for k, v in env.items() if k not in _PER_RANK_VARS}
    key = (frozenset(base.items()), tuple(preload))
    if key in _refused:
        return None
    z = _zygotes.pop(key, None)
    if z is not None:
        _zygotes[key] = z  # the most recently used is evicted last
    if z is not None and z.ready is False:
        _refused.add(key)  # unsafe here for good (numpy's threads without OMP_NUM_THREADS=1, ...)
        _zygotes.pop(key).close()
        return None
    if z is None:
        while len(_zygotes) >= _MAX_ZYGOTES:
            _zygotes.pop(next(iter(_zygotes))).close()
        z = _zygotes[key] = _Zygote(base, preload, str(config.invocation_params.dir))
    return z if z.ready is not False else None


def pytest_unconfigure(config):
    while _zygotes:
        _zygotes.popitem()[1].close()


def _marker_args(item, marker) -> tuple[int, float]:
    n = marker.args[0] if marker.args else marker.kwargs.get("n", marker.kwargs.get("nranks"))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.ranks needs a number of ranks >= 1, got {n!r}")
    timeout = marker.kwargs.get("timeout")
    if timeout is None:
        timeout = os.environ.get("GOCL_PYTEST_TIMEOUT") or item.config.getini("gocl_ranks_timeout") or DEFAULT_TIMEOUT
    return n, float(timeout)


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    rows = text.splitlines()
    if len(rows) > lines:
        rows = [f"... ({len(rows) - lines} earlier lines)"] + rows[-lines:]
    return "\n".join(rows)


def run_ranks(item, n: int, timeout: float) -> None:
    """Run item's function on n ranks; return if all pass, else pytest.fail/skip."""
    argnames = item._fixtureinfo.argnames
    refused = sorted(set(argnames) & _REFUSED_FIXTURES)
    if refused:
        pytest.fail(f"@pytest.mark.ranks: fixture(s) {', '.join(refused)} act on the pytest process and cannot be "
                    "used inside a ranked test (its body runs in other processes)", pytrace=False)
    kwargs = {name: item.funcargs[name] for name in argnames}
    try:
        payload = pickle.dumps(kwargs)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"@pytest.mark.ranks: the test's arguments ({', '.join(argnames)}) must be picklable to reach "
                    f"the ranks: {e}", pytrace=False)

    attrs = ([*item.cls.__qualname__.split(".")] if item.cls is not None else []) + [item.originalname]
    work = Path(tempfile.mkdtemp(prefix="gocl-ranks-"))
    try:
        (work / "args.pickle").write_bytes(payload)
        spec = {
            "path": str(item.path),
            "module": item.module.__name__,
            "attrs": attrs,
            "is_class": item.cls is not None,
            "sys_path": [p for p in sys.path if isinstance(p, str)],
            "args": str(work / "args.pickle"),
            "results": str(work),
            "nodeid": item.nodeid,
        }
        (work / "spec.json").write_text(json.dumps(spec))
        port = free_port()
        secret = new_secret()
        procs: list[subprocess.Popen] = []
        logs = [work / f"rank{r}.log" for r in range(n)]
        try:
            cwd = str(item.config.invocation_params.dir)
            preload = _preload(item)
            for r in range(n):
                env = rank_env(r, n, "127.0.0.1", port, secret=secret)
                env["GOCL_PYTEST_RANK"] = str(r)
                zygote = _zygote_for(item.config, env, preload)
                forked = zygote and zygote.start(work / "spec.json", env, logs[r], cwd)
                if forked:
                    procs.append(forked)
                    continue
                with open(logs[r], "wb") as log:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "gocl.testing.runner", str(work / "spec.json")],
                        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True, cwd=cwd))
            outcome = _supervise(procs, timeout)
        finally:
            kill_running(procs)
        codes = [p.returncode for p in procs]
        # Every rank's output goes to this test's captured stdout (shown on failure, or with -s).
        for r in range(n):
            text = logs[r].read_text(errors="replace")
            if text:
                sys.stdout.write("".join(f"[rank {r}] {line}\n" for line in text.splitlines()))
        _report(work, n, codes, outcome, timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _supervise(procs: list[subprocess.Popen], timeout: float) -> dict:
    """Wait for the ranks; kill them after a failure's grace or at the timeout."""
    start = time.monotonic()
    w = watch(procs, ok=(0, SKIP_CODE), linger=FAIL_GRACE, deadline=start + timeout)
    stuck = _diagnose(procs, w.running) if w.timed_out and w.running else None
    if w.running:
        # SIGUSR1 dumps every thread's Python stack into the rank's output.
        stop([procs[r] for r in w.running], signal.SIGUSR1, STACK_DUMP_TIME)
    return {"timed_out": w.timed_out, "killed": w.running, "first_failed": w.first_failed,
            "elapsed": time.monotonic() - start, "stuck": stuck}


def _diagnose(procs: list, running: list[int]) -> dict | None:
    """At the timeout, before the kill: ask the running ranks' status
    endpoints (as `gocl status` does) which rank the others wait on. The
    ranks not in a gocl call, or the straggler their waits lead to, are the
    ones to blame; the others get one line each (their call and whom they
    wait on). None when no rank answers (GOCL_STATUS=0, no communicator)."""
    from ..tools import status as st

    rank_of = {procs[r].pid: r for r in running}
    try:
        eps = [ep for ep in st.endpoints() if ep.pid in rank_of]
        replies, _ = st.collect(eps=eps) if eps else ([], [])
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the timeout itself
        return None
    if not replies:
        return None
    waits, in_call = {}, set()
    blamed: dict[int, str] = {}
    for j in st.jobs(replies):
        for v in j.ranks.values():
            r = rank_of.get(v.get("pid"))
            if r is None or v.get("reachable") is False:
                continue
            if v.get("in_call"):
                in_call.add(r)
            if v.get("waiting"):
                waits[r] = (f"in {st.describe_call(v.get('current'))} on communicator {j.id[:8]} (rank {v['rank']} of "
                            f"{j.size}), waiting {v['waiting']['seconds']:.1f} s on its rank {v['waiting']['peer']}")
        if j.culprit is not None and (r := rank_of.get((j.row(j.culprit) or {}).get("pid"))) is not None:
            blamed.setdefault(r, j.why)
    for r in running:
        if r not in in_call:
            blamed[r] = "it is not in a gocl call (busy or hung outside gocl)"
    if not blamed:
        return None
    return {"blamed": blamed, "waits": {r: w for r, w in waits.items() if r not in blamed}}


def _report(work: Path, n: int, codes: list, outcome: dict, timeout: float) -> None:
    killed = set(outcome["killed"])
    failed = [r for r in range(n) if r not in killed and codes[r] not in (0, SKIP_CODE)]
    skipped = [r for r in range(n) if codes[r] == SKIP_CODE]
    if not failed and not killed:
        if skipped:
            reason = (work / f"rank{skipped[0]}.skip")
            text = reason.read_text(errors="replace").strip() if reason.exists() else "skipped"
            if len(skipped) == n:
                pytest.skip(f"{text} (on every rank)")
            pytest.fail(f"ranks {skipped} skipped ({text}) but ranks "
                        f"{[r for r in range(n) if r not in skipped]} ran: skip on every rank or none",
                        pytrace=False)
        return
    parts = []
    stuck = outcome.get("stuck")
    if outcome["timed_out"] and stuck:
        blamed = sorted(stuck["blamed"])
        parts.append(f"timed out after {timeout:g} s (@pytest.mark.ranks(..., timeout=...)): rank(s) "
                     f"{', '.join(map(str, blamed))} held the others up; the {len(killed)} of {n} still running were "
                     "killed")
        parts += [f"  rank {r}: {stuck['blamed'][r]}" for r in blamed]
        parts += [f"  rank {r}: {w}" for r, w in sorted(stuck["waits"].items())]
        parts.append(f"The Python stacks of rank(s) {', '.join(map(str, blamed))} are below; every rank's whole "
                     "output is in the captured stdout.")
    elif outcome["timed_out"]:
        parts.append(f"timed out after {timeout:g} s (@pytest.mark.ranks(..., timeout=...)): rank(s) "
                     f"{', '.join(map(str, sorted(killed)))} of {n} still running were killed; their Python "
                     "stacks and output are below")
    else:
        parts.append(f"{len(failed)} of {n} ranks failed (rank{'s' if len(failed) > 1 else ''} "
                     f"{', '.join(map(str, failed))})")

    def echo(r: int) -> bool:  # a rank that only reports a peer's failure
        tb = work / f"rank{r}.traceback"
        return tb.exists() and "gocl.errors.RemoteError:" in tb.read_text(errors="replace")

    # The cause first: ranks that failed on their own, then those that saw a peer fail.
    for r in sorted(failed, key=echo):
        tb_file = work / f"rank{r}.traceback"
        header = f"---------------- rank {r} failed ({describe_exit(codes[r])}) ----------------"
        if tb_file.exists():
            parts.append(f"{header}\n{tb_file.read_text(errors='replace').rstrip()}")
        else:
            parts.append(f"{header}\nno Python exception (the process exited or crashed); its last output:\n"
                         f"{_tail(work / f'rank{r}.log')}")
    for r in sorted(killed):
        if stuck and r not in stuck["blamed"]:
            continue  # a rank that only waited: its line above says on whom, its stack is in the captured stdout
        why = ("at the timeout" if outcome["timed_out"]
               else f"{FAIL_GRACE:g} s after rank {outcome['first_failed']} failed")
        parts.append(f"---------------- rank {r} killed {why}; its last output ----------------\n"
                     f"{_tail(work / f'rank{r}.log')}")
    pytest.fail("\n".join(parts), pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("ranks")
    if marker is None:
        return None
    n, timeout = _marker_args(pyfuncitem, marker)
    run_ranks(pyfuncitem, n, timeout)
    return True
