"""gloo's monitored barrier for a gocl group, through the group's store.

Every rank checks in under the call's own keys; rank 0 waits up to the
timeout for each and names the ranks that did not arrive (all of them
with wait_all_ranks), and every rank gets that error. Errors use gloo's
wording, which callers match.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING

from .. import _rendezvous
from ._work import GoclWork, completed_work

if TYPE_CHECKING:
    from ._engine import Engine


def run(engine: Engine, n: int, opts=None, wait_all_ranks: bool = False) -> GoclWork:
    """The group's n-th monitored barrier (n numbers its store keys; every
    rank counts the same). opts: BarrierOptions (C++ callers) or a
    timedelta (torch's ProcessGroup route). The caller has drained the
    group's queued work."""
    timeout = getattr(opts, "timeout", opts)
    if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() < 0:  # unset (C++: -1 ms)
        timeout = datetime.timedelta(seconds=_rendezvous.default_timeout())
    store, rank = engine.store, engine.rank
    prefix = f"gocl/monitored_barrier/{n}"
    done = f"{prefix}/done"
    seconds = timeout.total_seconds()
    if rank != 0:
        store.set(f"{prefix}/arrived/{rank}", "1")
        try:
            store.wait([done], max(timeout, datetime.timedelta(milliseconds=1)))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"gocl monitored_barrier: {engine.where()} timed out after {seconds:g} s "
                               f"waiting for rank 0 to confirm the barrier: {exc}") from exc
        verdict = store.get(done).decode()
        if verdict != "ok":
            raise RuntimeError(f"Rank {rank} successfully reached monitoredBarrier, but received errors "
                               f"while waiting for send/recv from rank 0: {verdict}")
        engine.barrier().wait()  # rank 0 (maybe the store's server) stays until every rank has read
        return completed_work([])
    deadline = time.monotonic() + seconds
    missing, passed = [], []
    for r in range(1, engine.size):
        left = deadline - time.monotonic()
        if left < 0 and not wait_all_ranks:  # rank 0's own time is up
            msg = (f"Rank 0 timed out in monitoredBarrier after {seconds * 1000:.0f} ms.\n"
                   + (f"Successfully processed ranks: {', '.join(map(str, passed))}" if passed
                      else "No ranks successfully processed in monitoredBarrier."))
            store.set(done, msg)
            raise RuntimeError(msg)
        try:
            store.wait([f"{prefix}/arrived/{r}"], datetime.timedelta(seconds=max(left, 0.001)))
            passed.append(r)
        except Exception:  # noqa: BLE001
            missing.append(r)
            if not wait_all_ranks:
                break
    if missing:  # group ranks in gloo's wording, then the global ranks
        what = "Rank" if len(missing) == 1 else "Ranks"
        msg = (f"{what} {', '.join(map(str, missing))} failed to pass monitoredBarrier in "
               f"{seconds * 1000:.0f} ms (timed out; gocl group {engine.group_id!r}, global "
               f"rank{'s' if len(missing) > 1 else ''} {', '.join(str(engine.global_ranks[r]) for r in missing)})")
        store.set(done, msg)
        raise RuntimeError(msg)
    store.set(done, "ok")
    engine.barrier().wait()
    return completed_work([])
