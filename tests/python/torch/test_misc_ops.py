"""Point to point (send/recv, isend/irecv, batch_isend_irecv), object
collectives, coalesced variants, async ordering, barrier, functional
collectives, clear errors, and the host-staging path that device tensors
take (forced on CPU with GOCL_TORCH_FORCE_STAGING=1)."""

from __future__ import annotations

import functools
import os

import pytest
from torchdist_util import Failures, R, dist, group, make, noncontig, torch  # noqa: I001


def _p2p(rank, world, f):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # blocking send/recv in a ring, odd and large sizes
    for n in (1, 1031, 300_001):
        x = torch.full((n,), float(rank))
        y = torch.empty(n)
        if rank % 2 == 0:
            dist.send(x, nxt)
            dist.recv(y, prv)
        else:
            dist.recv(y, prv)
            dist.send(x, nxt)
        f.check(bool((y == prv).all()), f"ring send/recv n={n}")
    # the tutorial ring: isend, then a blocking recv, then wait; 12 MB messages
    for n in (5, 3_000_001):
        x = torch.full((n,), float(rank))
        y = torch.empty(n)
        req = dist.isend(x, nxt)
        dist.recv(y, prv)
        req.wait()
        f.check(bool((y == prv).all()), f"isend+recv ring n={n}")
        # isend + irecv, wait on both (recv first)
        y2 = torch.empty(n, dtype=torch.float64)
        reqs = [dist.irecv(y2, prv), dist.isend(x.double(), nxt)]
        for r in reqs:
            r.wait()
        f.check(bool((y2 == prv).all()), f"irecv+isend ring n={n}")
    # batch_isend_irecv both directions, several dtypes, non-contiguous receive
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool, torch.int16):
        a = make(dtype, 1000, rank, 5)
        b = make(dtype, 1000, rank, 6)
        ra, rb = torch.empty_like(a), noncontig(torch.zeros_like(b))
        ops = [dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.irecv, ra, prv),
               dist.P2POp(dist.isend, b, prv), dist.P2POp(dist.irecv, rb, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        f.expect(ra, make(dtype, 1000, prv, 5), f"batch_isend_irecv {dtype} from prev")
        f.expect(rb.contiguous(), make(dtype, 1000, nxt, 6), f"batch_isend_irecv {dtype} from next")
    # a big batch exchange with every peer (an all-to-all by hand)
    outs = [torch.empty(200_000) for _ in range(world)]
    ops = []
    for p in range(world):
        if p != rank:
            ops.append(dist.P2POp(dist.isend, torch.full((200_000,), float(rank * 10 + p)), p))
            ops.append(dist.P2POp(dist.irecv, outs[p], p))
    if ops:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    for p in range(world):
        if p != rank:
            f.check(bool((outs[p] == p * 10 + rank).all()), f"batch all-to-all from {p}")


def _objects(rank, world, f):
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (rank * 100)})
    f.check(objs == [{"rank": r, "pad": "x" * (r * 100)} for r in range(world)], f"all_gather_object {objs!r:.80}")
    lst = [rank, "hello", {"k": [1, 2]}] if rank == world - 1 else [None, None, None]
    dist.broadcast_object_list(lst, src=world - 1)
    f.check(lst == [world - 1, "hello", {"k": [1, 2]}], f"broadcast_object_list {lst}")
    out = [None] * world if rank == 0 else None
    dist.gather_object(("r", rank), out, dst=0)
    if rank == 0:
        f.check(out == [("r", r) for r in range(world)], f"gather_object {out}")
    got = [None]
    dist.scatter_object_list(got, [{"to": r} for r in range(world)] if rank == 0 else None, src=0)
    f.check(got == [{"to": rank}], f"scatter_object_list {got}")


