"""gocl top as a person uses it: in a tmux pane (160x40) beside a live
4-rank job, a rank stopped with SIGSTOP; the screen read with
capture-pane: every rank, the stopped one highlighted (reverse video,
the * and << STRAGGLER marks) with the reason under the block, the
GPUs of the fake NVML; p pauses, a pane too small says so, q quits.
Skipped without tmux (Debian: apt-get install tmux)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_status import BIN, Job

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")

GPUS = "NVIDIA H100 80GB HBM3|9.0|0|00000000:18:00.0;NVIDIA H100 80GB HBM3|9.0|0|00000000:2A:00.0"


class Tmux:
    """A tmux server of its own (-L), one detached session."""

    def __init__(self, tmp_path: Path, command: str, env: dict[str, str], width: int = 160, height: int = 40):
        self.sock = f"gocl-top-{os.getpid()}-{tmp_path.name}"[:100]
        self.env = env
        self("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height), command)

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], env=self.env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def screen(self, escapes: bool = False) -> str:
        return self("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "top")

    def wait_for(self, ok, what: str, timeout: float = 15.0) -> str:
        """Polls the pane until ok(text) holds (a loaded 2-core machine: up to timeout s)."""
        end = time.monotonic() + timeout
        while True:
            text = self.screen()
            if ok(text):
                return text
            if time.monotonic() > end:
                pytest.fail(f"the pane never showed {what}; it shows:\n{text}")
            time.sleep(0.25)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


def _rank_line(text: str, r: int) -> str:
    return next((line for line in text.splitlines() if re.match(rf"^\s*\*?{r}\s+\S+/\d+\s", line)), "")


def test_top_highlights_a_stopped_rank(tmp_path, fake_nvml_dir):
    job = Job(tmp_path, 4, GOCL_HEARTBEAT_TIMEOUT="0")  # the view of a stop held past the heartbeat timeout
    tmux = None
    try:
        pid = job.pids()[2]
        env = {**job.env, "LD_LIBRARY_PATH": f"{fake_nvml_dir}:{job.env.get('LD_LIBRARY_PATH', '')}",
               "FAKE_NVML_GPUS": GPUS, "FAKE_NVML_UTIL": "37,12;88,40", "FAKE_NVML_MEM": "12288,81559;40960,81559",
               "TERM": "xterm-256color"}
        top = shlex.join([str(BIN / "gocl"), "top", "--interval", "0.5"])
        # After q: the exit status on the pane, then the shell lingers so the pane can be read.
        tmux = Tmux(tmp_path, f"{top}; echo TOP-EXITED rc=$?; sleep 120", env)
        text = tmux.wait_for(lambda t: all(_rank_line(t, r) for r in range(4)), "4 ranks")
        assert "GPU 0  NVIDIA H100 80GB HBM3" in text and " 37%" in text and "12.0/79.6 GiB" in text, text
        assert "GPU 1" in text and " 88%" in text, text

        os.kill(pid, signal.SIGSTOP)
        try:
            text = tmux.wait_for(lambda t: "STRAGGLER" in _rank_line(t, 2) and "NO ANSWER" in _rank_line(t, 2)
                                 and "straggler: rank 2 does not answer" in t, "rank 2 as the straggler")
            line = _rank_line(text, 2)
            assert line.lstrip().startswith("*2") and "NO ANSWER" in line, text
            assert "straggler: rank 2 does not answer" in text, text
            for r in (0, 1, 3):
                assert "*" not in _rank_line(text, r) and "STRAGGLER" not in _rank_line(text, r), text
            assert f"! pid {pid}: no answer" in text, text  # its own endpoint does not answer: said at the bottom
            # The straggler's row in reverse video (SGR 7), the others not.
            sgr = re.compile(r"\x1b\[(?:\d+;)*7(?:;\d+)*m")
            colour = tmux.screen(escapes=True).splitlines()
            row2 = next(line for line in colour if "STRAGGLER" in line)
            assert sgr.search(row2), repr(row2)
            row0 = next(line for line in colour if re.sub(r"\x1b\[[0-9;]*m", "", line).lstrip().startswith("0 "))
            assert not sgr.search(row0), repr(row0)

            tmux("send-keys", "-t", "top", "p")
            tmux.wait_for(lambda t: "PAUSED" in t, "PAUSED")
            tmux("send-keys", "-t", "top", "p")
            tmux.wait_for(lambda t: "PAUSED" not in t and "q quits" in t, "the view resumed")

            tmux("resize-window", "-t", "top", "-x", "40", "-y", "6")
            tmux.wait_for(lambda t: "terminal too small" in t.replace("\n", ""), "terminal too small", 10)
            tmux("resize-window", "-t", "top", "-x", "160", "-y", "40")
            tmux.wait_for(lambda t: "STRAGGLER" in _rank_line(t, 2), "the view again after the resize", 10)

            tmux("send-keys", "-t", "top", "q")
            text = tmux.wait_for(lambda t: "TOP-EXITED" in t, "top exit", 10)
            assert "TOP-EXITED rc=0" in text and "Traceback" not in text, text
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        if tmux:
            tmux.kill()
        job.finish()


def test_top_once_prints_a_plain_frame(tmp_path, fake_nvml_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "FAKE_NVML_"))}
    env.update(GOCL_STATUS_DIR=str(tmp_path / "st"), LD_LIBRARY_PATH=str(fake_nvml_dir))
    r = subprocess.run([str(BIN / "gocl"), "top", "--once"], env={**env, "FAKE_NVML_GPUS": GPUS},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "no gocl communicators found" in r.stdout, r.stdout + r.stderr
    assert "GPU 0  NVIDIA H100 80GB HBM3" in r.stdout and "0.0/80.0 GiB" in r.stdout, r.stdout
    assert "\x1b" not in r.stdout, repr(r.stdout)
    # No NVML (init fails) and no GPUs: no GPU lines, no error.
    for extra in ({"FAKE_NVML_INIT_RC": "9"}, {}):
        r = subprocess.run([str(BIN / "gocl"), "top", "--once"], env={**env, **extra}, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "GPU" not in r.stdout and not r.stderr, r.stdout + r.stderr
    assert subprocess.run([sys.executable, "-m", "gocl", "top", "--interval", "0"], env=env, capture_output=True,
                          text=True, timeout=60).returncode == 2
