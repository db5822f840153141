"""Call identity for gocl.jax: every gocl call in a compiled program carries
a site of its own, equal on every rank.

A call's site is first fixed when it is traced (``trace_site``): its line of
user code and its position among the calls traced from that line in the same
trace. That is not enough on its own: JAX traces a jitted helper once and
lowers it to one function, which every caller then calls, and XLA inlines
every call. A helper used eight times in a step, or by two programs, gives
eight (or two) custom calls with one site, which XLA:CPU runs in another
order on each rank. So before XLA compiles a module, ``make_unique`` gives
each function that holds a gocl call one caller (cloning it for the others)
and re-numbers every gocl call from its place in the program: the module's
name, the source position of each call on the way from ``main`` to it, its
traced site, and its rank among the calls with those in program order. None
of that depends on the order in which programs were traced or compiled, on
threads, or on constants that differ between ranks; the lanes (jaxffi/)
count executions per site.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
import sys
import threading
import weakref

from jax._src.lib.mlir import ir

_TARGET_PREFIX = "gocl_"
_DONE = "gocl.sites"  # module attribute: already re-numbered (a module compiled twice keeps its sites)
_lock = threading.Lock()


def digest(*parts) -> int:
    """A positive int64 from parts, equal in every process (no hash seed)."""
    d = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") & ((1 << 63) - 1)


# ------------------------------------------------------------ trace time

def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are not the user's call site: jax, jaxlib,
    numpy, gocl, and the standard library, but not site-packages below it
    (a conda or system Python puts site-packages under the standard
    library's directory)."""
    import jax
    import jaxlib
    import numpy
    dirs = [os.path.dirname(m.__file__) for m in (jax, jaxlib, numpy, sys.modules[__package__])]
    return tuple(os.path.join(d, "") for d in dirs)


_LIBRARY = _library_dirs()
_STDLIB = os.path.join(os.path.dirname(os.__file__), "")
_PACKAGES = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _internal(filename: str) -> bool:
    if filename.startswith(_LIBRARY):
        return True
    if filename.startswith(_STDLIB):
        return not any(p in filename[len(_STDLIB) - 1:] for p in _PACKAGES)
    return filename.startswith("<frozen ")


def user_frame(frame):
    """The innermost frame outside gocl, JAX, numpy and the standard library."""
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def where(frame) -> tuple[str, str, str, int]:
    """A frame's place, the same on every host: module, file name (no
    directory), function, line."""
    if frame is None:
        return ("", "", "", 0)
    code = frame.f_code
    return (frame.f_globals.get("__name__", ""), os.path.basename(code.co_filename),
            getattr(code, "co_qualname", code.co_name), frame.f_lineno)


def _column(frame) -> int:
    """The column of the frame's current instruction (0 where Python does
    not record columns)."""
    try:
        pos = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None), None)
    except AttributeError:  # before Python 3.11: lines only
        return 0
    return (pos[2] or 0) if pos else 0


def user_chain(frame) -> tuple:
    """The places (with columns) of the user's frames from the call up to
    the first frame of JAX or the standard library above it: the call's
    path inside the traced function. Two lambdas on one line that call one
    helper differ by it; who called the jitted function does not enter."""
    chain = []
    frame = user_frame(frame)
    while frame is not None and not _internal(frame.f_code.co_filename) and len(chain) < 32:
        chain.append(where(frame) + (_column(frame),))
        frame = frame.f_back
    return tuple(chain)


_per_trace: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_per_trace_fallback: dict = {}


def _current_trace():
    """JAX's innermost trace (a jaxpr being built), or None outside one."""
    try:
        from jax._src import core
        t = core.trace_ctx.trace
    except (ImportError, AttributeError):  # pragma: no cover - a JAX without trace_ctx
        return None
    return None if isinstance(t, core.EvalTrace) else t


_SRC = re.compile(r"^(.*) at (.*):(\d+)$")


def _traced_function(t) -> str:
    """The function whose trace t is (or is inside): "name at file:line",
    without directories; "" when JAX does not say."""
    while t is not None:
        info = getattr(getattr(t, "frame", None), "debug_info", None)
        src = getattr(info, "func_src_info", None)
        if src:
            m = _SRC.match(src)
            return f"{m.group(1)} at {os.path.basename(m.group(2))}:{m.group(3)}" if m else src
        t = getattr(t, "parent_trace", None)
    return ""


def trace_site(frame) -> tuple[int, str]:
    """The site of a gocl call made from frame, and a description of it for
    error sentences: the function being traced (two jitted programs that
    share a plain Python helper differ by it), the call's line of user code,
    and its place among the calls from that line in the same trace. Calls
    are numbered within the trace that makes them, so a trace that happens
    on one rank only (``eval_shape``, a ``.lower``, a weak-type retrace) or
    in another order (threads) does not shift the others. Outside a trace
    (a call run eagerly) the number is 0: such calls run one at a time, in
    program order."""
    chain = user_chain(frame)
    place = chain[0][:4] if chain else where(None)
    t = _current_trace()
    traced = _traced_function(t)
    with _lock:
        if t is None:
            k = 0
        else:
            try:
                counts = _per_trace.setdefault(t, {})
            except TypeError:  # pragma: no cover - a trace that takes no weak reference
                counts = _per_trace_fallback
            k = counts.get(chain, 0)
            counts[chain] = k + 1
    module, file, func, line = place
    name = f"{file}:{line} in {func}" if file else "an unknown place"
    if k:
        name += f" (call {k + 1} traced from that line)"
    if traced:
        name += f", traced for {traced}"
    return digest("site", traced, chain, k), name


