"""gocl on Ray (gocl.ray), on a local Ray cluster of CPU workers.

- ray.util.collective with backend "gocl": every call from 2 actors, results
  checked against numpy on the driver (numpy arrays and torch tensors);
- Ray Train's TorchTrainer, 2 CPU workers, the same DDP training on gloo, on
  TorchConfig(backend="gocl") and on gocl.ray.torch_config(): per-step losses
  of both ranks compared.

Needs Ray (``gocl[ray]``): run from .venv-ray (``make test-ray``).
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import gocl.ray as gocl_ray  # noqa: E402
import ray.util.collective as col  # noqa: E402
from ray.util.collective.types import ReduceOp  # noqa: E402

WORLD = 2
SHAPE = (3, 5)

# A hang becomes gocl's timeout error well before make's limit; read by every
# actor and Train worker (the job's runtime_env below passes it on).
os.environ.setdefault("GOCL_TIMEOUT", "60")


@pytest.fixture(scope="module")
def cluster():
    # The functions and classes below go to Ray's workers by value: this test
    # module is not importable there.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # 4 logical CPUs on a small machine: 2 Train workers plus Train's controller,
    # or 2 actors plus the group's info actor, must fit at once.
    # worker_process_setup_hook (job level only): every worker process Ray
    # starts registers gocl first (test_worker_setup_hook_registers relies on it).
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=True,
             runtime_env={"worker_process_setup_hook": "gocl.ray.register",
                          "env_vars": {"GOCL_TIMEOUT": os.environ["GOCL_TIMEOUT"],
                                       "RAY_TRAIN_V2_ENABLED": os.environ.get("RAY_TRAIN_V2_ENABLED", "1")}})
    gocl_ray.register()  # the driver's registry: create_collective_group checks it
    try:
        yield
    finally:
        ray.shutdown()


def _inputs(rank: int, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    return rng.integers(-8, 9, SHAPE).astype(dtype)


class _Member:
    """One rank: registers gocl in its own process (Ray builds the group here)."""

    def __init__(self, rank: int):
        import gocl.ray  # noqa: PLC0415

        gocl.ray.register()
        self.rank = rank

    def join(self, world: int, name: str) -> int:
        col.init_collective_group(world, self.rank, backend="gocl", group_name=name)
        assert type(col.get_group_handle(name)) is gocl_ray.GoclGroup
        return col.get_rank(name)

    def run(self, name: str, kind: str) -> dict:
        """Each call on a numpy array or a torch tensor (kind)."""
        assert type(col.get_group_handle(name)) is gocl_ray.GoclGroup  # gocl's, not gloo's
        r = self.rank
        conv = (lambda a: a.copy()) if kind == "numpy" else (lambda a: torch.from_numpy(a.copy()))
        back = (lambda t: np.asarray(t)) if kind == "numpy" else (lambda t: t.numpy())
        out = {}
        for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
            x = conv(_inputs(r))
            col.allreduce(x, group_name=name, op=op)
            out[f"allreduce_{op.name}"] = back(x)
        x = conv(_inputs(r))
        col.broadcast(x, src_rank=1, group_name=name)
        out["broadcast"] = back(x)
        x = conv(_inputs(r))
        col.reduce(x, dst_rank=1, group_name=name, op=ReduceOp.MAX)
        out["reduce"] = back(x)
        xs = [conv(np.zeros(SHAPE, np.float32)) for _ in range(WORLD)]
        col.allgather(xs, conv(_inputs(r)), group_name=name)
        out["allgather"] = np.stack([back(t) for t in xs])
        y = conv(np.zeros(SHAPE, np.float32))
        col.reducescatter(y, [conv(_inputs(r) * (k + 1)) for k in range(WORLD)], group_name=name)
        out["reducescatter"] = back(y)
        peer = 1 - r
        x = conv(_inputs(r))
        if r == 0:
            col.send(x, peer, group_name=name)
            got = conv(np.zeros(SHAPE, np.float32))
            col.recv(got, peer, group_name=name)
        else:
            got = conv(np.zeros(SHAPE, np.float32))
            col.recv(got, peer, group_name=name)
            col.send(x, peer, group_name=name)
        out["sendrecv"] = back(got)
        col.barrier(group_name=name)
        # a non-contiguous numpy array and an int64 torch tensor: staged / other dtype
        nc = np.asfortranarray(_inputs(r, np.float64))
        col.allreduce(nc, group_name=name)
        out["allreduce_noncontig"] = nc.copy()
        ti = torch.arange(6, dtype=torch.int64) * (r + 1)
        col.allreduce(ti, group_name=name)
        out["allreduce_int64"] = ti.numpy()
        return out

    def multigpu_error(self, name: str) -> str:
        g = col.get_group_handle(name)
        try:
            g.allreduce([np.ones(2, np.float32), np.ones(2, np.float32)], None)
        except Exception as exc:  # noqa: BLE001 - the sentence is the result
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    def leave(self, name: str) -> None:
        col.destroy_collective_group(name)


Member = ray.remote(num_cpus=1)(_Member)


def _expected() -> dict:
    a = [_inputs(r) for r in range(WORLD)]
    exp = {
        "allreduce_SUM": a[0] + a[1], "allreduce_PRODUCT": a[0] * a[1],
        "allreduce_MIN": np.minimum(a[0], a[1]), "allreduce_MAX": np.maximum(a[0], a[1]),
        "broadcast": a[1], "allgather": np.stack(a),
        "allreduce_noncontig": _inputs(0, np.float64) + _inputs(1, np.float64),
        "allreduce_int64": np.arange(6) * 3,
    }
    return exp


def _check(results: list[dict]) -> None:
    exp = _expected()
    a = [_inputs(r) for r in range(WORLD)]
    for r, got in enumerate(results):
        for key, want in exp.items():
            np.testing.assert_array_equal(got[key], want, err_msg=f"{key} on rank {r}")
        # reduce (MAX) to rank 1: the root has the result, rank 0 keeps its input
        np.testing.assert_array_equal(got["reduce"], np.maximum(a[0], a[1]) if r == 1 else a[0])
        # reducescatter: block k of rank j's list is inputs(j) * (k + 1); rank r gets block r summed
        np.testing.assert_array_equal(got["reducescatter"], (a[0] + a[1]) * (r + 1), err_msg=f"rank {r}")
        np.testing.assert_array_equal(got["sendrecv"], a[1 - r])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_collective_calls_match_numpy(cluster, kind):
    name = f"calls-{kind}"
    members = [Member.remote(r) for r in range(WORLD)]
    assert ray.get([m.join.remote(WORLD, name) for m in members]) == [0, 1]
    _check(ray.get([m.run.remote(name, kind) for m in members]))
    errors = ray.get([m.multigpu_error.remote(name) for m in members])
    for r, text in enumerate(errors):
        assert text.startswith("InvalidArgumentError") and f"rank {r}" in text and "one per call" in text, text
    ray.get([m.leave.remote(name) for m in members])
    # the same name again, in the same processes: a new gocl communicator
    assert ray.get([m.join.remote(WORLD, name) for m in members]) == [0, 1]
    _check(ray.get([m.run.remote(name, kind) for m in members]))
    for m in members:
        ray.kill(m)


def test_declared_group(cluster):
    """create_collective_group on the driver; each actor's first call builds the group."""
    name = "declared"
    members = [Member.remote(r) for r in range(WORLD)]
    col.create_collective_group(members, WORLD, list(range(WORLD)), backend="gocl", group_name=name)
    _check(ray.get([m.run.remote(name, "numpy") for m in members]))
    for m in members:
        ray.kill(m)
    ray.kill(ray.get_actor("info_" + name))


