"""Several hosts on one machine: network namespaces joined by a veth pair
or a bridge (gocl.tools.netns), 2 hosts x 2 ranks, 3 hosts x 1 rank.

- `gocl run --nnodes 2 --node-rank K --master-addr ...` on each host: TCP
  between hosts, shared memory inside each (the transport per pair, from
  GOCL_DEBUG=INFO), GOCL_SOCKET_IFNAME choosing the interface (each host has
  a decoy interface that comes first).
- Shaped links (a token bucket of 1 Gbit/s each way, as a cluster's NIC):
  every collective and send/recv right on 2 hosts x 2 ranks and on 3 hosts
  on a bridge (the speed goals are bench/multihost.py's).
- The link cut in the middle of all_reduces (`ip link set gocl0 down`),
  unshaped and shaped: every rank fails within the timeout, none hangs; and
  with a 600 s timeout, within the heartbeat timeout.
- Long (GOCL_TEST_LONG=1, `make test-reliability`): torchrun's multi-node
  rendezvous with backend "gocl" and NCCL_SOCKET_IFNAME; without an
  interface setting the decoy is chosen and init fails instead of hanging.

Skipped, with the reason, where namespaces cannot be made (not root, no ip).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import launched
import pytest

from gocl.tools import netns
from gocl.tools.launcher import new_secret, rank_env

HERE = Path(__file__).resolve().parent

_why = netns.unavailable()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no network namespaces: {_why}")
LONG = os.environ.get("GOCL_TEST_LONG") == "1"
RANK_SCRIPT = str(HERE / "multihost_rank.py")
BIN = Path(sys.executable).parent
PORT = 29400 + os.getpid() % 500  # each host has its own port space; varied only for readable logs


# Every node's launcher is given the same rendezvous secret, as README's multi-node recipe says.
SECRET = new_secret()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOCL_", "NCCL_"))}
    env["GOCL_RENDEZVOUS_SECRET"] = SECRET
    env.update(extra)
    return env


def _transports(out: str) -> dict[tuple[int, int], str]:
    """(rank, peer) -> transport, from the GOCL_DEBUG=INFO lines."""
    pairs = {}
    for m in re.finditer(r"\[(\d+)\] GOCL INFO channel to rank (\d+) \(.*?\) via (\w+)", out):
        pairs[int(m[1]), int(m[2])] = m[3]
    return pairs


def _check_transports(out: str) -> None:
    got = _transports(out)
    want = {(r, p): ("shm" if r // 2 == p // 2 else "socket") for r in range(4) for p in range(4) if r != p}
    assert got == want, out


def test_gocl_run_two_nodes():
    with netns.two_hosts() as hosts:
        env = _env(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_DEBUG="INFO", GOCL_DEBUG_SUBSYS="INIT,TUNING", GOCL_TIMEOUT="20")
        procs = [subprocess.Popen(
            h.cmd([str(BIN / "gocl"), "run", "--nnodes", "2", "--node-rank", str(k), "--master-addr", hosts[0].addr,
                   "--master-port", str(PORT), "-n", "2", RANK_SCRIPT, "collectives"]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k, h in enumerate(hosts)]
        outs = [p.communicate(timeout=90)[0] for p in procs]
    for k, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out
        for r in (2 * k, 2 * k + 1):  # the launcher labels global ranks
            assert f"[rank {r}] OK {r}" in out, out
            assert f"using {netns.IFNAME}:{hosts[k].addr}" in out, out
    _check_transports("".join(outs))
    # Every host has 2 ranks: the tuner (rank 0 prints its table) knows the
    # hosts and picks the hierarchical all-reduce for large calls.
    assert "tuner: 4 ranks, 2 hosts x 2 ranks" in outs[0], outs[0]
    big = [choice for size, choice in _allreduce_choices(outs[0]) if size >= 1 << 20]
    assert big and all(c.startswith("hier/") for c in big), outs[0]


@pytest.mark.skipif(netns.unavailable(shaped=True) is not None, reason=f"no shaped links: {netns.unavailable(shaped=True)}")
@pytest.mark.parametrize("nhosts,per_host", [(2, 2), (3, 1)], ids=["2x2", "3x1"])
def test_every_collective_on_shaped_links(nhosts, per_host):
    with netns.hosts(nhosts, "1gbit", f"s{nhosts}") as hosts:
        assert "rate 1Gbit" in hosts[0].shaping()
        env = _env(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_TIMEOUT="60")
        procs = [subprocess.Popen(
            h.cmd([str(BIN / "gocl"), "run", "--nnodes", str(nhosts), "--node-rank", str(k), "--master-addr",
                   hosts[0].addr, "--master-port", str(PORT), "-n", str(per_host), RANK_SCRIPT, "every"]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k, h in enumerate(hosts)]
        outs = [p.communicate(timeout=240)[0] for p in procs]
    for k, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out
        for r in range(k * per_host, (k + 1) * per_host):
            assert f"[rank {r}] OK {r}" in out, out


@pytest.mark.parametrize("encrypt", [("1", "1"), ("1", "0")], ids=["both", "one-host-only"])
def test_encrypted_links_between_hosts(encrypt):
    """GOCL_SOCKET_ENCRYPT=1 on every host: the collectives come out right over
    sealed links between hosts (shm inside each). Set on one host only: every
    rank fails at init naming the setting, none runs over garbage or hangs."""
    with netns.two_hosts() as hosts:
        procs = [subprocess.Popen(
            h.cmd([str(BIN / "gocl"), "run", "--nnodes", "2", "--node-rank", str(k), "--master-addr", hosts[0].addr,
                   "--master-port", str(PORT), "-n", "2", RANK_SCRIPT, "collectives"]),
            env=_env(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_TIMEOUT="20", GOCL_SOCKET_ENCRYPT=encrypt[k]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k, h in enumerate(hosts)]
        outs = [p.communicate(timeout=90)[0] for p in procs]
    for k, (p, out) in enumerate(zip(procs, outs)):
        if encrypt[0] == encrypt[1]:
            assert p.returncode == 0, out
            for r in (2 * k, 2 * k + 1):
                assert f"[rank {r}] OK {r}" in out, out
        else:
            assert p.returncode != 0, out
            assert "GOCL_SOCKET_ENCRYPT" in out and "set GOCL_SOCKET_ENCRYPT the same on every rank" in out, out


def _allreduce_choices(out: str) -> list[tuple[int, str]]:
    """(bytes, choice) rows of the allreduce section of the tuner's table."""
    rows, coll = [], None
    for line in out.splitlines():
        m = re.search(r"GOCL INFO (\w*)\s+(bytes|\d+)\s+(\S+)", line)
        if not m:
            continue
        if m[2] == "bytes":
            coll = m[1]
        elif coll == "allreduce":
            rows.append((int(m[2]), m[3]))
    return rows


