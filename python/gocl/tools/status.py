"""Ask running gocl processes where they are: ``gocl status`` and ``gocl top``.

Every process with a communicator serves a status endpoint (GOCL_STATUS,
runtime/comm/statusd.go): a Unix socket ``DIR/PID.sock`` in this user's
status directory, guarded by the handshake gocl's communicators use,
keyed by ``DIR/PID.key``; a directory that is not this user's alone (a
symlink, another owner, open to others) is refused (:func:`check_dir`),
as is a TCP token weaker than 128 bits (:func:`check_token`). A process
that is rank 0 of a communicator asks its other ranks (on any host) for
their views, so asking the processes of one host reaches every rank of
the jobs rooted there.

:func:`collect` gathers the views; :func:`jobs` lines them up per
communicator and finds who everyone waits on; :func:`render` writes the
table ``gocl status`` prints.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ASK_WAIT = 1.8  # s per process: rank 0 itself waits up to 1 s on each of its ranks, all at once


def status_dir() -> Path:
    """Where this user's processes put their sockets (as the runtime decides)."""
    if os.environ.get("GOCL_STATUS_DIR", "").strip():
        return Path(os.environ["GOCL_STATUS_DIR"].strip())
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "gocl"
    return Path(os.environ.get("TMPDIR") or "/tmp") / f"gocl-{os.getuid()}"


class StatusDirError(PermissionError):
    """The status directory is not this user's alone: its keys are not to be trusted or read."""


def check_dir(d: Path) -> None:
    """Refuse a status directory another user could have planted or may
    enter, as the runtime does (statusd.go's openStatusDir): it must be a
    real directory (not a symlink), owned by this user, mode 0700."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return  # no process made it yet: nothing to read
    fix = "remove it, or set GOCL_STATUS_DIR to a directory only you can read"
    if stat.S_ISLNK(st.st_mode):
        raise StatusDirError(f"status directory {d} refused: it is a symlink (another user may have "
                             f"planted it to answer for your jobs): {fix}")
    if not stat.S_ISDIR(st.st_mode):
        raise StatusDirError(f"status directory {d} refused: it is not a directory: {fix}")
    if st.st_uid != os.getuid():
        raise StatusDirError(f"status directory {d} refused: it is owned by uid {st.st_uid}, not by you "
                             f"(uid {os.getuid()}): {fix}")
    if st.st_mode & 0o077:
        raise StatusDirError(f"status directory {d} refused: it has mode {stat.S_IMODE(st.st_mode):04o}, so others "
                             f"may enter it: chmod 700 {d}, {fix}")


# A TCP status token must carry 128 bits (one seen handshake lets a weak one
# be guessed offline); the rule, as the runtime's checkStatusToken: 32
# characters, 10 of them different.
MIN_TOKEN_LEN, MIN_TOKEN_DISTINCT = 32, 10
GOOD_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def check_token(token: str) -> str | None:
    """Why token is too weak for a TCP status endpoint, or None."""
    if len(token) < MIN_TOKEN_LEN or len(set(token)) < MIN_TOKEN_DISTINCT:
        return (f"GOCL_STATUS_TOKEN is too weak ({len(token)} characters, {len(set(token))} different; it needs at "
                f"least {MIN_TOKEN_LEN}, {MIN_TOKEN_DISTINCT} different, as 128 random bits give): one seen handshake "
                f"lets it be guessed offline; {GOOD_TOKEN} makes a good one (give the job the same)")
    return None


def _mac(key: bytes, role: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(key, role + a + b, hashlib.sha256).digest()


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the endpoint closed the connection")
        buf += chunk
    return buf


def ask(address: str | tuple[str, int], key: bytes, peers: bool = True, comm_id: str = "",
        timeout: float = ASK_WAIT) -> dict:
    """One status question to an endpoint: a Unix socket path, or (host,
    port) for GOCL_STATUS=tcp:...; key is its secret."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(address)
        nd = secrets.token_bytes(32)
        s.sendall(b"GOCLAUTH" + nd)
        reply = _recv_exact(s, 64)
        nl, proof = reply[:32], reply[32:]
        if not hmac.compare_digest(proof, _mac(key, b"L", nd, nl)):
            raise PermissionError("the endpoint failed authentication (not gocl, or another key)")
        s.sendall(_mac(key, b"D", nd, nl))
        body = {"peers": peers}
        if comm_id:
            body["id"] = comm_id
        msg = json.dumps({"kind": "status", "body": body}).encode()
        s.sendall(struct.pack("<I", len(msg)) + msg)
        (n,) = struct.unpack("<I", _recv_exact(s, 4))
        out = json.loads(_recv_exact(s, n))
    if "error" in out:
        raise RuntimeError(out["error"])
    return out


@dataclass
class Endpoint:
    pid: int
    sock: Path
    key: Path


