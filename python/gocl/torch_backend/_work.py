"""Works, tasks and the per-group executor.

Every c10d call becomes a :class:`Task`: ``issue`` makes the gocl calls
(staging tensors to host first), ``finish`` runs once they are done (copies
results back, finishes local reductions). Tasks of one group run one at a
time in the order they were submitted:

* a synchronous call (``async_op=False``, known from ``opts.asyncOp``) runs
  inline on the caller's thread when nothing is queued, so the latency path
  has no thread hand-off;
* an asynchronous call (or any call while earlier work is still queued) goes
  to the group's worker thread, and its Work completes later;
* between start_coalescing and end_coalescing, tasks are collected and run
  together inside one goclGroupStart/End (batch_isend_irecv);
* queued point-to-point tasks (isend/irecv) wait for company before they
  run: consecutive ones run together in one gocl group, so
  ``req = isend(next); recv(prev); req.wait()`` or ``irecv; isend; wait``
  rings progress at any size instead of each rank blocking in its first
  call. They are released by program events only, never by a clock: a
  wait() on one of their Works (or get_future(), is_completed()) releases
  every point-to-point task submitted so far; a collective or synchronous
  call queued behind them runs them first; destroying the group runs the
  rest. So a send nobody waits for goes out with the group's next call.

  (gocl runs one operation per communicator at a time, and a started gocl
  group takes no new members. A timer that released tasks, as
  GOCL_TORCH_P2P_WINDOW_MS did, made the batches depend on timing: a rank
  stalled for longer than the window between ``irecv`` and ``isend`` ran
  the irecv alone, blocked in it with its isend queued behind, and when
  every rank of a ring did so they waited for each other until
  GOCL_TIMEOUT.)

ctypes releases the GIL during each gocl call, so the worker's collectives
overlap with Python and autograd work on other threads.
"""

from __future__ import annotations

import collections
import datetime
import os
import threading
import time
import warnings

import torch.distributed as dist
from torch.futures import Future

from .. import _core
from ._staging import DeviceSync


_warned_window = False


def _warn_window() -> None:
    """GOCL_TORCH_P2P_WINDOW_MS is gone (see the module docstring): say so
    once instead of ignoring it silently."""
    global _warned_window
    if _warned_window or "GOCL_TORCH_P2P_WINDOW_MS" not in os.environ:
        return
    _warned_window = True
    warnings.warn("gocl: GOCL_TORCH_P2P_WINDOW_MS is ignored: queued isend/irecv now run when one of "
                  "their Works is waited on or the group's next call is made, never on a timer "
                  "(a timer made ring exchanges deadlock under load)", stacklevel=3)


class Task:
    __slots__ = ("name", "issue", "finish", "result", "sync", "p2p")

    def __init__(self, name, issue, finish=None, result=(), tensors=(), p2p=False):
        self.name = name
        self.issue = issue
        self.finish = finish
        self.result = list(result)
        self.sync = DeviceSync(tensors)
        self.p2p = p2p


def run_tasks(tasks: list[Task]) -> None:
    """Run tasks: one directly, several inside one gocl group."""
    if len(tasks) == 1:
        t = tasks[0]
        with t.sync.on_streams():
            t.issue()
            if t.finish is not None:
                t.finish()
        return
    syncs = [t.sync for t in tasks if t.sync.streams]
    merged = DeviceSync()
    for s in syncs:
        for dev, stream in s.streams.items():
            merged.streams.setdefault(dev, stream)
    with merged.on_streams():
        with _core.group():
            for t in tasks:
                t.issue()
        for t in tasks:
            if t.finish is not None:
                t.finish()


class GoclWork(dist.Work):
    """A Work backed by a torch Future.

    wait() re-raises the operation's error (Works made by
    ``_create_work_from_future`` swallow it), takes an optional timeout
    (a timedelta or seconds; zero means none, as in C++), and get_future()
    gives the future DDP comm hooks chain on; its value is the list of
    output tensors.
    """

    source = -1  # recv from any source: the sender, set when the receive has run

    def __init__(self, future: Future, result, executor: Executor | None = None):
        super().__init__()
        self._future = future
        self._result = result
        self._executor = executor

    def wait(self, timeout=None) -> bool:
        fut = self._future
        if not fut.done():
            if self._executor is not None:
                self._executor.flush()
            seconds = _seconds(timeout)
            if seconds:
                deadline = time.monotonic() + seconds
                while not fut.done():
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"gocl: operation did not complete within {seconds:g} s")
                    time.sleep(0.0005)
        fut.wait()  # raises the operation's error, if any
        return True

    def get_future(self) -> Future:
        if self._executor is not None and not self._future.done():
            self._executor.flush()
        return self._future

    def is_completed(self) -> bool:
        if self._executor is not None and not self._future.done():
            self._executor.flush()
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001
            return False
        return True

    def exception(self):
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as exc:  # noqa: BLE001
            return exc
        return None

    def result(self):
        self.wait()
        return self._result

    def source_rank(self) -> int:
        """The sender of a completed recv from any source (c10d's sourceRank)."""
        if self.source < 0:
            raise RuntimeError("gocl: source_rank() is only known for a completed recv from any source; "
                               "wait() on it first")
        return self.source

    _source_rank = source_rank

    def synchronize(self):
        self.wait()


def _seconds(timeout) -> float:
    if timeout is None:
        return 0.0
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


try:
    from torch._C import Future as _CFuture
    from torch._C._distributed_c10d import _create_work_from_future
except ImportError:  # pragma: no cover - every torch >= 2.5 has them
    _create_work_from_future = None


