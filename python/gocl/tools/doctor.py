"""``gocl doctor``: explain CUDA / driver / torch / JAX / NCCL mismatches.

The work is done by the ``gocl-doctor`` executable (Go; it reads the GPUs
through NVML, which is deliberately kept out of ``libgocl.so``). This module
finds it and runs it on behalf of the current interpreter:

* :func:`main` runs it in the foreground (``gocl doctor`` on the command
  line), adding ``--python sys.executable`` so torch, JAX and the installed
  packages are those of *this* environment, and ``--pid os.getpid()`` so it
  can tell whether more than one Go runtime is loaded in this process.
* :func:`report` returns the JSON report as a dict (schema: doctor/SCHEMA.md
  in the source tree).

The executable is ``_native/gocl-doctor`` next to this file, or
``$GOCL_DOCTOR``. Nothing here loads ``libgocl.so``. Exit status of the
command: 0 no error-level finding, 1 at least one, 2 usage error or
unreadable facts file (and 2 when the executable is missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import _locate

__all__ = ["DoctorNotFound", "binary_path", "main", "report"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

# torch and JAX are probed in subprocesses with a 120 s limit each; the
# whole run gets a margin on top.
DEFAULT_TIMEOUT = 300.0


class DoctorNotFound(FileNotFoundError):
    """The gocl-doctor executable is not installed next to the package."""


def binary_path() -> Path:
    """Where the gocl-doctor executable is: $GOCL_DOCTOR, else _native/ here."""
    return _locate.path("gocl-doctor", "GOCL_DOCTOR")


def _binary() -> Path:
    return _locate.executable("gocl-doctor", "GOCL_DOCTOR",
                               "go build -o python/gocl/_native/gocl-doctor ./cmd/gocl-doctor", DoctorNotFound)


def _has_flag(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _command(args: Sequence[str]) -> list[str]:
    """The gocl-doctor command line for args, run on behalf of this process."""
    cmd = [str(_binary()), *args]
    if not _has_flag(args, "--facts"):
        if not _has_flag(args, "--python"):
            cmd += ["--python", sys.executable]
        if not _has_flag(args, "--pid"):
            cmd += ["--pid", str(os.getpid())]
    return cmd


def main(argv: Sequence[str] | None = None) -> int:
    """Run gocl-doctor with argv (default sys.argv[1:]); return its exit status.

    Output goes straight to this process's stdout and stderr, so colours
    follow the terminal as they would for the executable itself.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cmd = _command(args)
    except DoctorNotFound as e:
        print(f"gocl doctor: {e}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return subprocess.run(cmd, check=False).returncode
    except KeyboardInterrupt:
        return 130


def report(*, python: str | None = None, facts: str | os.PathLike | None = None,
           timeout: float | None = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The doctor's JSON report: ``{"schema", "facts", "findings", "checks", "recommended_env"}``.

    python: interpreter whose torch/JAX/packages to examine (default: this
    one). facts: judge a saved facts or report file instead of this machine.
    Raises DoctorNotFound without the executable, RuntimeError on a usage
    error, subprocess.TimeoutExpired past timeout.
    """
    args = ["--json"]
    if facts is not None:
        args += ["--facts", os.fspath(facts)]
    elif python is not None:
        args += ["--python", python]
    proc = subprocess.run(_command(args), capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode not in (EXIT_OK, EXIT_ERROR):
        raise RuntimeError(f"gocl-doctor failed (exit {proc.returncode}): {proc.stderr.strip()}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"gocl-doctor printed no JSON report: {e}: {proc.stderr.strip()}") from e


if __name__ == "__main__":
    sys.exit(main())
