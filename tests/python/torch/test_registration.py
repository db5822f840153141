"""How "gocl" becomes known to torch.distributed, and that registering never
loads libgocl.so (a process may still fork afterwards)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

PY = sys.executable


def run(code: str, **env) -> str:
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run([PY, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def entry_point_installed() -> bool:
    eps = importlib.metadata.entry_points()
    group = eps.select(group="torch.backends") if hasattr(eps, "select") else eps.get("torch.backends", [])
    return any(ep.name == "gocl" for ep in group)


@pytest.mark.skipif(not entry_point_installed(), reason="gocl is not installed (no torch.backends entry point)")
def test_import_torch_alone_registers_without_loading_the_library():
    out = run("""
        import sys, torch, torch.distributed as dist
        assert "gocl" in dist.Backend.backend_list, dist.Backend.backend_list
        assert dist.Backend.GOCL == "gocl"
        assert dist.Backend.backend_capability["gocl"] == ["cpu", "cuda"]
        from gocl.torch_backend import register
        assert register() is False  # already registered: no second registration, no error
        assert dist.Backend.backend_list.count("gocl") == 1
        lib = sys.modules.get("gocl._lib")
        assert lib is None or not lib.loaded(), "registering loaded libgocl.so"
        assert "gocl.torch_backend._engine" not in sys.modules
        print("ok")
    """)
    assert out.strip() == "ok"


def test_import_hook_registers_when_torch_comes_later_and_stays_fork_safe():
    # TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's entry-point autoload off,
    # so only gocl's import hook can register (as in a source checkout).
    out = run("""
        import os, sys
        import gocl, gocl.torch_backend as tb
        assert "torch" not in sys.modules, "gocl.torch_backend imported torch"
        assert not tb.is_registered()
        tb.register_when_torch_imported()
        tb.register_when_torch_imported()
        import torch.distributed as dist
        assert tb.is_registered(), dist.Backend.backend_list
        assert dist.Backend.backend_list.count("gocl") == 1
        lib = sys.modules.get("gocl._lib")
        assert lib is None or not lib.loaded()
        # registering left the process fork-safe: a forked child may load gocl
        pid = os.fork()
        if pid == 0:
            import gocl._core as core
            core.version()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print("ok")
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.strip() == "ok"


def test_implementation_choice(monkeypatch):
    import torch
    import torch.distributed as dist
    from gocl.torch_backend import _frontends

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    monkeypatch.delenv("GOCL_TORCH_IMPL", raising=False)  # the default choice (the suite may run with it set)
    impl = _frontends.implementation()
    if hasattr(dist, "BackendBase") or (major, minor) >= (2, 14):
        assert impl == "backend"
    if (major, minor) <= (2, 13):
        assert impl == "processgroup"
    monkeypatch.setenv("GOCL_TORCH_IMPL", "processgroup")
    assert _frontends.implementation() == "processgroup"
    monkeypatch.setenv("GOCL_TORCH_IMPL", "nonsense")
    with pytest.raises(ValueError, match="GOCL_TORCH_IMPL"):
        _frontends.implementation()