def completed_work(result):
    """The Work of an operation that already succeeded. torch's own
    future-backed Work fits here (its wait() would swallow an error, but
    there is none) and, unlike a Python Work behind torch's C++ holder,
    reports is_completed() correctly."""
    if _create_work_from_future is not None:
        f = _CFuture([])  # the C++ future itself: cheaper than torch.futures.Future's wrapper
        f.set_result(result)
        return _create_work_from_future(f)
    f = Future()
    f.set_result(result)
    return GoclWork(f, result)


class Executor:
    """Runs one group's tasks in submission order (see module docstring)."""

    def __init__(self, name: str):
        self._name = name
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._exec = threading.Lock()  # held while a task runs (inline or on the worker)
        self._queue: collections.deque = collections.deque()
        self._pending = 0  # submitted, not finished (inline ones included)
        self._worker: threading.Thread | None = None
        self._closed = False
        self._batch: list | None = None  # tasks collected while coalescing
        self._submitted = 0  # tasks queued so far; queue entries carry their number
        self._released = 0  # queued point-to-point tasks numbered up to this may run
        self._draining = 0  # threads waiting in drain()
        _warn_window()

    # coalescing -----------------------------------------------------------
    def start_coalescing(self) -> None:
        with self._mu:
            if self._batch is not None:
                raise RuntimeError(f"gocl {self._name}: start_coalescing called twice without end_coalescing")
            self._batch = []

    def end_coalescing(self, async_op: bool = True) -> GoclWork:
        with self._mu:
            batch, self._batch = self._batch, None
        if batch is None:
            raise RuntimeError(f"gocl {self._name}: end_coalescing without start_coalescing")
        tasks = [t for t, _ in batch]
        futures = [(f, t.result) for t, f in batch]
        result = [x for t in tasks for x in t.result]
        if not tasks:
            return completed_work([])

        # one task running the whole batch in one group; completes every
        # member's future too
        def issue():
            run_tasks(tasks)

        combined = Task("coalesced", issue, result=result)
        work = self._submit(combined, async_op, also=futures)
        return work

    # inline fast path --------------------------------------------------------
    def try_inline(self) -> bool:
        """Claim the executor for a call made right here, if nothing is queued
        or being collected; pair with end_inline()."""
        with self._mu:
            if self._pending or self._batch is not None or self._closed:
                return False
            self._pending = 1
            self._exec.acquire()  # free: nothing is pending
            return True

    def end_inline(self) -> None:
        self._exec.release()
        self._done_one()

    # submission -----------------------------------------------------------
    def submit(self, task: Task, async_op: bool) -> GoclWork:
        with self._mu:
            if self._batch is not None:
                f = Future()
                self._batch.append((task, f))
                return GoclWork(f, task.result)
        return self._submit(task, async_op)

    def _submit(self, task: Task, async_op: bool, also=()) -> GoclWork:
        with self._mu:
            if self._closed:
                raise RuntimeError(f"gocl {self._name}: the process group was shut down")
            inline = not async_op and self._pending == 0
            self._pending += 1
            if inline:
                self._exec.acquire()  # free: nothing is pending
            else:
                fut = Future()
                self._submitted += 1
                self._queue.append((task, fut, also, self._submitted))
                if not async_op:
                    self._released = self._submitted
                self._ensure_worker()
                self._cv.notify_all()  # the worker; drain() waits on the same condition
        if inline:
            try:
                run_tasks([task])
            except BaseException as exc:
                for f, _ in also:
                    f.set_exception(exc)
                raise
            finally:
                self._exec.release()
                self._done_one()
            for f, res in also:
                f.set_result(res)
            return completed_work(task.result)
        return GoclWork(fut, task.result, self)

    def flush(self) -> None:
        """Release every point-to-point task submitted so far (and only
        those: the batch a wait() starts is fixed by program order, not by
        when the worker gets to it)."""
        with self._mu:
            if self._released < self._submitted:
                self._released = self._submitted
                self._cv.notify_all()

    def _done_one(self, n: int = 1) -> None:
        with self._mu:
            self._pending -= n
            if self._draining:
                self._cv.notify_all()

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._loop, name=f"gocl-{self._name}", daemon=True)
            self._worker.start()

    def _next(self):
        """Under _mu: wait for the next batch to run (None: closed). A batch is
        one task, or point-to-point tasks at the head: all of them when
        something else is queued behind them (or the executor is closing),
        else those released by flush()."""
        queue = self._queue
        while True:
            if not queue:
                if self._closed:
                    return None
                self._cv.wait()
                continue
            if not queue[0][0].p2p:
                return [queue.popleft()]
            n = 1
            while n < len(queue) and queue[n][0].p2p:
                n += 1
            if n == len(queue) and not self._closed:
                n = 0
                while n < len(queue) and queue[n][3] <= self._released:
                    n += 1
                if n == 0:
                    self._cv.wait()
                    continue
            return [queue.popleft() for _ in range(n)]

    def _loop(self) -> None:
        while True:
            with self._mu:
                batch = self._next()
            if batch is None:
                return
            with self._exec:
                try:
                    run_tasks([entry[0] for entry in batch])
                    err = None
                except BaseException as exc:  # noqa: BLE001
                    err = exc
            self._done_one(len(batch))
            for task, fut, also, _ in batch:
                for f, res in ((fut, task.result), *also):
                    if err is None:
                        f.set_result(res)
                    else:
                        f.set_exception(err)

    def drain(self) -> None:
        """Wait until every submitted task has finished."""
        with self._mu:
            self._released = self._submitted
            self._cv.notify_all()
            self._draining += 1
            try:
                while self._pending:
                    self._cv.wait()
            finally:
                self._draining -= 1

    def close(self) -> None:
        self.drain()
        with self._mu:
            self._closed = True
            self._cv.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
