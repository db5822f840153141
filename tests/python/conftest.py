"""Shared setup of the Python suite (numpy API, launcher, pytest plugin, packaging).

The gocl pytest plugin (``@pytest.mark.ranks``) comes from the installed
package's ``pytest11`` entry point: run the suite from the venv that
``make venv`` made (``.venv/bin/python -m pytest tests/python``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A hang becomes a gocl timeout error well before the plugin's or make's limits.
# Read once, when the library loads (in this process and in every rank).
os.environ.setdefault("GOCL_TIMEOUT", "60")

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("gocl"):
        raise pytest.UsageError(
            "the gocl pytest plugin is not loaded: install the package (make venv, or "
            "uv pip install -e '.[test]') and run pytest from that environment")