def endpoints(directory: Path | None = None) -> list[Endpoint]:
    """The live processes' endpoints in the status directory;
    StatusDirError where the directory is not this user's alone."""
    d = directory or status_dir()
    check_dir(d)
    out = []
    for sock in sorted(d.glob("*.sock")) if d.is_dir() else []:
        try:
            pid = int(sock.stem)
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            continue
        except PermissionError:
            pass  # another user's process: its key will not be readable either
        out.append(Endpoint(pid, sock, sock.with_suffix(".key")))
    return out


@dataclass
class Job:
    """One communicator as its ranks see it."""

    id: str
    size: int
    ranks: dict[int, dict] = field(default_factory=dict)  # rank -> view (reachable False: no answer)
    culprit: int | None = None  # the rank the others wait on
    why: str = ""

    def row(self, r: int) -> dict | None:
        return self.ranks.get(r)


def collect(directory: Path | None = None, connect: tuple[str, int] | None = None,
            token: str | None = None, eps: list[Endpoint] | None = None) -> tuple[list[dict], list[str]]:
    """Every reachable process's reply, and the problems met on the way;
    eps: the endpoints to ask, when the caller listed them already."""
    replies, problems = [], []
    if connect is not None:
        tok = token if token is not None else os.environ.get("GOCL_STATUS_TOKEN", "")
        if not tok:
            return [], ["--connect needs the endpoint's secret: set GOCL_STATUS_TOKEN as the job did"]
        if (weak := check_token(tok.strip())) is not None:
            return [], [weak]
        tok = tok.strip()  # as the runtime reads it
        try:
            replies.append(ask(connect, tok.encode()))
        except (OSError, RuntimeError, PermissionError, ValueError) as e:
            problems.append(f"{connect[0]}:{connect[1]}: {e}")
        return replies, problems
    def one(ep: Endpoint) -> tuple[dict | None, str | None]:
        try:
            key = bytes.fromhex(ep.key.read_text().strip())
        except (OSError, ValueError) as e:
            return None, f"pid {ep.pid}: cannot read its key {ep.key}: {e}"
        try:
            return ask(str(ep.sock), key), None
        except socket.timeout:
            return None, f"pid {ep.pid}: no answer within {ASK_WAIT:g} s (stopped or hung)"
        except (OSError, RuntimeError, PermissionError, ValueError) as e:
            return None, f"pid {ep.pid}: {e}"

    if eps is None:
        try:
            eps = endpoints(directory)
        except StatusDirError as e:
            return [], [str(e)]
    if eps:  # all at once: a stopped process costs ASK_WAIT once, not per process
        with ThreadPoolExecutor(max_workers=min(32, len(eps))) as pool:
            for rep, problem in pool.map(one, eps):
                if rep is not None:
                    replies.append(rep)
                if problem:
                    problems.append(problem)
    return replies, problems


def jobs(replies: list[dict]) -> list[Job]:
    """The communicators in replies, each with every rank's view that any
    reply holds (rank 0's gathered views first, then the processes' own)."""
    by_id: dict[str, Job] = {}

    def take(v: dict) -> None:
        j = by_id.setdefault(v["id"], Job(v["id"], v["size"]))
        old = j.ranks.get(v["rank"])
        if old is None or (old.get("reachable") is False and v.get("reachable") is not False):
            j.ranks[v["rank"]] = v

    for rep in replies:
        for views in (rep.get("ranks") or {}).values():
            for v in views:
                take(v)
    for rep in replies:
        for v in rep["process"].get("comms") or []:
            take(v)
    out = sorted(by_id.values(), key=lambda j: (-j.size, j.id))
    for j in out:
        j.culprit, j.why = straggler(j)
    return out


def straggler(j: Job) -> tuple[int | None, str]:
    """The rank the others wait on: follow each waiting rank's wait to a
    rank that waits on nobody (it does not answer, is in no call, or
    computes), when at least one rank waits."""
    waits = {r: v["waiting"]["peer"] for r, v in j.ranks.items()
             if v.get("waiting") and v.get("reachable") is not False}
    if not waits:
        return None, ""
    ends: dict[int, list[int]] = {}
    for r in waits:
        seen, p = {r}, waits[r]
        while p in waits and p not in seen:
            seen.add(p)
            p = waits[p]
        if p in waits:  # a cycle: everyone waits, nobody ends it; name the longest waiter's peer
            continue
        ends.setdefault(p, []).append(r)
    if not ends:
        longest = max(waits, key=lambda r: j.ranks[r]["waiting"]["seconds"])
        return waits[longest], "every rank waits on another (a cycle of waits)"
    culprit = max(ends, key=lambda p: len(ends[p]))
    v = j.ranks.get(culprit)
    waiting = sorted(ends[culprit])
    # Call counts, compared as NCCL's RAS does: a rank that answers but has
    # made fewer calls than the ranks waiting on it is behind them.
    theirs = [j.ranks[r].get("calls") for r in waiting]
    behind = ""
    if v is not None and isinstance(v.get("calls"), int) and theirs and all(isinstance(c, int) for c in theirs):
        d = min(theirs) - v["calls"]
        if d > 0:
            behind = f": it has made {v['calls']} calls, the ranks waiting on it {min(theirs)}, so it is {d} call{'s' if d > 1 else ''} behind"
    if v is None:
        state = "not reported by any process asked"
    elif v.get("reachable") is False:
        state = "does not answer (stopped, hung or gone)"
    elif v.get("in_call"):
        state = "is in a call but waits on nobody (computing or copying)" + behind
    else:
        state = "is not in a collective (busy outside gocl, or calling something else)" + behind
    longest = max(j.ranks[r]["waiting"]["seconds"] for r in waiting)
    return culprit, f"rank {culprit} {state}; ranks {', '.join(map(str, waiting))} wait on it (longest {longest:.1f} s)"


