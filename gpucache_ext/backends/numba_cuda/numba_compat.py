"""Every change gpucache_ext makes to numba-cuda's state, declared in one place.

gpucache_ext compiles with numba-cuda's own pipeline.  In a few places that
pipeline reads process-wide state that would make the same inputs give
different bytes (counters in symbol names, the source file as it is on disk
now) or types a device function from the live dispatcher instead of the
snapshot that was hashed.  Each such place is replaced for the whole
process, and each replacement acts only inside a compile of ours: numba's
own compiles run numba's code unchanged.

`PATCHES` says, for each, what is replaced, numba's signature when it was
checked, and why.  `install` applies them once (a second call changes
nothing), with the replacements `gpucache_ext.backends.numba_cuda.stages` makes from numba's
originals (`gpucache_ext.backends.numba_cuda.stages.install_patches`, on the first compile:
importing gpucache_ext changes nothing of numba's); `original` gives numba's
function back.

Other attributes of numba-cuda are given a value of ours only while
something runs, and numba's own back after: `SWAPS` declares each, with the
context manager (or function) here that makes it.  A ``%%gpukernel`` cell
stands in for ``numba.cuda.jit`` (`jit_replaced`), a compile turns
``CUDA_ENABLE_NRT`` off (`nrt_off`), names shared arrays (`smem_ids_named`)
and numbers what it makes afresh (`numbered_afresh`), the NVRTC program numba
builds is captured (`nvrtc_program_captured`), and the simulator gives
``numba.cuda``'s memory API its own objects without a GPU
(`simulator_memory_api`).  `SETTINGS` declares the one value set for the
process: the libdevice bytes pinned (`pin_libdevice`).  No other module of
gpucache_ext assigns to numba's or llvmlite's state (a test reads them all).

When numba-cuda is upgraded, ``tests/test_numba_compat.py`` fails on any
patched function whose signature changed and on any swapped attribute that is
gone: read the new numba code before changing `CHECKED_AGAINST`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional
from ... import memos

__all__ = ["CHECKED_AGAINST", "PATCHES", "Patch", "install", "installed", "original", "numba_signature",
           "SWAPS", "SETTINGS", "Swap", "MEMORY_API", "jit_replaced", "nrt_off", "smem_ids_named",
           "numbered_afresh", "nvrtc_program_captured", "simulator_memory_api", "pin_libdevice"]

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
          "options, not the live dispatcher (backends.numba_cuda.stages.device._routed)"),
    Patch(f"{_DISPATCHER}.compile_device", "function", "(self, args, return_type=None)",
          "compiling a device function for a call goes to its proxy (backends.numba_cuda.stages.device._routed)"),
    Patch(f"{_DISPATCHER}.get_overload", "function", "(self, sig)",
          "the overload of a device function comes from its proxy; while typing, a key lowering "
          "resolves later (backends.numba_cuda.stages.device._routed)"),
    Patch(f"{_DISPATCHER}.__repr__", "function", "(self)",
          "numba's repr holds the function's address, and repr reaches symbol names and error text: "
          "a number from the source identity instead (stages.numbering._dispatcher_repr)"),
    Patch("numba.cuda.lowering:get_func_def_lineno", "function", "(pyfunc)",
          "the line of `def` in debug info comes from the source that was hashed, not from the file "
          "on disk now (stages.llvm._hashed_def_line)"),
    Patch("numba.cuda.core.bytecode:FunctionIdentity.from_function", "classmethod", "(cls, pyfunc)",
          "a function's unique id, in symbol names and inlined variable names, is numbered by content, "
          "not by a process-wide counter (stages.numbering._numbered_by_content)"),
    Patch("numba.cuda.types:Record.mangling_args", "property", "(self)",
          "a record type is mangled from its key, not its process-wide type number "
          "(stages.numbering._record_mangling)"),
    Patch(f"{_BASE}.insert_const_bytes", "function", "(self, mod, bytes, name=None)",
          "constant byte strings are named from their content, not a counter (stages.numbering._stable_const_bytes)"),
    Patch(f"{_BASE}._compile_subroutine_no_cache", "function",
          "(self, builder, impl, sig, locals=None, flags=None)",
          "a helper compiled on a cache miss is numbered afresh and its target reads are kept "
          "(stages.numbering._fresh_subroutine)"),
    Patch(f"{_BASE}.compile_subroutine", "function",
          "(self, builder, impl, sig, locals=None, flags=None, caching=True)",
          "numba's helper cache is keyed without the lowering context it inherits or the target: "
          "during a compile of ours, helpers are shared by lowerings of the same context state, for "
          "the targets their compile's reads hold for, and a helper found reads the target as its "
          "compile did (stages.numbering._shared_subroutine)"),
    Patch(f"{_INLINE}.run_untyped_passes", "function", "(self, func, enable_ssa=False)",
          "a function inlined in a compile of ours is numbered afresh (stages.numbering._afresh_inside)"),
    Patch(f"{_INLINE}.inline_ir", "function", "(self, caller_ir, block, i, callee_ir, callee_freevars, "
          "arg_typs=None)",
          "an inlined function's identity is numbered by content (stages.numbering._inlined_by_content)"),
)

# target -> numba's original
_installed: Dict[str, Any] = memos.state(
    "backends.numba_cuda.numba_compat._installed", {},
    "numba's originals of the patches installed in this process: what uninstalling puts back")
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


# ---------------------------------------------------------------------------
# Values of ours numba holds for a while


@dataclass(frozen=True)
class Swap:
    """One attribute of numba-cuda given a value of ours (``module:owner.attribute``,
    the owner an object reached from the module), the function here that
    assigns it (the only code that does), and why."""

    target: str
    by: str
    why: str


# numba.cuda's memory and stream API, which needs a GPU; the simulator has its
# own.  (numba-cuda 0.30.4 has no ``numba.cuda.auto_device``: there is nothing to swap.)
MEMORY_API = ("to_device", "device_array", "device_array_like", "pinned_array",
              "pinned_array_like", "mapped_array", "managed_array", "pinned",
              "stream", "default_stream", "legacy_default_stream", "per_thread_default_stream",
              "external_stream", "event", "synchronize",
              "reduce", "Reduce")  # cuda.reduce launches numba's own kernels

_IR_UTILS = "numba.cuda.core.ir_utils"

SWAPS = (
    Swap("numba.cuda:jit", "jit_replaced",
         "while a %%gpukernel cell runs, numba.cuda.jit is the cell's stand-in, which makes kernels "
         "with the cell's flags (gpucache_ext.ipython.cell.CellJit); numba.cuda.decorators.jit stays "
         "numba's: its own wrappers call it"),
    Swap("numba.cuda.core.config:CUDA_ENABLE_NRT", "nrt_off",
         "with NRT on numba adds reference counting to every kernel; the pipeline compiles without it "
         "(compiling is refused while it is on: check_numba_runtime), so it is off during a compile"),
    Swap("numba.cuda.cudaimpl:_get_unique_smem_id", "smem_ids_named",
         "numba names each cuda.shared.array from a process-wide counter; during a lowering, after the "
         "function being lowered (stages.numbering.stable_shared_memory_names)"),
    Swap(f"{_IR_UTILS}:_unique_var_count", "numbered_afresh",
         "the variables numba makes are numbered from a process-wide counter: from 0 in each typing "
         "and lowering of ours"),
    Swap(f"{_IR_UTILS}:_the_max_label._value", "numbered_afresh",
         "the block labels of code numba inlines are numbered from a process-wide counter: from 0 in "
         "each typing and lowering of ours"),
    Swap("numba.cuda.descriptor:cuda_target.target_context.cached_internal_func", "numbered_afresh",
         "numba's helper cache is keyed without the compile's flags or target: one per lowering config "
         "during a compile of ours, where the context's state cannot be read exactly "
         "(stages.numbering._subroutine_cache)"),
    Swap("numba.cuda.cudadrv.nvrtc:Program", "nvrtc_program_captured",
         "numba's nvrtc.compile builds a cuda.core Program, which asks the driver before it returns PTX: "
         "a stand-in takes numba's exact NVRTC options instead (toolchain.linking._CapturedProgram)"),
    *(Swap(f"numba.cuda:{name}", "simulator_memory_api",
           "without a GPU numba.cuda's memory API is the simulator's, so that cells written for a GPU run "
           "on the simulator as written (gpucache_ext.backends.numba_cuda.launch.simulator.simulate_memory)")
      for name in MEMORY_API),
)

SETTINGS = (
    Swap("numba.cuda.cudadrv.nvvm:LibDevice._cache_", "pin_libdevice",
         "numba means LibDevice._cache_ as a process-wide cache, but sets it on the instance, so every "
         "compile reads the file again: the bytes the toolchain hashed are pinned there for the process "
         "(until toolchain.forget), so that a file replaced later cannot be linked under their digest"),
)


_NO_DEFAULT = object()


@contextlib.contextmanager
def _swapped(owner, attribute: str, value, default=_NO_DEFAULT):
    """`owner.attribute` is `value` inside the block, what it was after
    (`default`: what it was where numba has no such attribute)."""
    saved = getattr(owner, attribute) if default is _NO_DEFAULT else getattr(owner, attribute, default)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, saved)


def jit_replaced(jit):
    """``numba.cuda.jit`` is `jit` inside the block, numba's own after."""
    import numba.cuda

    return _swapped(numba.cuda, "jit", jit)