def _coalesced(rank, world, f):
    ts = [torch.full((n,), float(rank + 1)) for n in (1, 7, 300)]
    dist.all_reduce_coalesced(ts)
    s = world * (world + 1) / 2
    f.check(all(bool((t == s).all()) for t in ts), "all_reduce_coalesced")
    ints = [torch.full((3,), rank + 1, dtype=torch.int32), torch.full((2,), rank + 5, dtype=torch.int32)]
    dist.all_reduce_coalesced(ints, op=R.BOR)  # bitwise: per-tensor path
    f.check(bool((ints[0] == functools.reduce(int.__or__, range(1, world + 1))).all()), "all_reduce_coalesced BOR")
    # all_gather_coalesced (deprecated but still there): outs[r] is rank r's
    # list, one tensor per input; 4 inputs, so the transposed reading has
    # another length on every world size tested
    sizes = (2, 3, 1, 5)
    ins = [torch.full((n,), float(rank * 10 + j)) for j, n in enumerate(sizes)]
    outs = [[torch.empty(n) for n in sizes] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    f.check(all(bool((outs[r][j] == r * 10 + j).all()) for r in range(world) for j in range(len(sizes))),
            f"all_gather_coalesced {outs}")
    # the coalescing manager: all_reduce fast path, all_gather_into_tensor, reduce_scatter_tensor
    ts = [torch.full((5,), float(rank)) for _ in range(3)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    s0 = world * (world - 1) / 2
    f.check(all(bool((t == s0).all()) for t in ts), "coalescing manager all_reduce")
    outs = [torch.empty(world * 4) for _ in range(2)]
    with dist._coalescing_manager():
        for o in outs:
            dist.all_gather_into_tensor(o, torch.full((4,), float(rank)))
    want = torch.arange(world, dtype=torch.float32).repeat_interleave(4)
    f.check(all(torch.equal(o, want) for o in outs), "coalescing manager all_gather_into_tensor")
    outs = [torch.empty(3) for _ in range(2)]
    with dist._coalescing_manager():
        for o in outs:
            dist.reduce_scatter_tensor(o, torch.ones(world * 3))
    f.check(all(bool((o == world).all()) for o in outs), "coalescing manager reduce_scatter_tensor")


def _async_order(rank, world, f):
    # many async ops in flight, waited in reverse order; results must follow issue order
    t = torch.zeros(1000)
    works = []
    for i in range(20):
        t.add_(0)  # no-op on purpose: the tensor must not be touched while in flight
        works.append(dist.all_reduce(torch.full((1000,), float(i + rank)), async_op=True))
    works.append(dist.broadcast(t.fill_(rank), src=0, async_op=True))
    for w in reversed(works):
        w.wait()
    f.check(bool((t == 0).all()), "async broadcast after queued all_reduces")
    w = dist.all_reduce(torch.ones(3), async_op=True)
    fut = w.get_future()
    val = fut.wait()
    f.check(isinstance(val, list) and bool((val[0] == world).all()), f"future value {val}")
    # (torch's C++ ProcessGroup forwards only wait() and get_future() of a
    # Python Work, so ask the future whether it is done)
    f.check(w.get_future().done(), "future done after wait")
    # a call that ran inline still hands its outputs to the future (C++
    # callers such as DDP's reducer read them)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    opts = dist.AllreduceOptions()
    if hasattr(opts, "asyncOp"):
        opts.asyncOp = False
    x = torch.ones(4)
    w = backend.allreduce([x], opts)
    w.wait()
    val = w.get_future().value()
    f.check(len(val) == 1 and val[0] is x and bool((x == world).all()), f"inline future value {val}")
    f.check(w.is_completed(), "an inline call's Work is completed")
    # the same through the group from code that is not torch's wrapper (only
    # dist.all_reduce, which checks for None, gets None for a finished call)
    x = torch.ones(4)
    w = dist.group.WORLD.allreduce([x], opts)
    f.check(w is not None and w.wait() and bool((x == world).all()), f"group allreduce returned {w!r}")
    f.check(w.get_future().value()[0] is x, "group allreduce's future holds the tensor")
    # a sync op after async ones waits for them (ordering inline vs worker)
    a = torch.full((50_000,), 1.0)
    wa = dist.all_reduce(a, async_op=True)
    b = torch.full((7,), 2.0)
    dist.all_reduce(b)
    f.check(bool((b == 2 * world).all()), "sync after async")
    from gocl.torch_backend import _frontends, _staging
    pg = dist.group.WORLD
    if (_frontends._NONE_OK_CALLERS and isinstance(pg, _frontends.GoclGroup) and pg._engine is not None
            and not _staging.force_staging()):  # the latency path's synchronous all_reduce
        engine, got = pg._engine, []

        def spy(*args, _real=engine.allreduce):
            got.append(_real(*args))
            return got[-1]
        engine.allreduce = spy
        try:
            c = torch.ones(3)
            dist.all_reduce(c)
        finally:
            del engine.allreduce
        f.check(got == [None] and bool((c == world).all()),
                f"dist.all_reduce's finished call got {got!r}, not None (the latency path's saving)")
    wa.wait()
    f.check(bool((a == world).all()), "async before sync")
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()


def _functional(rank, world, f):
    """torch.distributed._functional_collectives (what torch.compile and
    DTensor use): torch's C++ calls the backend by group name."""
    import torch.distributed._functional_collectives as fc

    g = dist.group.WORLD
    x = torch.full((6,), float(rank))
    y = fc.wait_tensor(fc.all_reduce(x, "sum", g))
    f.check(bool((y == world * (world - 1) / 2).all()), f"functional all_reduce {y}")
    y = fc.wait_tensor(fc.all_gather_tensor(x, 0, g))
    f.check(torch.equal(y, torch.arange(world, dtype=torch.float32).repeat_interleave(6)),
            f"functional all_gather_tensor {y}")
    y = fc.wait_tensor(fc.reduce_scatter_tensor(torch.ones(world * 2), "sum", 0, g))
    f.check(bool((y == world).all()) and y.numel() == 2, f"functional reduce_scatter_tensor {y}")
    y = fc.wait_tensor(fc.all_to_all_single(torch.full((world,), float(rank)), None, None, g))
    f.check(torch.equal(y, torch.arange(world, dtype=torch.float32)), f"functional all_to_all_single {y}")


def _errors(rank, world, f):
    def expect_error(fn, *needles, what):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            f.check(all(n in msg for n in needles), f"{what}: unclear error {msg!r}")
        else:
            f.check(False, f"{what}: no error")

    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), "torch.int16", "SUM", f"rank {rank}",
                 what="int16 all_reduce")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=R.AVG), "torch.bool", "AVG",
                 what="bool AVG")
    expect_error(lambda: dist.all_reduce(torch.ones(3), op=R.BAND), "torch.float32", "BAND", what="float BAND")
    expect_error(lambda: dist.reduce_scatter_tensor(torch.empty(3), torch.ones(3 * world + 1)),
                 "reduce_scatter_tensor", what="reduce_scatter_tensor sizes")
    # sparse: SUM only (gathered indices and values, coalesced, as gloo)
    sp = torch.zeros(5, 2)
    sp[rank % 5] = rank + 1
    sp[4, 1] = 10
    sparse = sp.to_sparse()
    dist.all_reduce(sparse)
    want = torch.zeros(5, 2)
    for q in range(world):
        want[q % 5] += q + 1
    want[4, 1] += 10 * world
    f.check(torch.equal(sparse.to_dense(), want), f"sparse all_reduce {sparse.to_dense()}")
    expect_error(lambda: dist.all_reduce(torch.ones(3).to_sparse(), op=R.MAX), "sparse allreduce supports only SUM",
                 what="sparse all_reduce MAX")
    # the group still works after refused calls
    x = torch.ones(4)
    dist.all_reduce(x)
    f.check(bool((x == world).all()), "all_reduce after refused calls")


