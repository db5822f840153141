"""gocl status against live jobs: every rank's call and waits, the rank a
SIGSTOP froze named as the one the others wait on, the endpoint's
authentication (key file, another user, garbage, silence, TCP's token),
GOCL_STATUS=0. The multi-host case is in test_multihost.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gocl.tools import status

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
RANK = str(HERE / "status_rank.py")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(GOCL_STATUS_DIR=str(tmp_path / "st"), **extra)
    return env


class Job:
    """n ranks under gocl run, each all-reducing until stopped."""

    def __init__(self, tmp_path: Path, n: int, **extra: str):
        self.dir, self.n = tmp_path, n
        self.env = _env(tmp_path, **extra)
        self.proc = subprocess.Popen([str(BIN / "gocl"), "run", "-n", str(n), RANK, str(tmp_path)], env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.monotonic() + 90
        while not all((tmp_path / f"up-{r}").exists() for r in range(n)):
            if self.proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"the job did not start: {self.output()}")
            time.sleep(0.05)

    def pids(self) -> dict[int, int]:
        """rank -> pid, from the status endpoints themselves."""
        replies, _ = status.collect(self.dir / "st")
        return {c["rank"]: rep["process"]["pid"] for rep in replies for c in rep["process"]["comms"]}

    def status(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "gocl"), "status", *args], env=self.env, capture_output=True, text=True,
                              timeout=60)

    def output(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.communicate()[0]

    def finish(self) -> None:
        (self.dir / "stop").write_text("")
        try:
            assert self.proc.wait(timeout=90) == 0, self.output()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def test_status_shows_every_rank_in_its_call(tmp_path):
    job = Job(tmp_path, 4)
    try:
        r = job.status("--json")
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        (comm,) = doc["communicators"]
        assert comm["size"] == 4 and [v["rank"] for v in comm["ranks"]] == [0, 1, 2, 3], doc
        for v in comm["ranks"]:
            assert v["calls"] > 0 and "error" not in v, v
            assert (v.get("current") or v.get("last"))["op"] == "allreduce", v
            assert {link["peer"] for link in v["links"]} == set(range(4)) - {v["rank"]}, v
            assert all(link["transport"] == "shm" for link in v["links"]), v
            assert sum(link["sent"] for link in v["links"]) > 0, v  # published every 64 KiB and at waits
        text = job.status().stdout
        assert "communicator " + comm["id"] in text and text.count("allreduce") == 4, text
    finally:
        job.finish()


def test_a_stopped_rank_is_named_within_two_seconds(tmp_path):
    # Heartbeats off: the job is resumed and must finish (with them, the
    # stopped rank is declared gone after GOCL_HEARTBEAT_TIMEOUT: test_heartbeat.py).
    job = Job(tmp_path, 4, GOCL_HEARTBEAT_TIMEOUT="0")
    try:
        pid = job.pids()[2]
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            time.sleep(2.0)
            r = job.status("--json")
            took = time.monotonic() - stopped
            doc = json.loads(r.stdout)
            (comm,) = doc["communicators"]
            assert comm["straggler"] == 2, doc
            assert "rank 2 does not answer" in comm["why"], comm["why"]
            assert comm["ranks"][2]["reachable"] is False, comm["ranks"][2]
            waiting = [v for v in comm["ranks"] if v.get("waiting")]
            assert waiting and all(v["in_call"] for v in waiting), comm
            assert took < 2.0 + 3.0, f"gocl status took {took - 2.0:.1f} s with a rank stopped"
            text = job.status().stdout
            assert "straggler: rank 2 does not answer" in text and "NO ANSWER" in text, text
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        job.finish()


def test_a_rank_busy_outside_gocl_is_named_with_its_call_count(tmp_path):
    """Alive but stuck: rank 2 computes in Python (holding the GIL) while the
    others wait in their all_reduce. gocl status names it, one call behind
    them by the call counts; its heartbeats are still answered (gocl's own
    threads), so nothing fails although it stays busy past the heartbeat
    timeout, and the job finishes once it is back."""
    job = Job(tmp_path, 4, GOCL_HEARTBEAT_TIMEOUT="2")
    try:
        (tmp_path / "busy-2").write_text("")
        time.sleep(4.5)  # > 2 heartbeat timeouts
        doc = json.loads(job.status("--json").stdout)
        (comm,) = doc["communicators"]
        assert comm["straggler"] == 2, doc
        assert "rank 2 is not in a collective" in comm["why"] and "so it is 1 call behind" in comm["why"], comm["why"]
        assert all("error" not in v for v in comm["ranks"]), comm
        (tmp_path / "busy-2").unlink()
    finally:
        job.finish()


def _endpoint(job: Job) -> status.Endpoint:
    (ep, *_) = status.endpoints(job.dir / "st")
    return ep


def test_the_endpoint_refuses_strangers_and_survives_them(tmp_path):
    job = Job(tmp_path, 2)
    try:
        ep = _endpoint(job)
        key = bytes.fromhex(ep.key.read_text())
        assert (ep.sock.parent.stat().st_mode & 0o777) == 0o700 and (ep.key.stat().st_mode & 0o777) == 0o600
        with pytest.raises((PermissionError, ConnectionError, OSError)):
            status.ask(str(ep.sock), b"not the key" * 3)
        silent = socket.socket(socket.AF_UNIX)  # connects and says nothing: must hold nobody up
        silent.connect(str(ep.sock))
        for junk in (b"GET / HTTP/1.0\r\n\r\n", os.urandom(4096), b"GOCLAUTH" + b"\0" * 32 + os.urandom(100)):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(str(ep.sock))
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                try:
                    assert s.recv(4096) == b"" or junk.startswith(b"GOCLAUTH"), "a stranger got an answer"
                except OSError:
                    pass  # reset: refused as well
        t = time.monotonic()
        rep = status.ask(str(ep.sock), key)
        assert time.monotonic() - t < 2 and rep["process"]["pid"] == ep.pid, rep
        silent.close()
        if os.getuid() == 0 and shutil.which("setpriv"):  # another user: the directory and key are closed to it
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                "import sys; from gocl.tools import status; from pathlib import Path; "
                                f"print(status.collect(Path({str(ep.sock.parent)!r})))"],
                               capture_output=True, text=True, timeout=60, env=job.env)
            assert "'process'" not in r.stdout, r.stdout + r.stderr
    finally:
        job.finish()


def test_tcp_endpoint_needs_the_token(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_urlsafe(32)
    job = Job(tmp_path, 2, GOCL_STATUS=f"tcp:127.0.0.1:{port}", GOCL_STATUS_TOKEN=token)
    try:
        r = subprocess.run([str(BIN / "gocl"), "status", "--json", "--connect", f"127.0.0.1:{port}"],
                           env={**job.env, "GOCL_STATUS_TOKEN": token}, capture_output=True, text=True, timeout=60)
        doc = json.loads(r.stdout)
        assert len(doc["communicators"]) == 1 and doc["communicators"][0]["size"] == 2, doc
        wrong = subprocess.run([str(BIN / "gocl"), "status", "--connect", f"127.0.0.1:{port}"],
                               env={**job.env, "GOCL_STATUS_TOKEN": secrets.token_urlsafe(32)}, capture_output=True,
                               text=True, timeout=60)
        assert "authentication" in wrong.stdout or "closed" in wrong.stdout, wrong.stdout + wrong.stderr
    finally:
        job.finish()


def test_tcp_endpoint_refuses_a_weak_token(tmp_path):
    """A token an observer of one handshake could guess offline: the job
    opens no TCP endpoint and says why (the Unix socket is off too: nothing
    half-configured), and the client refuses it before connecting."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = Job(tmp_path, 2, GOCL_STATUS=f"tcp:127.0.0.1:{port}", GOCL_STATUS_TOKEN="s3cret", GOCL_DEBUG="WARN")
    try:
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))
    finally:
        job.finish()
    out = job.output()
    assert "GOCL_STATUS_TOKEN is too weak" in out and "secrets.token_urlsafe(32)" in out, out


def test_status_off(tmp_path):
    job = Job(tmp_path, 2, GOCL_STATUS="0")
    try:
        assert not list((tmp_path / "st").glob("*.sock")) if (tmp_path / "st").exists() else True
        r = job.status()
        assert "no gocl communicators found" in r.stdout, r.stdout
    finally:
        job.finish()
