"""gocl.tools.doctor and gocl.env over the gocl-doctor executable.

Needs the executable: python/gocl/_native/gocl-doctor (built with the
package) or $GOCL_DOCTOR; without it every test here is skipped. Fixtures
are the Go tests' facts files in doctor/testdata/.

GOCL_DOCTOR_TEST_PYTHONS (paths separated by ':') adds interpreters to the
real-torch test, e.g. a venv with torch 2.7.1+cu126.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from gocl import env
from gocl.tools import doctor

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO / "doctor" / "testdata"

pytestmark = pytest.mark.skipif(
    not doctor.binary_path().is_file(),
    reason=f"gocl-doctor is not built ({doctor.binary_path()} missing): "
           f"go build -o python/gocl/_native/gocl-doctor ./cmd/gocl-doctor, or set GOCL_DOCTOR")


def fixture(name: str) -> str:
    return str(TESTDATA / name)


def test_recommended_p2p_over_iommu():
    # RTX PRO 6000 pair, NVML reports P2P, the IOMMU translates DMA.
    assert env.recommended(facts=fixture("rtxpro6000-pair-p2p-iommu.json")) == {
        "GOCL_P2P_DISABLE": "0",
        "NCCL_P2P_DISABLE": "1",
    }


def test_recommended_merges_flags_and_keeps_user_settings(tmp_path):
    rec = env.recommended(facts=fixture("rtx5090-pair-geforce-jax.json"))
    assert rec == {
        "NCCL_SOCKET_IFNAME": "lo",
        # The user's own XLA_FLAGS stay, the autotune level is added.
        "XLA_FLAGS": "--xla_dump_to=/tmp/xla --xla_gpu_autotune_level=0",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    # A variable the user set explicitly is theirs, unless asked otherwise.
    facts = json.loads(Path(fixture("rtx5090-pair-geforce-jax.json")).read_text())
    facts["env"]["NCCL_SOCKET_IFNAME"] = "eth0"
    saved = tmp_path / "facts.json"
    saved.write_text(json.dumps(facts))
    assert "NCCL_SOCKET_IFNAME" not in env.recommended(facts=saved)
    assert env.recommended(facts=saved, keep_user=False)["NCCL_SOCKET_IFNAME"] == "lo"


def test_recommended_without_gpu_is_empty():
    assert env.recommended(facts=fixture("no-gpu.json")) == {}
    assert env.recommended(facts=fixture("h100-torch-cu126.json")) == {}


def test_recommended_accepts_a_report():
    report = doctor.report(facts=fixture("rtxpro6000-pair-p2p-iommu.json"))
    assert env.recommended(report)["NCCL_P2P_DISABLE"] == "1"


def test_apply_sets_os_environ(monkeypatch):
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    monkeypatch.delenv("GOCL_P2P_DISABLE", raising=False)
    got = env.apply(facts=fixture("rtxpro6000-pair-p2p-iommu.json"))
    assert got["NCCL_P2P_DISABLE"] == "1" and os.environ["NCCL_P2P_DISABLE"] == "1"


def test_report_schema():
    r = doctor.report(facts=fixture("rtx5090-torch271-cu126.json"))
    assert r["schema"] == "gocl-doctor/1"
    assert set(r) >= {"facts", "findings", "checks", "recommended_env"}
    gpu = r["facts"]["gpus"][0]
    assert (gpu["index"], gpu["name"], gpu["compute_capability"]) == (0, "NVIDIA GeForce RTX 5090", "12.0")
    assert r["facts"]["torch"]["arch_list"][-1] == "sm_90"
    for f in r["findings"]:
        assert f["severity"] in ("error", "warning", "info")
        assert f["id"] and f["message"] and f["fix"]
    arch = next(f for f in r["findings"] if f["id"] == "torch-arch-unsupported")
    assert arch["severity"] == "error"
    assert '"torch==2.7.1+cu128"' in arch["fix"] and "uv pip install" in arch["fix"]


def test_main_exit_codes(capfd):
    assert doctor.main(["--facts", fixture("rtx5090-torch271-cu126.json"), "--no-color"]) == 1
    out = capfd.readouterr().out
    assert "torch-arch-unsupported" in out and "Verdict: 1 error(s)" in out
    assert doctor.main(["--facts", fixture("h100-torch-cu126.json")]) == 0
    capfd.readouterr()
    assert doctor.main(["--facts", "/nonexistent/facts.json"]) == 2
    assert "nonexistent" in capfd.readouterr().err


@pytest.fixture(scope="module")
def this_machine(tmp_path_factory):
    """One real run, `gocl doctor --json` through doctor.main (this interpreter's
    torch/JAX, this machine's NVML or none): (exit code, report). The probes
    import torch and JAX (about 10 s of CPU), so the tests below share it."""
    out = tmp_path_factory.mktemp("doctor") / "stdout.json"
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(out, "wb") as f:
            os.dup2(f.fileno(), 1)  # main's gocl-doctor writes straight to fd 1
            code = doctor.main(["--json"])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return code, json.loads(out.read_text())


def test_main_on_this_machine(this_machine):
    """The real run: this interpreter's torch/JAX, this machine's NVML (or none)."""
    code, r = this_machine
    assert code in (0, 1)
    facts = r["facts"]
    assert Path(facts["python"]["executable"]).resolve() == Path(sys.executable).resolve()
    assert facts["go_runtimes"]["pid"] == os.getpid()
    if facts["nvml"]["status"] == "ERROR_LIBRARY_NOT_FOUND":  # no driver here
        assert code == 0
        assert "nvml-missing" in [f["id"] for f in r["findings"]]


def _runs_on_sm120(arch_list):
    for a in arch_list:
        kind, _, num = a.partition("_")
        num = num.rstrip("af")
        if not num.isdigit():
            continue
        major, minor = int(num) // 10, int(num) % 10
        if kind == "sm" and major == 12 and minor == 0:
            return True
        if kind == "compute" and not a.endswith("a") and (major, minor) <= (12, 0):
            return True
    return False


def _pythons():
    pys = [sys.executable] + [p for p in os.environ.get("GOCL_DOCTOR_TEST_PYTHONS", "").split(":") if p]
    return pys


@pytest.mark.parametrize("python", _pythons())
def test_real_torch_on_a_grafted_rtx5090(python, tmp_path, request):
    """Real torch facts from an interpreter, an RTX 5090 added: the verdict
    must follow the real arch list (error exactly when it lacks sm_120).
    This interpreter's facts come from the this_machine run."""
    if python == sys.executable and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this interpreter")
    r = request.getfixturevalue("this_machine")[1] if python == sys.executable else doctor.report(python=python)
    torch = r["facts"].get("torch")
    if not torch or not torch.get("cuda") or not torch.get("arch_list"):
        pytest.skip(f"no CUDA build of torch in {python}: {r['facts'].get('missing', {}).get('torch')}")
    facts = r["facts"]
    facts["nvml"] = {"status": "ok"}
    facts["driver_version"], facts["cuda_driver_version"] = "580.82.07", 13000
    facts["gpus"] = [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0", "source": "nvml"}]
    saved = tmp_path / "grafted.json"
    saved.write_text(json.dumps({"facts": facts}))
    judged = doctor.report(facts=saved)
    ids = [f["id"] for f in judged["findings"]]
    assert ("torch-arch-unsupported" in ids) == (not _runs_on_sm120(torch["arch_list"])), (torch["version"], ids)


def test_missing_executable(monkeypatch, capsys):
    monkeypatch.setenv("GOCL_DOCTOR", "/nonexistent/gocl-doctor")
    assert doctor.main([]) == 2
    assert "GOCL_DOCTOR" in capsys.readouterr().err
    with pytest.raises(doctor.DoctorNotFound):
        env.recommended()


def test_env_module_prints_exports(capsys):
    assert env.main(["--facts", fixture("rtx5090-pair-geforce-jax.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "export XLA_FLAGS='--xla_dump_to=/tmp/xla --xla_gpu_autotune_level=0'" in out
    assert "export NCCL_SOCKET_IFNAME=lo" in out


def _collectives(r):
    verdict = next(v for v in r["checks"] if v["check"] == "jax-collectives")
    return verdict, [f for f in r["findings"] if f["check"] == "jax-collectives"]


def test_jax_collectives_on_this_machine(this_machine):
    """Which CPU collectives this environment's JAX would use: gloo unless
    JAX_CPU_COLLECTIVES_IMPLEMENTATION says otherwise, with the switch."""
    r = this_machine[1]
    verdict, found = _collectives(r)
    if r["facts"].get("jax", {}).get("jax") is None:
        assert verdict["status"] == "skip", verdict
        return
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "gloo") == "gloo" and "MPITRAMPOLINE_LIB" not in os.environ:
        assert [f["id"] for f in found] == ["jax-collectives-gloo"], found
        assert "export JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi MPITRAMPOLINE_LIB=$(gocl mpi-abi)" in found[0]["fix"]
        assert "gocl run" in found[0]["fix"]


def test_jax_collectives_over_gocls_mpi_abi(monkeypatch):
    """The environment `gocl run` gives its ranks: the check names gocl's
    MPI ABI, read from the library itself; without the library, an error."""
    pytest.importorskip("jax")
    from gocl.tools.launcher import mpi_abi_path

    lib = mpi_abi_path()
    if not lib.is_file():
        pytest.skip(f"{lib} not built (make venv)")
    monkeypatch.setenv("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi")
    monkeypatch.setenv("MPITRAMPOLINE_LIB", str(lib))
    r = doctor.report()
    assert r["facts"]["mpi_library"] == {"path": str(lib), "exists": True, "mpi_abi": True, "gocl": True}
    assert r["facts"]["python"]["gocl_mpi_abi_lib"] == str(lib)
    verdict, found = _collectives(r)
    assert verdict["status"] == "pass" and verdict["detail"] == f"gocl's MPI ABI ({lib})" and not found, (verdict, found)


@pytest.mark.parametrize("change, rule", [
    ({"MPITRAMPOLINE_LIB": None}, "jax-collectives-mpi-no-lib"),
    ({"MPITRAMPOLINE_LIB": "/opt/mpiwrapper/lib/libmpiwrapper.so"}, "jax-collectives-other-mpi"),
    ({"JAX_CPU_COLLECTIVES_IMPLEMENTATION": None, "MPITRAMPOLINE_LIB": None}, "jax-collectives-gloo"),
])
def test_jax_collectives_judged_from_saved_facts(tmp_path, change, rule):
    facts = json.loads(Path(fixture("cpu-jax-gocl-mpi-abi.json")).read_text())["facts"]
    for k, v in change.items():
        if v is None:
            facts["env"].pop(k)
        else:
            facts["env"][k] = v
    if "MPITRAMPOLINE_LIB" in facts["env"]:
        facts["mpi_library"] = {"path": facts["env"]["MPITRAMPOLINE_LIB"], "exists": True, "mpi_abi": True}
    else:
        facts.pop("mpi_library")
    saved = tmp_path / "facts.json"
    saved.write_text(json.dumps({"facts": facts}))
    r = doctor.report(facts=saved)
    assert [f["id"] for f in _collectives(r)[1]] == [rule]
    assert ("jax-collectives-mpi-no-lib" == rule) == any(f["severity"] == "error" for f in r["findings"])