def _everything(rank, world, f):
    if world > 1:
        _p2p(rank, world, f)
    _objects(rank, world, f)
    _coalesced(rank, world, f)
    _async_order(rank, world, f)
    if world == 2:  # importing functional collectives costs seconds: once is enough
        _functional(rank, world, f)
    _errors(rank, world, f)


@pytest.mark.parametrize("world", [pytest.param(n, marks=pytest.mark.ranks(n), id=f"{n}ranks") for n in (1, 2, 3)])
def test_p2p_objects_coalesced_async_errors(world):
    with group() as (rank, world):
        f = Failures(rank)
        _everything(rank, world, f)
        f.done()


def test_none_ok_callers_match_torch():
    """pg.allreduce hands None for a finished synchronous call only to the
    callers _frontends names for this torch. Each must wait only on a Work
    it gets (read here from torch's source), and torch's all_reduce must be
    named wherever it does, so a newer torch neither crashes on None nor
    loses the saving silently (then re-read it and raise its gate in
    _internals.GATES)."""
    import inspect
    import re

    from gocl.torch_backend import _frontends

    code = inspect.unwrap(dist.distributed_c10d.all_reduce).__code__
    src = inspect.getsource(code)
    guarded = len(re.findall(r"\bwork is not None\s*\)?\s*:[^\n]*(?:\n\s*#[^\n]*)*\n\s*work\.wait\(\)", src))
    takes_none = guarded > 0 and guarded == src.count(".wait(")
    named = code in _frontends._NONE_OK_CALLERS
    assert named == takes_none, (f"torch {torch.__version__}: all_reduce {'takes' if takes_none else 'does not take'} "
                                 f"None from pg.allreduce, but _frontends {'names' if named else 'does not name'} it")
    assert _frontends._NONE_OK_CALLERS <= {code}