def rate(x: float) -> str:
    """Bytes per second in words: "12.3 MB/s"."""
    for unit, f in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if x >= f:
            return f"{x / f:.1f} {unit}"
    return f"{x:.0f} B/s"


def describe_call(c: dict | None, size=lambda b: f"{b} B") -> str:
    """A call of a view in words (op, sequence number, bytes as size()
    writes them, algorithm, peer); "-" for none."""
    if not c:
        return "-"
    s = f"{c['op']} #{c['seq']} {size(c.get('bytes', 0))}"
    if c.get("algorithm"):
        s += f" {c['algorithm']}"
    if c.get("peer") is not None:
        s += f" rank {c['peer']}"
    return s


def row(r: int, v: dict | None, culprit: int | None) -> list[str]:
    """The columns of one rank: rank, host/pid, state, op, waits on, busbw."""
    mark = "*" if r == culprit else " "
    if v is None:
        return [f"{mark}{r}", "?", "not found", "-", "-", "-"]
    host = v.get("addr") if v.get("nodes", 1) > 1 and v.get("addr") else v.get("host", "?")
    where = f"{host}/{v.get('pid', '?')}"
    if v.get("reachable") is False:
        return [f"{mark}{r}", where, "NO ANSWER", "-", "-", "-"]
    if v.get("error"):
        state = "failed"
    elif v.get("in_call"):
        state = f"in call {v['current']['seconds']:.1f}s" if v.get("current") else "in call"
    else:
        state = "idle"
    op = describe_call(v.get("current") or v.get("last"))
    w = v.get("waiting")
    waits = f"rank {w['peer']} ({w['for']}) {w['seconds']:.1f}s" if w else "-"
    bw = rate(max(v.get("send_Bps", 0.0), v.get("recv_Bps", 0.0)))
    return [f"{mark}{r}", where, state, op, waits, bw]


HEADER = ["rank", "host/pid", "state", "op (current, else last)", "waits on", "link B/s"]


def table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(x[i]) for x in [HEADER] + rows) for i in range(len(HEADER))]
    return ["  ".join(x[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for x in [HEADER] + rows]


def render(js: list[Job], problems: list[str]) -> str:
    out = []
    if not js:
        out.append(f"no gocl communicators found (status directory {status_dir()})")
    for j in js:
        out.append(f"communicator {j.id}: {j.size} ranks, {len(j.ranks)} seen")
        out += ["  " + line for line in table([row(r, j.row(r), j.culprit) for r in range(j.size)])]
        for r in range(j.size):
            v = j.row(r)
            if v and v.get("error") and v.get("reachable") is not False:
                out.append(f"  rank {r}: {v['error']}")
        if j.culprit is not None:
            out.append(f"  straggler: {j.why}")
        out.append("")
    out += [f"note: {p}" for p in problems]
    return "\n".join(out).rstrip() + "\n"


def as_json(js: list[Job], problems: list[str]) -> dict:
    return {"time": time.time(), "problems": problems,
            "communicators": [{"id": j.id, "size": j.size, "straggler": j.culprit, "why": j.why,
                               "ranks": [j.row(r) for r in range(j.size)]} for j in js]}


def address(connect: str | None) -> tuple[str, int] | None:
    """--connect HOST:PORT as (host, port); ValueError saying what to give."""
    if not connect:
        return None
    host, _, port = connect.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--connect {connect!r}: give HOST:PORT, the job's GOCL_STATUS=tcp:HOST:PORT")
    return host, int(port)


def main(json_out: bool = False, directory: str | None = None, connect: str | None = None) -> int:
    try:
        target = address(connect)
    except ValueError as e:
        print(f"gocl status: {e}")
        return 2
    replies, problems = collect(Path(directory) if directory else None, target)
    js = jobs(replies)
    if json_out:
        print(json.dumps(as_json(js, problems), indent=1))
    else:
        print(render(js, problems), end="")
    return 0 if replies or not problems else 1
