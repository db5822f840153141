"""The pytest plugin: @pytest.mark.ranks runs a body on N ranks and reports failing ranks.

Each case writes a tiny test file and runs pytest on it in a subprocess (the
plugin comes from the installed package's entry point there too).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest


def run_pytest(tmp_path, source: str, *args: str, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir",
                           str(tmp_path), str(tmp_path / "test_tiny.py"), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


@pytest.mark.ranks(2)
def test_marker_sets_the_environment():
    import os

    assert os.environ["WORLD_SIZE"] == "2" and os.environ["LOCAL_WORLD_SIZE"] == "2"
    assert os.environ["RANK"] == os.environ["LOCAL_RANK"] in ("0", "1")
    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and int(os.environ["MASTER_PORT"]) > 0


def test_passing_parametrized_class_and_skipped(tmp_path):
    r = run_pytest(tmp_path, """
        import os
        import numpy as np
        import pytest
        import gocl

        @pytest.mark.ranks(3)
        def test_sum():
            with gocl.Communicator.from_env() as comm:
                assert comm.all_reduce(np.ones(2))[0] == 3

        @pytest.mark.ranks(2)
        @pytest.mark.parametrize("value", [1, "two"])
        def test_param(value, tmp_path):
            assert value in (1, "two") and tmp_path.is_dir()

        class TestInClass:
            @pytest.mark.ranks(2)
            def test_method(self):
                assert int(os.environ["WORLD_SIZE"]) == 2

        @pytest.mark.ranks(2)
        def test_skips():
            pytest.skip("not here")
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed, 1 skipped" in r.stdout


def test_failing_rank_reports_every_failing_traceback(tmp_path):
    r = run_pytest(tmp_path, """
        import numpy as np
        import pytest
        import gocl

        @pytest.mark.ranks(3)
        def test_one_rank_fails():
            with gocl.Communicator.from_env() as comm:
                comm.barrier()
                if comm.rank == 2:
                    raise ValueError("boom from rank 2")
                comm.all_reduce(np.ones(4))  # the others see rank 2 go away
    """)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "3 of 3 ranks failed (ranks 0, 1, 2)" in out
    # The cause comes first, then the ranks that only saw a peer fail.
    first = out.index("---------------- rank 2 failed (exit code 1)")
    assert first < out.index("---------------- rank 0 failed") and first < out.index("---------------- rank 1 failed")
    assert 'raise ValueError("boom from rank 2")' in out and "ValueError: boom from rank 2" in out
    assert "gocl.errors.RemoteError" in out and "rank 2" in out
    assert "gocl/comm.py" not in out.split("Captured stdout")[0]  # library frames trimmed


def test_assertion_details_and_killing_the_others(tmp_path):
    start = time.monotonic()
    r = run_pytest(tmp_path, """
        import os, time
        import pytest

        @pytest.mark.ranks(2)
        def test_rank0_asserts():
            rank = int(os.environ["RANK"])
            if rank == 0:
                values = [1, 2]
                assert sum(values) == 4
            time.sleep(100)
    """)
    elapsed = time.monotonic() - start
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert elapsed < 60
    assert "1 of 2 ranks failed (rank 0)" in out
    assert "assert 3 == 4" in out  # pytest's assertion rewriting ran in the rank
    assert "rank 1 killed 3 s after rank 0 failed" in out
    assert "time.sleep(100)" in out or "test_rank0_asserts" in out  # its stack at the kill


def test_timeout_dumps_stacks(tmp_path):
    r = run_pytest(tmp_path, """
        import os, time
        import pytest

        def wait_forever():
            time.sleep(100)

        @pytest.mark.ranks(2, timeout=3)
        def test_hangs():
            if os.environ["RANK"] == "1":
                wait_forever()
    """)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "timed out after 3 s" in out and "rank(s) 1 of 2 still running were killed" in out
    assert "in wait_forever" in out  # faulthandler's dump of the hung rank