def test_group_devices_hook_matches_torch():
    """_internals.group_devices reads backend_config from the frame of
    torch's _new_process_group_helper, which (read here from its source)
    must build it, hand the creator the group it builds, and call the
    creator once when every device has the same backend. A torch newer
    than the gate fails here: read the helper again and raise the gate."""
    import inspect
    import re

    from gocl.torch_backend import _internals

    lo, hi = _internals.GATES["group_devices"]
    assert _internals.TORCH <= hi, (f"torch {torch.__version__} is newer than group_devices' gate {lo}..{hi}: "
                                    "read _new_process_group_helper and raise the gate in _internals.GATES")
    src = inspect.getsource(dist.distributed_c10d._new_process_group_helper)
    shape = {
        "builds backend_config": "backend_config = BackendConfig(" in src,
        "hands the creator the group": "dist_backend_opts.process_group = pg" in src,
        "one creator call for one backend":
            re.search(r"if len\(set\(backend_config\.get_device_backend_map\(\)\.values\(\)\)\) == 1:", src)
            is not None,
    }
    if _internals.within("group_devices"):
        assert all(shape.values()), f"torch {torch.__version__}: _new_process_group_helper changed: {shape}"


def test_caller_async_hook_matches_torch():
    """Where torch does not tell the backend whether a call is asynchronous
    (no opts.asyncOp), _internals.caller_async reads the async_op argument
    of the torch.distributed function that calls the group: each must take
    one. Outside the gate every such call counts as asynchronous."""
    import inspect

    from gocl.torch_backend import _internals

    lo, hi = _internals.GATES["caller_async"]
    if _internals.HAS_ASYNC_OP:
        opts = dist.AllreduceOptions()
        for flag in (False, True):  # the flag decides, wherever the call came from
            opts.asyncOp = flag
            assert _internals.caller_async(opts) is flag
        return
    assert _internals.within("caller_async"), (f"torch {torch.__version__} has no asyncOp and is outside "
                                               f"caller_async's gate {lo}..{hi}: read torch.distributed and move it")
    c10d_py = dist.distributed_c10d
    for name in ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier"):
        params = inspect.signature(inspect.unwrap(getattr(c10d_py, name))).parameters
        assert "async_op" in params, f"torch {torch.__version__}: dist.{name} takes no async_op"
    assert _internals.caller_async(dist.AllreduceOptions()) is True  # called from a test, not from torch


def test_executor_releases_p2p_by_program_order_not_by_time(monkeypatch):
    """The executor alone (gocl calls stubbed out): queued point-to-point
    tasks never start on their own, however long they wait; a wait (here
    get_future) releases exactly the ones submitted before it; a collective
    queued behind runs the rest first."""
    import time

    from gocl.torch_backend import _work

    ran = []
    monkeypatch.setattr(_work, "run_tasks", lambda tasks, stream: ran.append([t.name for t in tasks]))
    ex = _work.Executor("unit:0")
    try:
        a = ex.submit(_work.Task("a", None, p2p=True), async_op=True)
        ex.submit(_work.Task("b", None, p2p=True), async_op=True)
        time.sleep(0.2)
        assert ran == []
        fut = a.get_future()
        ex.submit(_work.Task("c", None, p2p=True), async_op=True)  # after the release: not in its batch
        fut.wait()
        time.sleep(0.1)
        assert ran == [["a", "b"]]
        ex.submit(_work.Task("d", None), async_op=True).wait()
        assert ran == [["a", "b"], ["c"], ["d"]]
    finally:
        ex.close()


