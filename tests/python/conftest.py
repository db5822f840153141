"""Shared setup of the Python suite (numpy API, launcher, pytest plugin, packaging).

The gocl pytest plugin (``@pytest.mark.ranks``) comes from the installed
package's ``pytest11`` entry point: run the suite from the venv that
``make venv`` made (``.venv/bin/python -m pytest tests/python``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

# A hang becomes a gocl timeout error well before the plugin's or make's limits.
# Read at each communicator init (in this process and in every rank).
os.environ.setdefault("GOCL_TIMEOUT", "60")

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("gocl"):
        raise pytest.UsageError(
            "the gocl pytest plugin is not loaded: install the package (make venv, or "
            "uv pip install -e '.[test]') and run pytest from that environment")



@pytest.fixture(scope="session")
def fake_nvml_dir() -> Path:
    """The folder of the fake libnvidia-ml.so.1 (tests/c/fake_nvml.c), built
    when missing or stale: put it first on LD_LIBRARY_PATH of a child."""
    lib = REPO / "build" / "fake-nvml" / "libnvidia-ml.so.1"
    source = REPO / "tests" / "c" / "fake_nvml.c"
    if not lib.is_file() or lib.stat().st_mtime < source.stat().st_mtime:
        if shutil.which("make") is None:
            pytest.fail(f"{lib} is missing and make is not installed")
        r = subprocess.run(["make", str(lib.relative_to(REPO))], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    return lib.parent
