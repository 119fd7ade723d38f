"""Every change gpucache_ext makes to numba-cuda itself, declared in one place.

gpucache_ext compiles with numba-cuda's own pipeline.  In a few places that
pipeline reads process-wide state that would make the same inputs give
different bytes (counters in symbol names, the source file as it is on disk
now) or types a device function from the live dispatcher instead of the
snapshot that was hashed.  Each such place is replaced for the whole
process, and each replacement acts only inside a compile of ours: numba's
own compiles run numba's code unchanged.

`PATCHES` says, for each, what is replaced, numba's signature when it was
checked, and why.  `install` applies them once (a second call changes
nothing), with the replacements `gpucache_ext.stages` makes from numba's
originals; `original` gives numba's function back.  When numba-cuda is
upgraded, ``tests/test_numba_compat.py`` fails on any patched function whose
signature changed: read the new numba code before changing `CHECKED_AGAINST`.

Temporary swaps, made only while something runs and undone after, are not
patches of numba's code and live where they are used: a ``%%gpukernel`` cell
stands in for ``numba.cuda.jit`` (`gpucache_ext.ipython.cell`), the simulator
gives ``numba.cuda``'s memory API its own objects without a GPU
(`gpucache_ext.launch.simulator.simulate_memory`), the NVRTC program numba builds
is captured (`gpucache_ext.toolchain.linking`), and ``CUDA_ENABLE_NRT`` is off during a
compile (`gpucache_ext.stages`).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping

__all__ = ["CHECKED_AGAINST", "PATCHES", "Patch", "install", "installed", "original", "numba_signature"]

CHECKED_AGAINST = {"numba-cuda": "0.30.4", "numba": "0.68.1"}


@dataclass(frozen=True)
class Patch:
    """One replaced attribute of numba-cuda: ``module:Owner.attribute`` (or
    ``module:function``), how it is stored (a function or method, a
    classmethod, a property), numba's signature when checked, and why."""

    target: str
    kind: str
    signature: str
    why: str


_DISPATCHER = "numba.cuda.dispatcher:CUDADispatcher"
_BASE = "numba.cuda.core.base:BaseContext"
_INLINE = "numba.cuda.core.inline_closurecall:InlineWorker"

PATCHES = (
    Patch(f"{_DISPATCHER}.get_call_template", "function", "(self, args, kws)",
          "a call to a device function is typed by its proxy: the snapshot's function with its own "
          "options, not the live dispatcher (stages._routed)"),
    Patch(f"{_DISPATCHER}.compile_device", "function", "(self, args, return_type=None)",
          "compiling a device function for a call goes to its proxy (stages._routed)"),
    Patch(f"{_DISPATCHER}.get_overload", "function", "(self, sig)",
          "the overload of a device function comes from its proxy; while typing, a key lowering "
          "resolves later (stages._routed)"),
    Patch(f"{_DISPATCHER}.__repr__", "function", "(self)",
          "numba's repr holds the function's address, and repr reaches symbol names and error text: "
          "a number from the source identity instead (stages._dispatcher_repr)"),
    Patch("numba.cuda.lowering:get_func_def_lineno", "function", "(pyfunc)",
          "the line of `def` in debug info comes from the source that was hashed, not from the file "
          "on disk now (stages._hashed_def_line)"),
    Patch("numba.cuda.core.bytecode:FunctionIdentity.from_function", "classmethod", "(cls, pyfunc)",
          "a function's unique id, in symbol names and inlined variable names, is numbered by content, "
          "not by a process-wide counter (stages._numbered_by_content)"),
    Patch("numba.cuda.types:Record.mangling_args", "property", "(self)",
          "a record type is mangled from its key, not its process-wide type number "
          "(stages._record_mangling)"),
    Patch(f"{_BASE}.insert_const_bytes", "function", "(self, mod, bytes, name=None)",
          "constant byte strings are named from their content, not a counter (stages._stable_const_bytes)"),
    Patch(f"{_BASE}._compile_subroutine_no_cache", "function",
          "(self, builder, impl, sig, locals=None, flags=None)",
          "a helper compiled on a cache miss is numbered afresh and its target reads are kept "
          "(stages._fresh_subroutine)"),
    Patch(f"{_BASE}.compile_subroutine", "function",
          "(self, builder, impl, sig, locals=None, flags=None, caching=True)",
          "a helper found in numba's cache reads the target as its compile did (stages._replayed_subroutine)"),
    Patch(f"{_INLINE}.run_untyped_passes", "function", "(self, func, enable_ssa=False)",
          "a function inlined in a compile of ours is numbered afresh (stages._afresh_inside)"),
    Patch(f"{_INLINE}.inline_ir", "function", "(self, caller_ir, block, i, callee_ir, callee_freevars, "
          "arg_typs=None)",
          "an inlined function's identity is numbered by content (stages._inlined_by_content)"),
)

_installed: Dict[str, Any] = {}  # target -> numba's original
_lock = threading.Lock()


def _owner(target: str):
    module_name, _, path = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, attribute = path.split(".")
    for name in parents:
        owner = getattr(owner, name)
    return owner, attribute


def _unwrap(raw, kind: str):
    if kind == "classmethod":
        return raw.__func__
    if kind == "property":
        return raw.fget
    return raw


def numba_signature(target: str) -> str:
    """The signature of numba's function at `target` now (installed or not)."""
    return str(inspect.signature(original(target)))


def install(replacements: Mapping[str, Callable[[Any], Any]]) -> None:
    """Apply every patch not applied yet: ``replacements[target](numba's
    original)`` is what numba gets in its place."""
    missing = {p.target for p in PATCHES} - set(replacements)
    if missing:
        raise ValueError(f"no replacement given for {', '.join(sorted(missing))}")
    with _lock:
        for patch in PATCHES:
            if patch.target in _installed:
                continue
            owner, attribute = _owner(patch.target)
            numba_original = _unwrap(inspect.getattr_static(owner, attribute), patch.kind)
            made = replacements[patch.target](numba_original)
            if patch.kind == "classmethod":
                made = classmethod(made)
            elif patch.kind == "property":
                made = property(made)
            setattr(owner, attribute, made)
            _installed[patch.target] = numba_original


def installed() -> Dict[str, Any]:
    """What is patched: target -> numba's original."""
    return dict(_installed)


def original(target: str):
    """numba's own function at `target` (for code that must call it around the patch)."""
    try:
        return _installed[target]
    except KeyError:
        owner, attribute = _owner(target)
        patch = next(p for p in PATCHES if p.target == target)
        return _unwrap(inspect.getattr_static(owner, attribute), patch.kind)
