"""A zygote for ``@pytest.mark.ranks`` ranks (see gocl.testing.plugin).

Every rank used to be a fresh interpreter that imported torch and numpy
again: seconds of CPU per rank, hundreds of ranks per suite. The zygote
imports them once (``python -m gocl.testing.zygote MODULE...``) and forks
one child per rank; the child becomes the rank exactly as
``python -m gocl.testing.runner SPEC`` would (own session, output to the
rank's log, the rank's environment and working folder).

The Go runtime does not survive fork, so the zygote checks before every
fork that libgocl.so is not loaded and that the process has one thread (a
thread pool, OpenBLAS's for one, would be half-copied); when either fails it
refuses and the plugin spawns instead. Protocol on stdin/stdout, one JSON
object a line: first ``{"ready": true}`` or ``{"ready": false, "why": ...}``;
then a request ``{"id", "spec", "env", "cwd", "log"}`` is answered with
``{"id", "pid"}`` (the child already leads its own session) or
``{"id", "error"}``, and each child's end with ``{"pid", "code"}``
(Popen.returncode's meaning). End of stdin ends the zygote.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import sys

# How often the zygote reaps its children while no request comes.
_REAP_EVERY = 0.02


def unsafe_to_fork() -> str | None:
    """Why this process must not fork a rank now, or None."""
    lib = sys.modules.get("gocl._lib")
    if lib is not None and lib.loaded():
        return "libgocl.so is loaded (the Go runtime does not survive fork)"
    try:
        with open("/proc/self/maps") as f:
            if "libgocl" in f.read():
                return "libgocl.so is mapped (the Go runtime does not survive fork)"
        threads = len(os.listdir("/proc/self/task"))
    except OSError as e:
        return f"cannot inspect /proc/self: {e}"
    if threads != 1:
        return f"{threads} threads (a fork copies only one; set OMP_NUM_THREADS=1 for numpy's pool)"
    return None


def _send(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _become_rank(req: dict, ready_w: int) -> None:
    """In the child: take the rank's session, output, environment and folder."""
    os.setsid()
    os.close(ready_w)  # the zygote reports the pid only once the session exists (killpg works)
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [sys.modules["gocl.testing.runner"].__file__, req["spec"]]


def serve(preload: list[str]) -> dict | None:
    """Answer requests until stdin ends (returns None); in a forked child,
    return the request the child is to run."""
    why = None
    for name in [*preload, "gocl.testing.runner"]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
        why = unsafe_to_fork()
        if why is not None:  # refuse before paying for the next import
            break
    _send({"ready": why is None, "why": why})
    if why is not None:
        return None
    buf = b""
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([0], [], [], _REAP_EVERY)
        if readable:
            data = os.read(0, 1 << 16)
            if not data:
                return None
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                why = unsafe_to_fork()
                if why is not None:
                    _send({"id": req["id"], "error": why})
                    continue
                ready_r, ready_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(ready_r)
                    _become_rank(req, ready_w)
                    return req
                os.close(ready_w)
                os.read(ready_r, 1)  # EOF once the child has its session (or died)
                os.close(ready_r)
                children.add(pid)
                _send({"id": req["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _send({"pid": pid, "code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    if serve(sys.argv[1:]) is None:
        sys.exit(0)
    from gocl.testing.runner import main

    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
