"""Asynchronous collectives run on the group's libgocl stream, with no
Python thread: in order, overlapping Python work, no growth over many
calls. (Errors at wait(): test_failures.test_mismatched_calls_fail_on_every_rank;
a dead peer during DDP's asynchronous buckets: test_failures.test_dead_peer_fails_the_survivor.)"""

from __future__ import annotations

import threading
import time

import pytest
from torchdist_util import dist, group, torch  # noqa: I001


def _threads() -> int:
    """OS threads of this process (Python's and libgocl's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line in /proc/self/status")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line in /proc/self/status")


@pytest.mark.ranks(2, timeout=120)
def test_async_in_order_overlapping_and_bounded():
    with group() as (rank, world):
        # in order: whenever a Work reports completion, every earlier one has too
        sizes = [1 << 20, 7, 1 << 16, 3, 1 << 18, 1] * 4
        xs = [torch.full((n,), float(rank + i), dtype=torch.float32) for i, n in enumerate(sizes)]
        works = [dist.all_reduce(x, async_op=True) for x in xs]
        assert threading.active_count() == 1, "an async collective started a Python thread"
        seen = [False] * len(works)
        while not all(seen):
            for i, w in enumerate(works):
                if not seen[i] and w.is_completed():
                    seen[i] = True
                    assert all(works[k].is_completed() for k in range(i)), f"Work {i} completed before an earlier one"
        for i, (w, x) in enumerate(zip(works, xs)):
            assert w.wait() and w.is_completed() and w.is_success()
            assert bool((x == float(sum(r + i for r in range(world)))).all()), f"all_reduce {i}"

        # overlap: Python keeps running while a 64 MiB all_reduce is in flight
        big = torch.ones(16 << 20, dtype=torch.float32)
        t0 = time.perf_counter()
        w = dist.all_reduce(big, async_op=True)
        returned = time.perf_counter() - t0
        spins = 0
        while not w.is_completed():
            spins += 1
        total = time.perf_counter() - t0
        w.wait()
        assert bool((big == world).all())
        assert spins > 10 and returned < total / 4, (
            f"the call returned after {returned * 1e3:.2f} ms of {total * 1e3:.2f} ms; Python looped {spins} times")

        # futures complete without anyone waiting (libgocl's host function)
        y = torch.ones(1 << 16)
        fut = dist.all_reduce(y, async_op=True).get_future()
        chained = fut.then(lambda f: f.value()[0].sum().item())
        assert chained.wait() == world * (1 << 16)

        # no thread or memory growth over 10,000 async calls (dropped Works too)
        small = torch.zeros(8)
        for _ in range(200):
            dist.all_reduce(small, async_op=True).wait()
        threads, rss = _threads(), _rss_mib()
        n = 10_000
        for i in range(n):
            w = dist.all_reduce(small, async_op=True)
            if i % 2:
                w.wait()
        w.wait()
        dist.barrier()
        grew = _threads() - threads
        assert grew <= 2, f"{grew} more OS threads after {n} async calls"
        assert _rss_mib() - rss < 32, f"RSS grew {_rss_mib() - rss:.1f} MiB over {n} async calls"
        assert threading.active_count() == 1
        assert bool((small == 0).all())