def test_timeout_blames_the_rank_the_others_wait_on(tmp_path):
    """One rank hangs outside gocl while the others wait on it in an
    all_reduce: the report names that rank alone, gives each waiting rank one
    line (its call, whom it waits on), and prints the hung rank's stack."""
    r = run_pytest(tmp_path, """
        import os, time
        import numpy as np
        import pytest
        import gocl

        def stuck_outside_gocl():
            time.sleep(100)

        @pytest.mark.ranks(4, timeout=8)
        def test_one_rank_hangs():
            with gocl.Communicator.from_env(timeout=600) as c:
                c.all_reduce(np.ones(4, np.float32))
                if c.rank == 2:
                    stuck_outside_gocl()
                c.all_reduce(np.ones(4, np.float32))
    """)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "rank(s) 2 held the others up; the 4 of 4 still running were killed" in out, out
    assert "rank 2: it is not in a gocl call" in out, out
    for waiter in (0, 1, 3):
        assert re.search(rf"  rank {waiter}: in allreduce #\d+ .* waiting [\d.]+ s on its rank 2", out), out
    assert "rank 0 killed" not in out and "---------------- rank 2 killed at the timeout" in out, out
    assert "in stuck_outside_gocl" in out


def test_crash_without_traceback_and_refused_fixture(tmp_path):
    r = run_pytest(tmp_path, """
        import os
        import pytest

        @pytest.mark.ranks(2)
        def test_dies():
            if os.environ["RANK"] == "1":
                print("about to die", flush=True)
                os._exit(7)

        @pytest.mark.ranks(2)
        def test_monkeypatch(monkeypatch):
            pass
    """)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "rank 1 failed (exit code 7)" in out and "about to die" in out
    assert "fixture(s) monkeypatch act on the pytest process" in out


ZYGOTE_CASES = """
    import os
    import sys
    import numpy as np
    import pytest
    import gocl
    import gocl._lib
    {extra_import}

    def started_by():
        return sys.modules["__main__"].__spec__.name

    @pytest.mark.ranks(2)
    @pytest.mark.parametrize("round", [1, 2])
    def test_rank(round):
        assert started_by() == os.environ["WANT_START"], started_by()
        assert os.getsid(0) == os.getpid()  # its own session, as a spawned rank
        assert os.environ["WORLD_SIZE"] == "2" and os.environ["GOCL_PYTEST_RANK"] == os.environ["RANK"]
        assert os.environ["PYTEST_CURRENT_TEST"].endswith(f"[{{round}}] (call)")
        with open(os.path.join(os.environ["PARENTS"], f"{{round}}-{{os.environ['RANK']}}"), "w") as f:
            f.write(str(os.getppid()))
        with gocl.Communicator.from_env() as comm:
            assert comm.all_reduce(np.full(3, comm.rank + round, np.float32))[0] == 1 + 2 * round
"""


@pytest.mark.parametrize("case", ["zygote", "libgocl-loaded", "spawn"])
def test_ranks_fork_from_a_zygote_only_when_safe(tmp_path, case):
    """Ranks fork from a zygote that imported numpy; when libgocl is loaded
    there (a preloaded module loads it) the zygote refuses and ranks spawn;
    GOCL_PYTEST_START=spawn spawns. Every rank passes either way."""
    (tmp_path / "loads_gocl.py").write_text("import gocl._lib\ngocl._lib.lib()\n")
    env = dict(os.environ, GOCL_PYTEST_START="spawn" if case == "spawn" else "zygote",
               WANT_START="gocl.testing.zygote" if case == "zygote" else "gocl.testing.runner")
    extra = ["-o", "gocl_ranks_preload=numpy loads_gocl"] if case == "libgocl-loaded" else []
    source = ZYGOTE_CASES.format(extra_import="import loads_gocl" if case == "libgocl-loaded" else "")
    parents = tmp_path / "parents"
    parents.mkdir()
    env["PARENTS"] = str(parents)
    r = run_pytest(tmp_path, source, *extra, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout, r.stdout
    # Both tests' ranks come from one parent: the one zygote, or the pytest process.
    assert len({p.read_text() for p in parents.iterdir()}) == 1, [p.read_text() for p in parents.iterdir()]


def test_zygote_refuses_with_libgocl_loaded_or_threads():
    code = textwrap.dedent("""
        import threading, time
        from gocl.testing.zygote import unsafe_to_fork
        print(unsafe_to_fork())
        t = threading.Thread(target=time.sleep, args=(1,)); t.start()
        print(unsafe_to_fork()); t.join()
        import gocl._lib
        gocl._lib.lib()
        print(unsafe_to_fork())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 3, r.stdout + r.stderr
    assert lines[0] == "None"
    assert lines[1].startswith("2 threads"), lines
    assert lines[2].startswith("libgocl.so is loaded"), lines