def nrt_off():
    """numba's ``CUDA_ENABLE_NRT`` is False inside the block, as it was after."""
    from numba.cuda.core import config

    return _swapped(config, "CUDA_ENABLE_NRT", False, default=False)


def smem_ids_named(name: Callable[[str], str]):
    """numba names each shared array ``name(prefix)`` inside the block (numba's
    ``cudaimpl._get_unique_smem_id``), from its own counter after."""
    from numba.cuda import cudaimpl

    return _swapped(cudaimpl, "_get_unique_smem_id", name)


def nvrtc_program_captured(program_class):
    """numba's nvrtc module builds `program_class` in place of cuda.core's
    Program inside the block.  A module global: the caller holds a lock, so
    that one capture runs at a time."""
    from numba.cuda.cudadrv import nvrtc

    return _swapped(nvrtc, "Program", program_class)


_numbering_depth = 0  # blocks under way (nested: device functions); under numba's compiler lock
_numbering_high = [0, 0]  # the highest variable and label numbers any of them reached


@contextlib.contextmanager
def numbered_afresh(helper_cache: dict):
    """Inside the block, numba numbers what it makes as if this were the
    process's first compile, and keeps its helpers in `helper_cache`.

    numba numbers the variables it makes (``$20pred.305``,
    numba/cuda/core/ir_utils.py:33-40 ``mk_unique_var``) and the block labels
    of code it inlines (ir_utils.py:43-72 ``_the_max_label``, LLVM's
    ``B<label>``) from counters that live as long as the process, and the
    numbers reach the output.  Here both start at 0.  A nested block gives
    the outer its counters back as they were (so the outer's numbering does
    not depend on whether a device function was typed before); after the
    outermost, numba's counters go on from the highest number reached, so
    numba's own later compiles never reuse one of ours.  numba's helper cache
    (numba/cuda/core/base.py:913-946 ``cached_internal_func``) is `helper_cache`
    inside the block, numba's own after.  Runs under numba's compiler lock
    (the counters are process-wide).
    """
    global _numbering_depth
    from numba.cuda.core import ir_utils
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.target_context
    saved = (ir_utils._unique_var_count, ir_utils._the_max_label._value, context.cached_internal_func)
    ir_utils._unique_var_count = ir_utils._the_max_label._value = 0
    context.cached_internal_func = helper_cache
    _numbering_depth += 1
    try:
        yield
    finally:
        _numbering_depth -= 1
        _numbering_high[0] = max(_numbering_high[0], ir_utils._unique_var_count)
        _numbering_high[1] = max(_numbering_high[1], ir_utils._the_max_label._value)
        ir_utils._unique_var_count, ir_utils._the_max_label._value = saved[:2]
        if not _numbering_depth:
            ir_utils._unique_var_count = max(saved[0], _numbering_high[0])
            ir_utils._the_max_label._value = max(saved[1], _numbering_high[1])
        context.cached_internal_func = saved[2]