@pytest.mark.ranks(2, timeout=90)
def test_p2p_batches_do_not_depend_on_timing():
    """Which queued isend/irecv run together must follow the program, not the
    clock. Each rank pauses between the two halves of a ring exchange (as a
    rank does when a big ``x.double()`` or a loaded machine stalls it between
    irecv and isend): a timer that started the first half alone left it
    blocked in gocl with its partner queued behind it, on every rank, until
    GOCL_TIMEOUT (the old 50 ms GOCL_TORCH_P2P_WINDOW_MS is well inside the
    pauses). 24 MB messages: more than a socket buffers, so a lone send
    blocks as surely as a lone receive."""
    import time

    os.environ["GOCL_TIMEOUT"] = "20"  # read at the communicator init (in init_process_group)
    with group() as (rank, world):
        f = Failures(rank)
        peer = 1 - rank
        n = 3_000_001
        x = torch.full((n,), float(rank), dtype=torch.float64)
        y = torch.empty(n, dtype=torch.float64)
        # irecv first, then isend
        r = dist.irecv(y, peer)
        time.sleep(0.3)
        s = dist.isend(x, peer)
        r.wait()
        s.wait()
        f.check(bool((y == peer).all()), "irecv, pause, isend")
        # isend first, then a blocking recv
        y.zero_()
        s = dist.isend(x, peer)
        time.sleep(0.3)
        dist.recv(y, peer)
        s.wait()
        f.check(bool((y == peer).all()), "isend, pause, recv")
        # a send nobody waits for goes out with the next call on the group
        if rank == 0:
            dist.isend(x, 1)
        else:
            y.zero_()
            dist.recv(y, 0)
            f.check(bool((y == 0).all()), "unwaited isend")
        dist.barrier()
        f.done()


@pytest.mark.ranks(2)
def test_device_staging_path():
    """Device (CUDA) tensors go through host copies; GOCL_TORCH_FORCE_STAGING=1
    sends CPU tensors down the same path, so it is tested without a GPU."""
    os.environ["GOCL_TORCH_FORCE_STAGING"] = "1"
    from gocl.torch_backend import _staging

    assert _staging.force_staging()
    with group() as (rank, world):
        f = Failures(rank)
        x = torch.full((5,), float(rank + 1))
        dist.all_reduce(x)
        f.check(bool((x == 3).all()), "staged all_reduce")
        out = torch.empty(2 * 5)
        dist.all_gather_into_tensor(out, x)
        f.check(bool((out == 3).all()), "staged all_gather_into_tensor")
        _objects(rank, world, f)
        _coalesced(rank, world, f)
        _p2p(rank, world, f)
        f.done()


@pytest.mark.ranks(2)
def test_torch_distributed_debug_detail():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: torch wraps a c10d Backend in its
    ProcessGroupWrapper, which fingerprints every collective (sequence
    numbers) and reports ranks that disagree. The ProcessGroup-subclass
    route is not wrapped by torch; there the same calls must still work."""
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()
    dist.init_process_group("gocl")
    rank, world = dist.get_rank(), dist.get_world_size()
    f = Failures(rank)
    _objects(rank, world, f)
    _coalesced(rank, world, f)
    x = torch.full((3,), float(rank))
    dist.all_reduce(x)
    f.check(bool((x == 1).all()), f"all_reduce under DETAIL {x}")
    f.done()
    wrapped = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__ == "_ProcessGroupWrapper"
    if wrapped:
        # rank 0 all_reduces, rank 1 broadcasts: the wrapper names the mismatch
        with pytest.raises(RuntimeError, match="(?i)mismatch"):
            if rank == 0:
                dist.all_reduce(torch.ones(2))
            else:
                dist.broadcast(torch.ones(2), src=0)
    os._exit(0)  # the group is left in a failed state on purpose