def _start_ranks(hosts, mode: str, **extra: str) -> list[subprocess.Popen]:
    """2 ranks per host, each started directly (not under a launcher, which
    would stop a node's other rank once one fails): each reports its own error."""
    procs = []
    for k, h in enumerate(hosts):
        for local in range(2):
            env = rank_env(local, 2, hosts[0].addr, PORT, _env(**extra), nnodes=2, node_rank=k)
            procs.append(subprocess.Popen(h.cmd([sys.executable, RANK_SCRIPT, mode]), env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


TIMEOUT = 2.0


@pytest.fixture(scope="module", params=[(None, False), ("1gbit", False), ("1gbit", True)],
                ids=["unshaped", "shaped", "shaped-heartbeat"])
def cut_results(request):
    """all_reduce in a loop on 2x2 ranks; host 1's link goes down mid-call
    (no reset reaches either side). Found by the communicator's timeout
    (GOCL_TIMEOUT=2), or with GOCL_TIMEOUT=600 by the heartbeats alone
    (GOCL_HEARTBEAT_TIMEOUT=2). Returns [(exit code, seconds from the cut to
    its exit, output)] by rank."""
    rate, heartbeat = request.param
    if rate and netns.unavailable(shaped=True):
        pytest.skip(f"no shaped links: {netns.unavailable(shaped=True)}")
    timeouts = dict(GOCL_TIMEOUT="600", GOCL_HEARTBEAT_TIMEOUT=str(TIMEOUT)) if heartbeat else dict(
        GOCL_TIMEOUT=str(TIMEOUT), GOCL_HEARTBEAT_TIMEOUT="0")
    with netns.two_hosts("c", rate=rate) as hosts:
        procs = _start_ranks(hosts, "cut", GOCL_SOCKET_IFNAME=netns.IFNAME, **timeouts)
        try:
            for p in procs:
                line = p.stdout.readline()
                assert line.strip() == "READY", line + p.stdout.read()
            time.sleep(0.1)  # well inside a 4 MiB all_reduce's stream of calls
            hosts[1].link(False)
            cut = time.monotonic()
            results = []
            for p in procs:
                try:
                    out = p.communicate(timeout=max(1.0, cut + 4 * TIMEOUT + 10 - time.monotonic()))[0]
                except subprocess.TimeoutExpired:  # a hang: its output says where
                    p.send_signal(signal.SIGQUIT)
                    out = "STILL RUNNING\n" + p.communicate()[0]
                results.append((p.returncode, time.monotonic() - cut, out))
            if heartbeat:
                for r, (_, _, out) in enumerate(results):
                    assert "stopped answering gocl's heartbeats" in out, f"rank {r}: {out}"
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return results


@pytest.mark.skipif(netns.unavailable(shaped=True) is not None, reason=f"no shaped links: {netns.unavailable(shaped=True)}")
def test_gocl_perf_across_shaped_hosts(tmp_path):
    """gocl perf --hosts: the hosts, their link measured, the run's results
    checked by gocl-perf itself (#wrong), its JSON with the link's figures,
    busbw / link printed and drawn; and the tuner told the link's rate."""
    out, plot = tmp_path / "run.json", tmp_path / "run.png"
    args = [str(BIN / "gocl"), "perf", "--hosts", "2", "--rate", "1gbit", "all_reduce", "-b", "64K", "-e", "1M",
            "-f", "4", "-n", "20", "-w", "2", f"--json={out}"]
    try:
        import matplotlib  # noqa: F401
        args += ["--plot", str(plot)]
    except ImportError:
        plot = None
    r = subprocess.run(args, env=_env(GOCL_DEBUG="INFO", GOCL_DEBUG_SUBSYS="TUNING"), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one TCP stream carries" in r.stdout and "each host on CPUs" in r.stdout, r.stdout
    assert "# busbw / link (out of place): 64 KiB " in r.stdout, r.stdout
    assert "link between hosts 1 Gbit/s (GOCL_NET_GBPS)" in r.stdout + r.stderr, r.stdout + r.stderr
    run = json.loads(out.read_text())
    assert run["nranks"] == 2 and [row["size"] for row in run["rows"]] == [65536, 262144, 1048576]
    assert all(row["out_of_place"]["wrong"] == 0 for row in run["rows"])
    assert run["link"]["rate"] == "1gbit" and run["link"]["hosts"] == 2 and run["link"]["ranks_per_host"] == 1
    assert 0.08 < run["link"]["one_stream_GBps"] < 0.13, run["link"]  # 1 Gbit/s is 0.125 GB/s less TCP's headers
    if plot:
        assert plot.stat().st_size > 1000


@pytest.mark.parametrize("args,message", [
    (["--hosts", "1", "all_reduce"], "--hosts 1: give 2 or more hosts"),
    (["--hosts", "2", "--rate", "fast", "all_reduce"], "--rate: rate 'fast'"),
    (["--hosts", "2"], "name the collective"),
])
def test_gocl_perf_hosts_bad_input(args, message):
    r = subprocess.run([str(BIN / "gocl"), "perf", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_link_cut_fails_every_rank(cut_results):
    for r, (code, secs, out) in enumerate(cut_results):
        assert code == 3, f"rank {r}: {out}"  # 3: the collective raised a gocl error
        assert "ERROR" in out and f"on rank {r}" in out, f"rank {r}: {out}"
        # no hang: the timeout plus the slack of a loaded machine
        assert secs < 2 * TIMEOUT + 5, f"rank {r} took {secs:.1f} s after the cut: {out}"
    # The ranks whose own peer is across the cut name a rank of the other host.
    far = {0: (2, 3), 2: (0, 1)}
    for r, others in far.items():
        named = {int(x) for x in re.findall(r"\branks? \[?(\d+)", cut_results[r][2])} - {r}
        assert named & set(others), f"rank {r} does not name a rank of the other host: {cut_results[r][2]}"


def test_link_cut_names_the_unreachable_host_everywhere(cut_results):
    for r, (_, _, out) in enumerate(cut_results):
        other = {2, 3} if r < 2 else {0, 1}
        named = {int(x) for x in re.findall(r"\branks? \[?(\d+)", out)} - {r}
        assert named & other, f"rank {r} names only ranks {sorted(named)} of its own host: {out}"


@pytest.mark.skipif(not LONG, reason="long: GOCL_TEST_LONG=1 (make test-reliability)")
def test_torchrun_two_nodes():
    with netns.two_hosts("t") as hosts:
        env = _env(NCCL_SOCKET_IFNAME=netns.IFNAME, GOCL_DEBUG="INFO", GOCL_DEBUG_SUBSYS="INIT", GOCL_TIMEOUT="60")
        procs = [subprocess.Popen(
            h.cmd([str(BIN / "torchrun"), "--nnodes", "2", "--node-rank", str(k), "--master-addr", hosts[0].addr,
                   "--master-port", str(PORT), "--nproc-per-node", "2", RANK_SCRIPT, "torch"]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k, h in enumerate(hosts)]
        outs = [p.communicate(timeout=240)[0] for p in procs]
    for k, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out
        for r in (2 * k, 2 * k + 1):
            assert f"OK {r}" in out, out
    _check_transports("".join(outs))


@pytest.mark.skipif(not LONG, reason="long: GOCL_TEST_LONG=1 (make test-reliability)")
def test_without_ifname_the_decoy_fails_init():
    """Without GOCL_SOCKET_IFNAME each host picks its decoy (first interface
    up), which the other host cannot reach: init fails on every rank."""
    with netns.two_hosts("d") as hosts:
        procs = _start_ranks(hosts, "collectives", GOCL_TIMEOUT=str(TIMEOUT))
        outs = [p.communicate(timeout=4 * TIMEOUT + 20)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode != 0 and "OK" not in out, f"rank {r}: {out}"
        # host 1's ranks cannot reach the root on host 0's decoy; host 0's ranks wait for them in vain
        why = "10.252.0.1" if r >= 2 else "missing ranks [2 3]"
        assert why in out, f"rank {r} does not say what it could not reach: {out}"


MPIRUN_OK = shutil.which("mpirun") is not None


@pytest.mark.skipif(not MPIRUN_OK, reason="no mpirun (make mpi installs Debian's OpenMPI)")
def test_mpirun_across_two_hosts(tmp_path):
    """One mpirun, 2 hosts x 2 ranks (OpenMPI's daemons started in the other
    namespace by an rsh agent): Communicator.from_env and
    dist.init_process_group("gocl") take mpirun's world with no MASTER_ADDR
    (rank 0's host from mpirun's URI); DDP's losses are gloo's step by step."""
    (tmp_path / "ranks.py").write_text(launched.RANK_PROGRAM)
    (tmp_path / "train.py").write_text(launched.TORCH_PROGRAM)
    env = _env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TMPDIR=str(tmp_path))
    env = {k: v for k, v in env.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_COMM"))}
    ifname = ["-x", f"GOCL_SOCKET_IFNAME={netns.IFNAME}", "-x", f"GLOO_SOCKET_IFNAME={netns.IFNAME}"]

    def run(argv):
        with netns.two_hosts("m") as hosts:
            cmd = netns.mpirun(hosts, 2, [*ifname, sys.executable, *argv], tmp_path)
            r = subprocess.run(hosts[0].cmd(cmd), env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = run([str(tmp_path / "ranks.py")])
    hosts = dict(re.findall(r"OK (\d+) of 4 local \S+ net (\d+)", out))
    assert sorted(hosts) == ["0", "1", "2", "3"], out
    assert hosts["0"] == hosts["1"] != hosts["2"] == hosts["3"], f"ranks 0,1 on one host, 2,3 on the other: {out}"
    losses = {b: launched.losses(run([str(tmp_path / "train.py"), b]), ranks=4) for b in ("gocl", "gloo")}
    assert losses["gocl"] == pytest.approx(losses["gloo"], rel=1e-6), losses


def test_gocl_status_on_host_0_reaches_every_rank(tmp_path):
    """2 hosts x 2 ranks, each host with a status directory of its own:
    `gocl status` on host 0 asks the processes there, and rank 0 asks the
    ranks of host 1 over their bootstrap listeners."""
    status_rank = str(HERE / "status_rank.py")
    with netns.two_hosts("st") as hosts:
        procs = []
        for k, h in enumerate(hosts):
            env = _env(GOCL_SOCKET_IFNAME=netns.IFNAME, GOCL_TIMEOUT="60", GOCL_STATUS_DIR=str(tmp_path / f"st{k}"))
            procs.append(subprocess.Popen(
                h.cmd([str(BIN / "gocl"), "run", "--nnodes", "2", "--node-rank", str(k), "--master-addr",
                       hosts[0].addr, "--master-port", str(PORT), "-n", "2", status_rank, str(tmp_path)]),
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        try:
            end = time.monotonic() + 90
            while not all((tmp_path / f"up-{r}").exists() for r in range(4)):
                assert time.monotonic() < end and all(p.poll() is None for p in procs), [p.poll() for p in procs]
                time.sleep(0.05)
            assert {p.stem for p in (tmp_path / "st0").glob("*.sock")} and len(list((tmp_path / "st0").glob("*.sock"))) == 2
            r = subprocess.run(hosts[0].cmd([str(BIN / "gocl"), "status", "--json", "--dir", str(tmp_path / "st0")]),
                               env=_env(), capture_output=True, text=True, timeout=60)
            doc = json.loads(r.stdout)
            (comm,) = doc["communicators"]
            ranks = comm["ranks"]
            assert [v["rank"] for v in ranks] == [0, 1, 2, 3] and all(v.get("reachable") is not False for v in ranks), doc
            assert [v["addr"] for v in ranks] == [hosts[0].addr] * 2 + [hosts[1].addr] * 2, doc
            assert all(v["nodes"] == 2 for v in ranks), doc
            transports = {(v["rank"], link["peer"]): link["transport"] for v in ranks for link in v["links"]}
            assert transports[(0, 2)] == "socket" and transports[(0, 1)] == "shm", transports
        finally:
            (tmp_path / "stop").write_text("")
            outs = [p.communicate(timeout=90)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
