"""gocl-doctor's Python probe.

gocl-doctor runs this file with the interpreter under examination, once per
section, each in its own process (importing torch initialises CUDA and may
print warnings or hang; a hung section must not take the others with it):

    python - base|torch|jax < probe.py

Each run prints one line "GOCL_DOCTOR_FACTS {json}" on stdout. Anything else
the imports print is ignored. Keep this file runnable on Python 3.8+ and free
of third-party imports at module level.
"""

import json
import os
import re
import sys

MARK = "GOCL_DOCTOR_FACTS "


def emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def norm(name):
    return re.sub(r"[-_.]+", "-", (name or "").lower())


def error_text(e):
    return "%s: %s" % (type(e).__name__, e)


WANTED = {
    "torch", "torchvision", "torchaudio", "triton", "pytorch-triton",
    "jax", "jaxlib", "numpy", "gocl", "cupy-cuda12x", "cupy-cuda13x",
    "flax", "vllm", "deepspeed", "accelerate", "transformers", "lightning", "pytorch-lightning",
}


def distributions():
    try:
        import importlib.metadata as md
    except ImportError:  # Python < 3.8
        return {}
    out = {}
    for d in md.distributions():
        try:
            name = norm(d.metadata["Name"])
        except Exception:
            continue
        if name and name not in out:
            out[name] = d.version
    return out


def base():
    import platform
    py = {
        "executable": sys.executable,
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "prefix": sys.prefix,
        "venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    }
    try:
        import multiprocessing
        py["start_method_default"] = multiprocessing.get_context().get_start_method()
    except Exception as e:
        py["error"] = "multiprocessing: " + error_text(e)
    try:
        import importlib.util
        spec = importlib.util.find_spec("gocl")
        if spec is not None and spec.submodule_search_locations:
            path = list(spec.submodule_search_locations)[0]
            py["gocl_path"] = path
            lib = os.path.join(path, "_native", "libgocl.so")
            py["gocl_native_lib"] = lib if os.path.exists(lib) else ""
            # what `gocl mpi-abi` prints (GOCL_MPIABI_LIB names another build)
            abi = os.environ.get("GOCL_MPIABI_LIB") or os.path.join(path, "_native", "libgocl_mpiabi.so")
            py["gocl_mpi_abi_lib"] = abi if os.path.exists(abi) else ""
    except Exception as e:
        py["error"] = "gocl: " + error_text(e)
    pkgs = {}
    for name, version in distributions().items():
        if name in WANTED or name.startswith("nvidia-") or name.startswith("jax-cuda") or name.startswith("jax-rocm"):
            pkgs[name] = version
    return {"python": py, "packages": pkgs}


def nccl_version(torch):
    v = torch.cuda.nccl.version()
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v[:3])
    v = int(v)
    if v >= 10000:  # NCCL >= 2.9 encodes major*10000 + minor*100 + patch
        return "%d.%d.%d" % (v // 10000, (v % 10000) // 100, v % 100)
    return "%d.%d.%d" % (v // 1000, (v % 1000) // 100, v % 100)


def torch_section():
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return {"missing": "torch is not installed in " + sys.executable}
    import warnings
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch
        except BaseException as e:
            return {"torch": {"error": error_text(e)}}
        out["version"] = torch.__version__
        out["cuda"] = torch.version.cuda or ""
        if out["cuda"]:
            arch = []
            try:
                arch = torch.cuda.get_arch_list()
            except Exception:
                pass
            if not arch:  # get_arch_list() is [] when no device is usable
                try:
                    flags = torch._C._cuda_getArchFlags()
                    arch = flags.split() if flags else []
                except Exception:
                    pass
            out["arch_list"] = arch
            try:
                out["nccl_version"] = nccl_version(torch)
            except Exception:
                pass
            try:
                v = torch.backends.cudnn.version()
                if v:
                    out["cudnn_version"] = int(v)
            except Exception:
                pass
            errors = []
            try:
                out["cuda_available"] = bool(torch.cuda.is_available())
                devices = []
                for i in range(torch.cuda.device_count()):
                    major, minor = torch.cuda.get_device_capability(i)
                    devices.append({"index": i, "name": torch.cuda.get_device_name(i),
                                    "compute_capability": "%d.%d" % (major, minor)})
                out["devices"] = devices
            except BaseException as e:
                errors.append(error_text(e))
            if errors:
                out["error"] = "; ".join(errors)
    msgs = []
    for w in caught:
        text = str(w.message).strip()
        if text and text not in msgs:
            msgs.append(text)
    if msgs:
        out["warnings"] = msgs[:10]
    return {"torch": out}


def jax_section():
    import importlib.util
    if importlib.util.find_spec("jax") is None:
        return {"missing": "jax is not installed in " + sys.executable}
    dists = distributions()
    out = {"plugins": {}}
    if "jaxlib" in dists:
        out["jaxlib"] = dists["jaxlib"]
    for name, version in dists.items():
        if name.startswith("jax-cuda") or name.startswith("jax-rocm"):
            out["plugins"][name] = version
    try:
        import jax
    except BaseException as e:
        out["error"] = error_text(e)
        return {"jax": out}
    out["jax"] = jax.__version__
    try:
        out["backend"] = jax.default_backend()
        devices = []
        for d in jax.devices():
            entry = {"id": int(d.id), "platform": d.platform, "kind": getattr(d, "device_kind", "")}
            cc = getattr(d, "compute_capability", None)
            if cc:
                entry["compute_capability"] = str(cc)
            devices.append(entry)
        out["devices"] = devices
    except BaseException as e:
        out["error"] = error_text(e)
    return {"jax": out}


SECTIONS = {"base": base, "torch": torch_section, "jax": jax_section}

if __name__ == "__main__":
    section = sys.argv[1] if len(sys.argv) > 1 else "base"
    try:
        result = SECTIONS[section]()
    except BaseException as e:  # the probe itself must never die silently
        result = {"probe_error": error_text(e)}
    emit(result)