# ------------------------------------------------------------ compile time

def _ops(op):
    """The operations nested in op, depth first, in program order."""
    for region in op.regions:
        for block in region:
            for child in block:
                child = child.operation
                yield child
                yield from _ops(child)


def _is_gocl(op) -> bool:
    return (op.name == "stablehlo.custom_call" and "call_target_name" in op.attributes
            and ir.StringAttr(op.attributes["call_target_name"]).value.startswith(_TARGET_PREFIX))


_FILE_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')


def _place(op) -> str:
    """Where op was traced: the innermost frame of its location (the line
    inside the traced function), without directories; "" when unknown. The
    outer frames (who called the jitted function) may differ by rank."""
    m = _FILE_LOC.search(str(op.location))
    return f"{os.path.basename(m.group(1))}:{m.group(2)}:{m.group(3)}" if m else ""


def make_unique(module, name_site=None) -> int:
    """Re-number the gocl calls of module (an MLIR module about to be
    compiled) in place, as the module docstring says; name_site(new, old,
    note) is told each new site. Returns the number of gocl calls."""
    with module.context:
        attrs = module.operation.attributes
        if _DONE in attrs:
            return 0
        funcs = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
        # Which functions hold a gocl call, themselves or through calls.
        direct, calls = {}, {}
        for name, f in funcs.items():
            direct[name] = False
            calls[name] = set()
            for op in _ops(f):
                if _is_gocl(op):
                    direct[name] = True
                elif op.name == "func.call":
                    calls[name].add(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        holds = {n for n, d in direct.items() if d}
        grew = True
        while grew:
            grew = False
            for n, cs in calls.items():
                if n not in holds and cs & holds:
                    holds.add(n)
                    grew = True
        if not holds:
            return 0
        module_name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
        called = set().union(*calls.values())
        roots = ["main"] if "main" in funcs else sorted(n for n in funcs if n not in called)
        # First give every function that holds a gocl call one caller: a
        # function called again (a helper used twice) is copied for the
        # later call. Then number the calls, their sites still as traced.
        claimed: set[str] = set(roots)

        def separate(f):
            for op in _ops(f):
                if op.name != "func.call":
                    continue
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee not in holds:
                    continue
                if callee in claimed:
                    k = 1
                    while f"{callee}.gocl{k}" in funcs:
                        k += 1
                    clone = funcs[callee].clone(ip=ir.InsertionPoint(module.body))
                    callee = f"{callee}.gocl{k}"
                    clone.attributes["sym_name"] = ir.StringAttr.get(callee)
                    clone.attributes["sym_visibility"] = ir.StringAttr.get("private")
                    funcs[callee] = clone
                    holds.add(callee)
                    op.attributes["callee"] = ir.FlatSymbolRefAttr.get(callee)
                claimed.add(callee)
                separate(funcs[callee])

        seen: dict[tuple, int] = {}
        i64 = ir.IntegerType.get_signless(64)
        count = 0

        def number(f, path):
            nonlocal count
            for op in _ops(f):
                if op.name == "func.call":
                    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                    if callee in holds:
                        number(funcs[callee], path + (_place(op),))
                    continue
                if not _is_gocl(op) or "mhlo.backend_config" not in op.attributes:
                    continue
                cfg = ir.DictAttr(op.attributes["mhlo.backend_config"])
                entries = {cfg[i].name: cfg[i].attr for i in range(len(cfg))}
                if "site" not in entries:
                    continue
                old = ir.IntegerAttr(entries["site"]).value
                n = seen.get((path, old), 0)
                seen[(path, old)] = n + 1
                new = digest("instance", module_name, path, old, n)
                entries["site"] = ir.IntegerAttr.get(i64, new)
                op.attributes["mhlo.backend_config"] = ir.DictAttr.get(entries)
                count += 1
                if name_site is not None:
                    via = " > ".join(p for p in path if p)
                    name_site(new, old, f"in {module_name}" + (f", called from {via}" if via else "")
                              + (f", its call {n + 1} there" if n else ""))

        for r in roots:
            separate(funcs[r])
        for r in roots:
            number(funcs[r], ())
        attrs[_DONE] = ir.UnitAttr.get()
        return count


def install(name_site=None) -> None:
    """Re-number gocl calls in every module JAX compiles from now on (jit,
    pmap, ``.lower().compile()``, the persistent cache: all go through
    ``jax._src.compiler.compile_or_get_cached``)."""
    try:
        from jax._src import compiler
        current = compiler.compile_or_get_cached
    except (ImportError, AttributeError) as e:
        import jax
        raise ImportError(
            f"gocl.jax needs JAX's compile step (jax._src.compiler.compile_or_get_cached) to give every collective "
            f"a call site of its own, and jax {jax.__version__} has none ({e}): use a jax this gocl was tested with "
            "(0.5 to 0.12), or report it") from e
    if getattr(current, "_gocl_sites", False):
        return

    @functools.wraps(current)
    def compile_or_get_cached(backend, computation, *args, **kwargs):
        make_unique(computation, name_site)
        return current(backend, computation, *args, **kwargs)

    compile_or_get_cached._gocl_sites = True
    compiler.compile_or_get_cached = compile_or_get_cached