# name -> numba's own, while the simulator's is in place
_memory_api_saved: Dict[str, Any] = memos.state(
    "backends.numba_cuda.numba_compat._memory_api_saved", {},
    "numba's own memory functions while the simulator's are in place")


def simulator_memory_api(enable: bool, replacement_for: Optional[Callable[[str], Any]] = None) -> None:
    """Give each name of ``numba.cuda``'s `MEMORY_API` ``replacement_for(name)``
    (a name it gives None is left alone), or numba's own back (`enable` False,
    no `replacement_for`).  Enabling again while enabled changes nothing."""
    import numba.cuda

    if enable and not _memory_api_saved:
        for name in MEMORY_API:
            if not hasattr(numba.cuda, name):
                continue
            replacement = replacement_for(name)
            if replacement is not None:
                _memory_api_saved[name] = getattr(numba.cuda, name)
                setattr(numba.cuda, name, replacement)
    elif not enable:
        for name, numba_own in _memory_api_saved.items():
            setattr(numba.cuda, name, numba_own)
        _memory_api_saved.clear()


def pin_libdevice(data: Optional[bytes]) -> None:
    """numba's ``LibDevice`` hands out `data` as libdevice from now on (None:
    it reads the file again; where numba's nvvm is not imported, nothing was
    pinned and nothing is imported)."""
    if data is None:
        nvvm = sys.modules.get("numba.cuda.cudadrv.nvvm")
        if nvvm is None:
            return
    else:
        from numba.cuda.cudadrv import nvvm
    nvvm.LibDevice._cache_ = data


def swap_target_exists(swap: Swap) -> bool:
    """Whether numba (as installed) still has the attribute `swap` assigns."""
    owner, attribute = _owner(swap.target)
    return hasattr(owner, attribute)


def check_numba_runtime() -> None:
    """Refuse to compile while numba-cuda's CUDA runtime (NRT) is on: numba
    then adds reference counting to every kernel, and the pipeline, which
    compiles without NRT, would give other code than numba's.  (Here, not in
    `stages`: a compile every stage serves from a cache imports no compiler.)"""
    from numba.cuda.core import config as nbconfig

    from ...errors import UnsupportedKernelError

    if getattr(nbconfig, "CUDA_ENABLE_NRT", False):
        raise UnsupportedKernelError(
            "numba-cuda's CUDA runtime (NRT) is on (NUMBA_CUDA_ENABLE_NRT=1 or "
            "numba.cuda.config.CUDA_ENABLE_NRT): gpucache_ext compiles without it, which would "
            "not be the code numba-cuda compiles; turn it off to compile through the cache"
        )
