"""Works, tasks and the per-group executor: no Python thread in the data path.

Every c10d call becomes a :class:`Task`: ``issue(stream)`` makes the gocl
calls on the stream the executor gives it (staging tensors to host first),
``finish`` runs once they are done (copies staged results back, finishes
local reductions). Tasks run on the caller's thread, in the order they were
submitted:

* a synchronous call (``async_op=False``, known from ``opts.asyncOp``)
  issues its gocl calls on the NULL stream, which gocl orders after the
  communicator's queued work, and returns when they are done;
* an asynchronous call issues its gocl calls on the group's libgocl stream
  (``goclStreamCreate``): they are queued there and run inside libgocl,
  outside the GIL, while Python goes on. An event recorded behind them
  tells their :class:`StreamWork` when they are done and what failed;
  ``wait()`` blocks in ``goclEventSynchronize`` (ctypes drops the GIL) and
  ``get_future()``'s Future is completed by a host function
  (``goclLaunchHostFunc``) that libgocl calls once the work is done;
* a task whose tensors are staged (CUDA, non-contiguous) first waits for
  the group's queued work, so its host copies see every earlier call's
  results, as when the calls ran one after the other;
* between start_coalescing and end_coalescing, tasks are collected and
  issued together inside one goclGroupStart/End (batch_isend_irecv);
* queued point-to-point tasks (isend/irecv) wait for company before they
  are issued: consecutive ones go out together in one gocl group, so
  ``req = isend(next); recv(prev); req.wait()`` or ``irecv; isend; wait``
  rings progress at any size instead of each rank blocking in its first
  call. They are released by program events only, never by a clock: a
  wait() on one of their Works (or get_future(), is_completed()) releases
  every point-to-point task submitted so far; any other call on the group
  issues them first; destroying the group issues the rest. So a send
  nobody waits for goes out with the group's next call, or with the next
  call on any other group of the process (which issues every group's
  held-back tasks first): ``isend`` to the next pipeline stage, then a
  collective on a data-parallel group that the receiver joins only after
  its ``recv``, completes as on gloo. (A ring split by such a call,
  ``isend(next)``, another group's call, then ``irecv(prev)``, sends
  before it receives: fine where the transport buffers the message, a
  deadlock until the timeout for a message too large for it; keep a
  ring's send and receive together, or in batch_isend_irecv.)

  (gocl runs one operation per communicator at a time, and a started gocl
  group takes no new members. A timer that released tasks, as
  GOCL_TORCH_P2P_WINDOW_MS did, made the batches depend on timing.)

The executor keeps every queued task (and so its tensors) referenced until
its event says it is done, whether or not the caller keeps the Work.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import datetime
import itertools
import os
import threading
import time
import warnings
import weakref

import torch.distributed as dist
from torch._C import Future as _CFuture
from torch.futures import Future

from .. import _core, _lib
from ..errors import GoclTimeoutError
from ._staging import DeviceSync, direct


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
    __slots__ = ("name", "issue", "finish", "result", "sync", "p2p", "blocking", "staged", "finished")

    def __init__(self, name, issue, finish=None, result=(), tensors=(), p2p=False, blocking=False):
        self.name = name
        self.issue = issue  # issue(stream): the gocl calls, on stream (None: the NULL stream)
        self.finish = finish
        self.result = list(result)
        self.sync = DeviceSync(tensors)
        self.p2p = p2p
        self.blocking = blocking  # runs on the NULL stream only (recv from any source)
        self.staged = not all(direct(t) for t in _flat(tensors))
        self.finished = False


def _flat(tensors):
    for t in tensors:
        if isinstance(t, (list, tuple)):
            yield from _flat(t)
        else:
            yield t


def run_tasks(tasks: list[Task], stream: int | None) -> None:
    """Issue tasks on stream (None: gocl's NULL stream, which runs the calls
    before returning): one directly, several inside one gocl group. (Their
    finish runs once their work is done: see StreamWork.)"""
    if len(tasks) == 1:
        t = tasks[0]
        with t.sync.on_streams():
            t.issue(stream)
        return
    merged = DeviceSync()
    for t in tasks:
        for dev, stream in t.sync.streams.items():
            merged.streams.setdefault(dev, stream)
    with merged.on_streams():
        with _core.group():
            for t in tasks:
                t.issue(stream)


def _finish(task: Task) -> None:
    if task.finished:
        return
    task.finished = True
    if task.finish is not None:
        with task.sync.on_streams():
            task.finish()


# ------------------------------------------------------------------ marks
_lib_handle = None
_event_query = _event_sync = _event_record = _event_create = _event_destroy = None


def _bind() -> None:
    global _lib_handle, _event_query, _event_sync, _event_record, _event_create, _event_destroy
    if _lib_handle is None:
        lib = _lib.lib()
        _event_query, _event_sync = lib.goclEventQuery, lib.goclEventSynchronize
        _event_record, _event_create, _event_destroy = lib.goclEventRecord, lib.goclEventCreate, lib.goclEventDestroy
        _lib_handle = lib


class _Mark:
    """The end of one launch on a group's stream: its event (from the
    executor's pool, returned when the last Work using it goes), and, once
    seen, whether the work before it succeeded."""

    __slots__ = ("ex", "ev", "done", "err", "__weakref__")

    def __init__(self, ex: Executor, ev: int | None):
        self.ex = ex
        self.ev = ev  # None: nothing was queued (done at once)
        self.done = ev is None
        self.err = None

    def _seen(self, rc: int) -> bool:
        if rc == _core.IN_PROGRESS:
            return False
        if rc:
            try:
                _core.check(rc)  # the event's error text is this thread's last error
            except Exception as exc:  # noqa: BLE001
                self.err = exc
        self.done = True
        return True

    def query(self) -> bool:
        return self.done or self._seen(_event_query(self.ev))

    def wait(self, seconds: float = 0.0, what: str = "the operation") -> None:
        if self.done:
            return
        me = threading.get_ident()
        self.ex.waiters.add(me)  # Engine.shutdown() aborts rather than outwaits a stuck wait
        try:
            if not seconds:
                self._seen(_event_sync(self.ev))  # ctypes releases the GIL while libgocl waits
                return
            deadline = time.monotonic() + seconds
            while not self.query():
                if time.monotonic() >= deadline:
                    # a RuntimeError, as gloo's (code written `except RuntimeError` sees it)
                    raise GoclTimeoutError(
                        f"gocl: {what} on {self.ex.where} did not complete within Work.wait's timeout of "
                        f"{seconds:g} s; it is still queued or running: wait() again to go on waiting, or "
                        f"abort the group to give it up")
                time.sleep(0.0002)
        finally:
            self.ex.waiters.discard(me)

    def __del__(self):
        if self.ev is not None:
            self.ex.release_event(self.ev)


# Executors holding point-to-point tasks back (see the module docstring).
# Any other group's call releases them first: a send nobody waited on must
# not wait for this group's next call while the program blocks in another
# group's collective that the receiver reaches only after the receive (the
# pipeline-parallel pattern; gloo starts an isend at once).
_holding: set = set()


def _release_others(me) -> None:
    """Issue the point-to-point tasks every executor but me holds back
    (called without me's lock held: each takes its own)."""
    for ex in list(_holding):
        if ex is not me:
            ex.flush(others=False)


_FAILED = object()
POLL = 16  # launches between polls of a group's in-flight work (Executor.track)


class StreamWork(dist.Work):
    """A Work of tasks queued on a group's stream (or collected for a
    gocl group that has not been issued yet).

    wait() re-raises the operation's error (naming the rank where it
    failed), takes an optional timeout (a timedelta or seconds; zero means
    none, as in C++), and get_future() gives the future DDP comm hooks
    chain on; its value is the list of output tensors.
    """

    source = -1  # recv from any source: the sender, set when the receive has run
    # Until set on the instance (class defaults: one Work per asynchronous
    # call, so each attribute set counts):
    _mark: _Mark | None = None  # None: not issued yet
    _err = None  # an error raised while issuing or finishing
    _state = None  # None, True (done) or _FAILED
    _future: Future | None = None  # get_future()'s: _source, then _outcome
    _source: Future | None = None  # settled with (error or None, result) once the work is done
    _name = "the operation"  # what a Work with no tasks (Executor.queued) ran, for messages

    def __init__(self, ex: Executor, tasks, result):
        super().__init__()
        self._ex = ex
        self._tasks = tasks
        self._result = result

    # completion -------------------------------------------------------------
    def _issued(self, mark: _Mark | None, err=None) -> None:
        self._mark = mark
        self._err = err
        if err is not None:
            self._complete()
        elif self._source is not None and not self._source.done():
            self._ex.on_done(self)

    def _ready(self) -> bool:
        if self._mark is None and self._err is None:
            self._ex.flush()
        if self._err is not None:
            return True
        return self._mark is not None and self._mark.query()

    def _complete(self) -> None:
        """Run the tasks' finish and settle the future, once (the work is done)."""
        with self._ex.lock:
            if self._state is None:
                err = self._err
                mark = self._mark
                if err is None and mark is not None:
                    if not mark.done:  # from libgocl's host function: the work is done, its status not read yet
                        mark.query()
                    err = mark.err
                if err is None:
                    try:
                        for t in self._tasks:
                            _finish(t)
                    except Exception as exc:  # noqa: BLE001
                        err = exc
                self._err = err
                self._state = True if err is None else _FAILED
        src = self._source
        if src is not None and not src.done():
            try:
                src.set_result((self._err if self._state is _FAILED else None, self._result))
            except RuntimeError:  # settled meanwhile by another thread
                pass

    # c10d's Work ---------------------------------------------------------------
    def wait(self, timeout=None) -> bool:
        if self._state is None:
            if self._mark is None and self._err is None:
                self._ex.flush()
            if self._mark is not None:
                self._mark.wait(_seconds(timeout), self._what())
            self._complete()
        if self._state is _FAILED:
            raise self._err
        return True

    def _what(self) -> str:
        names = [t.name for t in self._tasks] or [self._name]
        return names[0] if len(names) == 1 else f"{len(names)} operations ({', '.join(names[:4])}" + \
            (", ...)" if len(names) > 4 else ")")

    def is_completed(self) -> bool:
        if self._state is None and self._ready():
            self._complete()
        return self._state is not None

    def get_future(self) -> Future:
        if self._future is None:
            # A C++ reader (DDP's reducer) sees an error only as the future's
            # error, which Python can set only by raising in a then() callback
            # (set_exception would hand it the exception as the value). The
            # source is torch's C future itself: torch.futures.Future wraps
            # each of its calls in Python, paid per DDP bucket (the then()
            # future handed out was a C future already).
            self._source = _CFuture([])
            self._future = self._source.then(_outcome)
            mark = self._mark
            if self._state is not None or self._err is not None or (mark is not None and mark.done):
                self._complete()
            elif mark is not None:
                # No event query first: a DDP bucket was just launched, and
                # libgocl calls back at once if the work is already done.
                self._ex.on_done(self)
            else:
                self._ex.flush()  # held back (point-to-point): issuing it arranges completion (_issued)
        return self._future

    def is_success(self) -> bool:
        return self.is_completed() and self._state is not _FAILED

    def exception(self):
        return self._err if self.is_completed() and self._state is _FAILED else None

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


def _outcome(source: Future):
    err, result = source.value()
    if err is not None:
        raise err
    return result


GoclWork = StreamWork  # the name other modules and older tests use


def _seconds(timeout) -> float:
    if timeout is None:
        return 0.0
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


try:
    from torch._C._distributed_c10d import _create_work_from_future
except ImportError:  # pragma: no cover - every torch >= 2.5 has it
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
    return _DoneWork(f, result)


class _DoneWork(dist.Work):
    def __init__(self, future, result):
        super().__init__()
        self._future, self._result = future, result

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        return self._future

    def result(self):
        return self._result


# ------------------------------------------------------------------ host functions
# get_future() of a queued Work: libgocl calls _on_host(key) on its stream's
# host thread once the work is done; ctypes takes the GIL for it.
_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_waiting: dict[int, StreamWork] = {}
_keys = itertools.count(1)


def _on_host(key):
    work = _waiting.pop(key, None)
    if work is not None:
        try:
            work._complete()
        except BaseException:  # noqa: BLE001  (nothing may unwind into libgocl)
            pass


_HOST_FN = _HOST_FN_TYPE(_on_host)
_executors: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _settle_at_exit() -> None:
    """Let queued work and pending host functions finish before the
    interpreter goes: a host function entering a finalizing interpreter
    would take libgocl's thread down with it."""
    for ex in list(_executors):
        try:
            ex.drain()
        except Exception:  # noqa: BLE001  (errors belong to their Works)
            pass
    deadline = time.monotonic() + 5
    while _waiting and time.monotonic() < deadline:
        time.sleep(0.001)


class Executor:
    """Issues one group's tasks in submission order (see module docstring)."""

    def __init__(self, name: str, where: str | None = None):
        self.name = name
        self.where = where or f"group {name}"  # for messages: the group and this rank in it
        self.lock = threading.RLock()
        self._stream: _core.Stream | None = None
        self._inflight: collections.deque = collections.deque()  # (mark, [works]) in stream order
        self._events: list[int] = []  # recorded-and-released events, for reuse
        self._p2p: list = []  # (task, work) held back (see module docstring)
        self._batch: list | None = None  # (task, work) collected while coalescing
        self._closed = False
        self.waiters: set[int] = set()  # threads blocked waiting on this group's queued work
        _executors.add(self)
        _warn_window()

    # coalescing -----------------------------------------------------------
    def start_coalescing(self) -> None:
        with self.lock:
            if self._batch is not None:
                raise RuntimeError(f"gocl {self.name}: start_coalescing called twice without end_coalescing")
            self._batch = []

    def end_coalescing(self, async_op: bool = True):
        with self.lock:
            batch, self._batch = self._batch, None
            if batch is None:
                raise RuntimeError(f"gocl {self.name}: end_coalescing without start_coalescing")
            if not batch:
                return completed_work([])
            tasks = [t for t, _ in batch]
            combined = StreamWork(self, tasks, [x for t in tasks for x in t.result])
            self._launch(tasks, [w for _, w in batch] + [combined])
        if not async_op:
            combined.wait()
        return combined

    # fast path ----------------------------------------------------------------
    def inline_ok(self) -> bool:
        """Whether a host call may go straight to gocl (nothing held back
        or being collected); other groups' held-back sends and receives
        are issued first."""
        if _holding:
            _release_others(self)
        return not (self._p2p or self._batch is not None or self._closed)

    def stream_handle(self) -> int:
        """The group's stream, made on first use (under the lock)."""
        s = self._stream
        if s is None:
            _bind()
            s = self._stream = _core.Stream()
        return s.handle

    def mark(self) -> _Mark:
        """Record an event behind what was just queued on the stream."""
        ev = self._events.pop() if self._events else None
        if ev is None:
            h = ctypes.c_void_p()
            _core.check(_event_create(ctypes.byref(h)))
            ev = h.value
        rc = _event_record(ev, self._stream.handle)
        if rc:
            _core.check(rc)
        return _Mark(self, ev)

    def release_event(self, ev: int) -> None:
        if self._closed:
            _event_destroy(ev)
        else:
            self._events.append(ev)

    def queued(self, result, keep=None, name: str | None = None) -> StreamWork:
        """The Work of gocl calls just queued on the stream by the caller
        (under the lock), with no task to finish: result holds the tensors,
        keep what else the calls use (their inputs), name the operation."""
        work = StreamWork(self, (), result)
        if name is not None:
            work._name = name
        if keep is not None:
            work._keep = keep
        mark = work._mark = self.mark()
        self.track(mark, (work,))
        return work

    def track(self, mark: _Mark, works) -> None:
        """Keep mark's works (their tensors) until the mark is done. Every
        POLL launches, let go of those that are done (in stream order: the
        newest done means all are), so a burst of small calls pays one
        event query per POLL calls, not one each. Works with tasks run
        their finish then; the others complete when they are asked (their
        mark remembers it is done)."""
        q = self._inflight
        if len(q) >= POLL:
            if q[-1][0].query():
                done = list(q)
                q.clear()
            else:
                done = []
                while q and q[0][0].query():
                    done.append(q.popleft())
            for _, ws in done:
                for w in ws:
                    if w._tasks:
                        w._complete()
        q.append((mark, works))

    # submission -----------------------------------------------------------
    def submit(self, task: Task, async_op: bool):
        if _holding and not task.p2p and self._batch is None:
            _release_others(self)  # before this call can block on a peer
        with self.lock:
            if self._closed:
                raise RuntimeError(f"gocl {self.name}: the process group was shut down")
            work = StreamWork(self, [task], task.result) if (async_op or task.p2p or self._batch is not None) \
                else None
            if self._batch is not None:
                self._batch.append((task, work))
                return work
            if task.p2p:
                self._p2p.append((task, work))
                _holding.add(self)
                return work
            if self._p2p:
                self._flush_locked()
            if task.staged or task.blocking:
                self._drain_locked()
            if work is None:
                run_tasks([task], None)  # the NULL stream: after the group's queued work
                _finish(task)
                return completed_work(task.result)
            if task.blocking:
                self._run_blocking(task, work)
            else:
                self._launch([task], [work])
            return work

    def _launch(self, tasks, works) -> None:
        """Issue tasks on the stream (under the lock); their works complete
        with the event behind them, or fail at once if issuing failed."""
        try:
            run_tasks(tasks, self.stream_handle())
        except Exception as exc:  # noqa: BLE001  (surfaces at wait(), as c10d's async errors do)
            for w in works:
                w._issued(None, exc)
            return
        mark = self.mark()
        for w in works:
            w._issued(mark)
        self.track(mark, works)

    def _run_blocking(self, task, work) -> None:
        try:
            run_tasks([task], None)
        except Exception as exc:  # noqa: BLE001
            work._issued(None, exc)
            return
        work._issued(None)
        work._complete()

    def on_done(self, work: StreamWork) -> None:
        """Complete work's future from libgocl's host thread once it is done."""
        key = next(_keys)
        _waiting[key] = work
        rc = _lib.lib().goclLaunchHostFunc(self._stream.handle, _HOST_FN, key)
        if rc:
            _waiting.pop(key, None)
            _core.check(rc)

    # releasing, draining --------------------------------------------------
    def flush(self, others: bool = True) -> None:
        """Issue every point-to-point task held back so far (other groups'
        first unless others is false: this group's may be about to be
        waited for)."""
        if others and self._p2p and _holding:
            _release_others(self)
        with self.lock:
            if self._p2p:
                self._flush_locked()

    def _flush_locked(self) -> None:
        held, self._p2p = self._p2p, []
        _holding.discard(self)
        i = 0
        while i < len(held):
            if held[i][0].blocking:  # a receive from any source: alone, after what is queued
                self._drain_locked()
                self._run_blocking(*held[i])
                i += 1
                continue
            j = i
            while j < len(held) and not held[j][0].blocking:
                j += 1
            chunk = held[i:j]
            if any(t.staged for t, _ in chunk):
                self._drain_locked()
            self._launch([t for t, _ in chunk], [w for _, w in chunk])
            i = j

    def _drain_locked(self) -> None:
        q = self._inflight
        while q:
            mark, works = q.popleft()
            mark.wait()
            for w in works:
                w._complete()

    def settle(self, grace: float) -> bool:
        """Wait for the queued work, in stream order (under the lock). False
        when another thread is blocked on it and no launch has finished for
        grace seconds: it is stuck, and only an abort ends it."""
        me = threading.get_ident()
        for mark, _ in list(self._inflight):
            since, nap = time.monotonic(), 0.0002  # each finished launch restarts the grace
            while not mark.query():
                if self.waiters - {me} and time.monotonic() - since > grace:
                    return False
                time.sleep(nap)
                nap = min(2 * nap, 0.005)
        return True

    def drain(self) -> None:
        """Issue what is held back, then wait until everything issued has
        finished (errors stay with their Works)."""
        if _holding:
            _release_others(self)
        with self.lock:
            if self._p2p:
                self._flush_locked()
            self._drain_locked()

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            try:
                self.drain()
            finally:
                self._closed = True
                _holding.discard(self)
                events, self._events = self._events, []
                for ev in events:
                    _event_destroy(ev)
                if self._stream is not None:
                    self._stream.destroy()