def test_experimental_collective_group(cluster):
    """ray.experimental.collective.create_collective_group (Ray's newer actor API)."""
    from ray.experimental import collective as xcol  # noqa: PLC0415

    members = [Member.remote(r) for r in range(WORLD)]
    handle = xcol.create_collective_group(members, backend="gocl", name="experimental")
    _check(ray.get([m.run.remote(handle.name, "torch") for m in members]))
    xcol.destroy_collective_group(handle)
    for m in members:
        ray.kill(m)


def test_missing_rank_zero_names_rank_and_fix(cluster):
    """Rank 1 alone: the wait for rank 0's unique id ends with a sentence."""
    m = Member.options(runtime_env={"env_vars": {"GOCL_TIMEOUT": "2"}}).remote(1)
    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(m.join.remote(WORLD, "alone"))
    text = str(info.value)
    assert "GoclTimeoutError" in text and "rank 1 of 2" in text and "'alone'" in text, text
    assert "rank 0" in text and "GOCL_TIMEOUT" in text, text
    ray.kill(m)


# ---------------------------------------------------------------- Ray Train

STEPS = 12


def _train_loop(config: dict) -> None:
    import ray.train  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    from ray.train.torch import prepare_model  # noqa: PLC0415

    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rank = ray.train.get_context().get_world_rank()
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    w = torch.linspace(-1, 1, 8)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(32, 8, generator=gen)
        y = (x @ w).unsqueeze(1) + 0.1 * torch.randn(32, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    mine = torch.tensor(losses, dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    metrics = {"losses": torch.stack(every).tolist(), "backend": dist.get_backend(), "params": params}
    # Train V2 keeps a run's metrics with its checkpoints (rank 0's): rank 0 saves one.
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(d, "model.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(d)
        ray.train.report(metrics, checkpoint=checkpoint)


def _train(torch_config, tmp_path, name: str) -> dict:
    from ray.train import RunConfig, ScalingConfig  # noqa: PLC0415
    from ray.train.torch import TorchTrainer  # noqa: PLC0415

    trainer = TorchTrainer(_train_loop, torch_config=torch_config,
                           scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False),
                           run_config=RunConfig(name=name, storage_path=str(tmp_path)))
    return trainer.fit().metrics


def test_torch_trainer_matches_gloo(cluster, tmp_path):
    from ray.train.torch import TorchConfig  # noqa: PLC0415

    runs = {
        "gloo": _train(TorchConfig(backend="gloo"), tmp_path, "gloo"),
        "gocl": _train(TorchConfig(backend="gocl"), tmp_path, "gocl"),
        "gocl.ray.torch_config": _train(gocl_ray.torch_config(), tmp_path, "gocl-config"),
    }
    assert runs["gloo"]["backend"] == "gloo"
    assert runs["gocl"]["backend"] == runs["gocl.ray.torch_config"]["backend"] == "gocl"
    ref = np.array(runs["gloo"]["losses"])
    assert ref.shape == (WORLD, STEPS)
    assert ref[:, -1].max() < ref[:, 0].min(), f"the model did not learn: {ref}"
    for name in ("gocl", "gocl.ray.torch_config"):
        got = np.array(runs[name]["losses"])
        diff = np.abs(got - ref).max()
        print(f"\n{name} vs gloo, per-step losses (rank 0; rank 1), max |diff| = {diff:.3g}")
        for r in range(WORLD):
            print(f"  rank {r} gloo: {' '.join(f'{v:.6f}' for v in ref[r])}")
            print(f"  rank {r} {name}: {' '.join(f'{v:.6f}' for v in got[r])}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0, err_msg=f"{name} vs gloo losses")
        np.testing.assert_allclose(runs[name]["params"], runs["gloo"]["params"], rtol=1e-6, atol=1e-7,
                                   err_msg=f"{name} vs gloo final parameters")


@ray.remote(num_cpus=1)
class Plain:
    """An actor that never imports gocl itself: Ray's worker setup hook registers it."""

    def allreduce(self, world: int, rank: int, name: str) -> np.ndarray:
        col.init_collective_group(world, rank, backend="gocl", group_name=name)
        x = _inputs(rank)
        col.allreduce(x, group_name=name)
        col.destroy_collective_group(name)
        return x


def test_worker_setup_hook_registers(cluster):
    members = [Plain.remote() for _ in range(WORLD)]
    got = ray.get([m.allreduce.remote(WORLD, r, "hooked") for r, m in enumerate(members)])
    for r in range(WORLD):
        np.testing.assert_array_equal(got[r], _inputs(0) + _inputs(1), err_msg=f"rank {r}")
    for m in members:
        ray.kill(m)


# ---------------------------------------------------------------- two nodes

def test_two_nodes():
    """A Ray head and a Ray worker node in network namespaces of their own
    (gocl.tools.netns; needs root), each with a decoy interface first: gocl (and
    gloo) must use the link named by GOCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME.
    ray.util.collective between an actor on each node, and TorchTrainer with
    one worker per node on gloo and on gocl, losses compared."""
    import json  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from gocl.tools import netns  # noqa: PLC0415

    why = netns.unavailable()
    if why:
        pytest.skip(f"two Ray nodes need network namespaces: {why}")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, GOCL_SOCKET_IFNAME=netns.IFNAME, GLOO_SOCKET_IFNAME=netns.IFNAME,
               RAY_USAGE_STATS_ENABLED="0", RAY_TRAIN_V2_ENABLED=os.environ.get("RAY_TRAIN_V2_ENABLED", "1"),
               # the nodes and the driver share no token file of a cluster of their own: no token auth
               RAY_AUTH_MODE="disabled")
    port = 6399
    # Ray's unix sockets live under --temp-dir, whose path must stay short (107 bytes)
    short = Path(tempfile.mkdtemp(prefix="gocl-ray-", dir="/tmp"))
    with netns.two_hosts("ray") as (head, worker):
        nodes = []
        try:
            # --block: each `ray start` stays the parent of its node's processes
            # and stops them when terminated (no `ray stop`, which stops every
            # Ray on the machine).
            common = ["--block", "--num-cpus", "2", "--disable-usage-stats"]
            nodes.append(subprocess.Popen(head.cmd(
                [str(bindir / "ray"), "start", "--head", "--node-ip-address", head.addr, "--port", str(port),
                 "--include-dashboard", "false", "--temp-dir", str(short / "head"), *common]), env=env,
                stdout=subprocess.DEVNULL))
            _wait_port(head, port, nodes[0])
            nodes.append(subprocess.Popen(worker.cmd(
                [str(bindir / "ray"), "start", "--address", f"{head.addr}:{port}", "--node-ip-address", worker.addr,
                 "--temp-dir", str(short / "worker"), *common]), env=env, stdout=subprocess.DEVNULL))
            driver = Path(__file__).with_name("ray_two_nodes_driver.py")
            deadline = time.monotonic() + 60
            while True:  # the worker node joins within seconds
                r = subprocess.run(head.cmd([str(bindir / "ray"), "status", "--address", f"{head.addr}:{port}"]),
                                   env=env, capture_output=True, text=True)
                if r.stdout.count("node_") >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(1)
            r = subprocess.run(head.cmd([sys.executable, str(driver), f"{head.addr}:{port}"]), env=env,
                               capture_output=True, text=True, timeout=400)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
        finally:
            for p in reversed(nodes):  # the worker node first: the head then has nothing to drain
                p.terminate()
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
            shutil.rmtree(short, ignore_errors=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["nodes"] == [head.addr, worker.addr]
    a = [_inputs(rank) for rank in range(WORLD)]
    for rank, got in enumerate(out["collective"]):
        assert got["node"] == out["nodes"][rank]
        np.testing.assert_array_equal(got["allreduce"], a[0] + a[1], err_msg=f"rank {rank}")
        np.testing.assert_array_equal(got["allgather"], np.stack(a), err_msg=f"rank {rank}")
    assert out["gloo"]["backend"] == "gloo" and out["gocl"]["backend"] == "gocl"
    ref, got = np.array(out["gloo"]["losses"]), np.array(out["gocl"]["losses"])
    print(f"\ntwo nodes: gocl vs gloo per-step losses, max |diff| = {np.abs(got - ref).max():.3g}")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0, err_msg="two nodes: gocl vs gloo losses")


def _wait_port(host, port: int, proc, seconds: float = 60) -> None:
    """Until the head's GCS listens (or its `ray start` has exited)."""
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    deadline = time.monotonic() + seconds
    probe = f"import socket; socket.create_connection(('{host.addr}', {port}), 1)"
    while subprocess.run(host.cmd([sys.executable, "-c", probe]), capture_output=True).returncode != 0:
        assert proc.poll() is None, f"the Ray head's `ray start` exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"the Ray head did not listen on {host.addr}:{port} in {seconds:g} s"
        time.sleep(0.5)


def test_private_kv_gate_covers_this_ray():
    """gocl reads Ray's private internal_kv only in the Ray versions whose
    source was read (gocl.ray.KV_GATE); a newer Ray takes the public path
    and this test says to read its source and raise the gate."""
    from gocl import _gates  # noqa: PLC0415

    assert _gates.within(gocl_ray.KV_GATE, _gates.major_minor(ray.__version__)), (
        f"Ray {ray.__version__} is outside gocl.ray.KV_GATE {gocl_ray.KV_GATE}: read ray.experimental.internal_kv "
        "in its source (_internal_kv_put/_get/_del) and raise the gate")
    from ray.experimental import internal_kv  # noqa: PLC0415

    assert isinstance(gocl_ray._kv(), gocl_ray._PrivateKV)
    for f in ("_internal_kv_put", "_internal_kv_get", "_internal_kv_del"):
        assert callable(getattr(internal_kv, f))


class _PublicKVMember(_Member):
    """A rank whose gocl.ray takes Ray's public path (as outside KV_GATE)."""

    def __init__(self, rank: int):
        super().__init__(rank)
        gocl_ray.KV_GATE = ((0, 0), (0, 0))
        assert isinstance(gocl_ray._kv(), gocl_ray._ActorKV)


PublicKVMember = ray.remote(num_cpus=1)(_PublicKVMember)


def test_public_kv_outside_the_gate(cluster):
    """Outside KV_GATE the unique id goes through a detached named actor
    (Ray's public API): the group works as on the private store, twice under
    one name, and the actor is gone once every rank joined."""
    name = "public-kv"
    members = [PublicKVMember.remote(r) for r in range(WORLD)]
    for _ in range(2):
        assert ray.get([m.join.remote(WORLD, name) for m in members]) == [0, 1]
        _check(ray.get([m.run.remote(name, "numpy") for m in members]))
        ray.get([m.leave.remote(name) for m in members])
    actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == "gocl"]
    assert actors == [], actors
    for m in members:
        ray.kill(m)
