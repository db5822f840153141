"""The status client trusts only a status directory that is this user's
alone, and only a TCP token of 128 bits' spelling (issue 38): a symlink
planted at /tmp/gocl-UID, a directory of another owner or one others may
enter is refused with a sentence saying what is wrong and what to do, as
the runtime refuses it (runtime/telemetry/endpoint_test.go); so is a weak
GOCL_STATUS_TOKEN, on both sides."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gocl.tools import status

BIN = Path(sys.executable).parent
FIX = "remove it, or set GOCL_STATUS_DIR to a directory only you can read"


def _planted(tmp_path: Path) -> Path:
    """A directory that looks like a job's: a socket's name and a readable key."""
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    (d / f"{os.getpid()}.sock").write_text("")
    (d / f"{os.getpid()}.key").write_text("00" * 32)
    return d


def test_a_symlinked_status_dir_is_refused(tmp_path):
    link = tmp_path / "gocl-link"
    link.symlink_to(_planted(tmp_path))
    with pytest.raises(status.StatusDirError, match="symlink") as e:
        status.endpoints(link)
    assert str(link) in str(e.value) and FIX in str(e.value)
    replies, problems = status.collect(link)
    assert replies == [] and len(problems) == 1 and "symlink" in problems[0], problems
    r = subprocess.run([str(BIN / "gocl"), "status", "--dir", str(link)], capture_output=True, text=True, timeout=60)
    assert f"status directory {link} refused: it is a symlink" in r.stdout and r.returncode == 1, r.stdout + r.stderr


def test_a_status_dir_others_may_enter_is_refused(tmp_path):
    d = _planted(tmp_path)
    d.chmod(0o755)
    with pytest.raises(status.StatusDirError, match=f"mode 0755, so others may enter it: chmod 700 {d}"):
        status.endpoints(d)
    d.chmod(0o700)
    assert [ep.pid for ep in status.endpoints(d)] == [os.getpid()]  # this user's alone: read


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory of another owner needs root")
def test_a_status_dir_of_another_owner_is_refused(tmp_path):
    d = _planted(tmp_path)
    os.chown(d, 65534, 65534)
    with pytest.raises(status.StatusDirError, match="owned by uid 65534, not by you"):
        status.endpoints(d)


def test_a_missing_status_dir_is_no_problem(tmp_path):
    assert status.endpoints(tmp_path / "none") == []
    assert status.collect(tmp_path / "none") == ([], [])


def test_a_weak_token_is_refused_before_connecting(tmp_path):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        srv.settimeout(0.5)
        port = srv.getsockname()[1]
        for weak in ("s3cret", "0123456789abcdef0123456789abcde", "ab" * 20):
            replies, problems = status.collect(connect=("127.0.0.1", port), token=weak)
            assert replies == [] and len(problems) == 1, problems
            assert "GOCL_STATUS_TOKEN is too weak" in problems[0] and status.GOOD_TOKEN in problems[0], problems
        with pytest.raises(socket.timeout):
            srv.accept()  # nothing was sent with the weak tokens
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOCL_")}
        r = subprocess.run([str(BIN / "gocl"), "status", "--connect", f"127.0.0.1:{port}"],
                           env={**env, "GOCL_STATUS_TOKEN": "s3cret"}, capture_output=True, text=True, timeout=60)
        assert "GOCL_STATUS_TOKEN is too weak" in r.stdout and "secrets.token_urlsafe(32)" in r.stdout, r.stdout
        assert r.returncode == 1
    assert status.check_token("0123456789abcdef0123456789abcdef") is None  # 16 random bytes in hex
    assert status.check_token(__import__("secrets").token_urlsafe(32)) is None
