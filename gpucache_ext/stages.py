"""The four compile stages, each callable on its own, all without a GPU.

    typing  Python function + argument types -> typed numba IR   (numba-cuda)
    llvm    typed IR + lowering fields      -> NVVM IR text     (numba-cuda)
    ptx     NVVM IR + NVVM options + arch   -> PTX / LTO-IR     (libNVVM)
    cubin   PTX + link options + sm         -> cubin            (nvJitLink)

numba-cuda runs typing and lowering as one pipeline; here they are split, so a
change of a lowering-only field lowers the cached typed IR again instead of
re-typing.  The target is always passed explicitly.

Two things numba-cuda would otherwise do behind the token's back are handled
here:

* Reads of the target.  Lowering reads the compute capability for a few
  operations only.  `_TrackedFlags` records every read, so the pipeline knows
  whether an artifact is valid for every target or only for the one it was
  built for.
* Process-wide counters.  numba numbers functions and shared arrays from
  global counters that end up in symbol names; here both are derived from the
  source identity, so equal inputs give byte-identical outputs.
* Device functions.  numba compiles a called ``@cuda.jit(device=True)``
  function for the current GPU (failing without one) and caches it by argument
  types alone.  `DeviceProxy` replaces it: it types the device function once
  and lowers it for the calling kernel's target, with the device function's
  own options (fastmath, debug, lineinfo, forceinline, inline), as numba does.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import itertools
import linecache
import logging
import os
import re
import threading
import types as pytypes
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from numba.cuda import types as nbtypes
from numba.cuda import typing as nbtyping
# (numba's lowering implementations load with the pipeline: a numba-cuda that cannot load
# them fails at this import, which says its cause)
from numba.cuda import cudaimpl  # noqa: F401
from numba.cuda import utils as nbutils
from numba.cuda.compiler import (
    CUDACompiler,
    CUDATranslateBytecode,
    DefaultPassBuilder,
    kernel_fixup,
)
from numba.cuda.core.base import OverloadSelector
from numba.cuda.core import ir as nbir
from numba.cuda.core import sigutils
from numba.cuda.core.bytecode import FunctionIdentity
from numba.cuda.core.compiler import _EarlyPipelineCompletion
from numba.cuda.core.untyped_passes import ExtractByteCode
from numba.cuda.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.cuda.core.untyped_passes import TranslateByteCode
from numba.cuda.cudadrv import nvvm
from numba.cuda.descriptor import cuda_target
from numba.cuda.codegen import ExternalCodeLibrary
from numba.cuda.dispatcher import CUDADispatcher
from numba.cuda.flags import CUDAFlags

from .toolchain import linking
from . import numba_compat, targets, tokens
from .locks import compiler_lock
from .artifacts import CubinArtifact, LLVMArtifact, PTXArtifact  # noqa: F401  (re-exported)
from .config import CompileConfig
from .errors import CompileError, UnsupportedKernelError
from .options import device_options

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# numba flags


class _TrackedFlags(CUDAFlags):
    """CUDAFlags whose compute_capability records what is asked of it (see
    `targets`), and which keep it out of numba's mangled names (so IR built
    for one target can serve another)."""

    def values(self):
        # numba logs every option before each pass: not a read by the compiler.
        return {name: self._values.get(name, option.default) for name, option in self.options.items()}

    def _summary_args(self):
        return [
            (name, value)
            for name, value in sorted(self._values.items())
            if name != "compute_capability" and self.options[name].default != value
        ]


def _read_cc(self):
    value = self._values.get("compute_capability")
    return None if value is None else targets.TrackedCC(value)


def _write_cc(self, value):
    self._values["compute_capability"] = tuple(value)


_TrackedFlags.compute_capability = property(_read_cc, _write_cc)


def check_numba_runtime() -> None:
    """Refuse to compile while numba-cuda's CUDA runtime (NRT) is on: numba
    then adds reference counting to every kernel, and the pipeline, which
    compiles without NRT, would give other code than numba's."""
    from numba.cuda.core import config as nbconfig

    if getattr(nbconfig, "CUDA_ENABLE_NRT", False):
        raise UnsupportedKernelError(
            "numba-cuda's CUDA runtime (NRT) is on (NUMBA_CUDA_ENABLE_NRT=1 or "
            "numba.cuda.config.CUDA_ENABLE_NRT): gpucache_ext compiles without it, which would "
            "not be the code numba-cuda compiles; turn it off to compile through the cache"
        )


def _typing_flags(config: CompileConfig) -> _TrackedFlags:
    """numba flags for typing: the target only (typed IR serves every config)."""
    flags = _TrackedFlags()
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.inline = "never"
    flags.error_model = "numpy"
    flags.compute_capability = config.cc
    return flags


def _lowering_flags(config: CompileConfig) -> _TrackedFlags:
    """numba flags for lowering: the target and the fields lowering reads."""
    flags = _typing_flags(config)
    if config.debug or config.lineinfo:
        flags.debuginfo = True
    if config.lineinfo:
        flags.dbg_directives_only = True
    if config.debug:
        flags.error_model = "python"
        flags.dbg_extend_lifetimes = True
        flags.nvvm_options = {"g": None}
    if config.fastmath:
        flags.fastmath = True
    return flags


@contextlib.contextmanager
def _numba_compiling():
    """numba's global compiler lock (safe against Ctrl-C: `locks`), the CUDA
    target, and NRT forced off (`numba_compat.nrt_off`).  Every run of
    numba's pipeline (typing, lowering) is inside it: the first installs the
    patches (`install_patches`)."""
    install_patches()
    with compiler_lock(), nbutils.numba_target_override(), numba_compat.nrt_off():
        yield


# ---------------------------------------------------------------------------
# Pipelines


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    _name = "gpucache_stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _EarlyPipelineCompletion(
            {
                "func_id": state.func_id,
                "func_ir": state.func_ir,
                "typemap": state.typemap,
                "calltypes": state.calltypes,
                "return_type": state.return_type,
                "args": tuple(state.args),
                "metadata": dict(state.metadata or {}),
            }
        )


class _TypingPipeline(CUDACompiler):
    """numba-cuda's untyped and typed passes, stopping before lowering.

    numba numbers every function it compiles from a process-global counter and
    puts that number in the symbol name.  Here the number is derived from the
    function's source identity instead, so the same inputs give the same NVVM
    IR, PTX and cubin bytes in every compile and every process.
    """

    uid: Optional[int] = None

    def compile_extra(self, func):
        from_function = FunctionIdentity.from_function
        if self.uid is not None:  # (numbered here, not by content: `_numbered_by_content`)
            from_function = functools.partial(
                numba_compat.original("numba.cuda.core.bytecode:FunctionIdentity.from_function"), FunctionIdentity)
        self.state.func_id = from_function(func)
        if self.uid is not None:
            self.state.func_id.unique_id = self.uid
            self.state.func_id.unique_name = f"{self.state.func_id.func_qualname}${self.uid}"
        ExtractByteCode().run_pass(self.state)
        self.state.lifted = ()
        self.state.lifted_from = None
        return self._compile_bytecode()

    def define_pipelines(self):
        pm = PassManager("cuda")  # (numba's name: a failure reads "Failed in cuda mode pipeline", as numba's)
        for impl, desc in DefaultPassBuilder.define_untyped_pipeline(self.state).passes:
            pm.add_pass(CUDATranslateBytecode if impl is TranslateByteCode else impl, desc)
        pm.passes.extend(DefaultPassBuilder.define_typed_pipeline(self.state).passes)
        pm.add_pass(_StopAfterTyping, "stop after typing")
        pm.finalize()
        return [pm]


class _LoweringPipeline(CUDACompiler):
    """numba-cuda's lowering passes, run on typed IR from `_TypingPipeline`."""

    def define_pipelines(self):
        return [self.define_cuda_lowering_pipeline(self.state)]


@dataclass
class TypedFunction:
    """Typed numba IR, reusable by any number of lowerings."""

    qualname: str
    state: Dict[str, Any]
    target_reads: targets.TargetReads
    proxies: Tuple[Any, ...] = ()  # device proxies the typed IR refers to (kept alive)
    snapshot_bytes: int = 0  # the array copies the typed IR holds

    @property
    def return_type(self):
        return self.state["return_type"]

    @property
    def nbytes(self) -> int:
        return 4096 + 256 * len(self.state["typemap"]) + self.snapshot_bytes


def _compile_error(qualname, stage, exc, pyfunc=None):
    """A CompileError naming the kernel and, where known, the source line."""
    message = str(exc).replace("\x00", "").strip() or type(exc).__name__
    loc = getattr(exc, "loc", None)
    filename, line = getattr(loc, "filename", None), getattr(loc, "line", None)
    if (filename is None or line is None) and pyfunc is not None:
        filename, line = pyfunc.__code__.co_filename, def_line_of(pyfunc.__code__)
    if filename is not None and line is not None and f"line {line}" not in message:
        source = linecache.getline(filename, line).strip()
        message += f'\n  File "{filename}", line {line}' + (f"\n    {source}" if source else "")
    return CompileError(qualname, stage, message)


def def_line_of(code) -> int:
    """The line of ``def`` itself (co_firstlineno is the first decorator's)."""
    for line in range(code.co_firstlineno, code.co_firstlineno + 20):
        if linecache.getline(code.co_filename, line).lstrip().startswith(("def ", "async def ")):
            return line
    return code.co_firstlineno


def symbol_uid(identity_digest: str) -> int:
    """The number numba puts in symbol names, derived from the source identity."""
    return int(identity_digest[:12], 16)


def run_typing(pyfunc, argtypes, config: CompileConfig, *, kernel: bool, uid: Optional[int] = None,
               qualname=None, fresh: Optional[bool] = None, return_type=None,
               inline: str = "never", debug_filename: Optional[str] = None,
               def_line: Optional[int] = None) -> TypedFunction:
    """Type `pyfunc` for `argtypes`.  Kernels must return void; a device
    function may have a declared `return_type`, and be inlined into its
    callers (``inline="always"``: numba then lets it return a new array).
    ``fresh``: make new proxies for the library device functions reached (a
    forced compile); None keeps the enclosing compile's choice.
    ``debug_filename``, ``def_line``: the file and the line of ``def`` debug
    info names, as the typing token hashed them (see `_lower`)."""
    qualname = qualname or pyfunc.__qualname__
    return_type = nbtypes.void if kernel else return_type
    # (numbered afresh before the pipeline is made: it copies numba's target context)
    with _numba_compiling(), _compiling_for(config, "typing", fresh), targets.track() as reads, \
            _numbered_afresh():
        try:
            flags = _typing_flags(config)
            flags.inline = inline
            pipeline = _TypingPipeline(
                cuda_target.typing_context, cuda_target.target_context, None,
                tuple(argtypes), return_type, flags, {},
            )
            pipeline.uid = uid
            state = pipeline.compile_extra(pyfunc)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise _compile_error(qualname, "typing", exc, pyfunc) from exc
    if kernel and state["return_type"] not in (nbtypes.void, nbtypes.none):
        raise CompileError(qualname, "typing", "a CUDA kernel must not return a value")
    state["debug_filename"] = debug_filename
    state["def_line"] = def_line
    if state["metadata"].get("launch_config_sensitive"):
        raise UnsupportedKernelError(
            f"{qualname} reads the launch configuration at compile time; "
            "such kernels are compiled per launch and cannot be cached ahead of it"
        )
    return TypedFunction(qualname, state, frozenset(reads))


@contextlib.contextmanager
def _def_line_as_hashed(state):
    """numba-cuda finds the line of ``def`` for debug info by parsing the
    source text when it lowers (which may have changed on disk since): it is
    given the line the typing token hashed instead."""
    code = state["func_id"].code
    previous = _active.def_line
    _active.def_line = (code, state.get("def_line")) if state.get("debug_filename") else None
    try:
        yield
    finally:
        _active.def_line = previous


def _hashed_def_line(numba_def_line):
    """numba's line of `def` for debug info, read from the file as it is now;
    inside a compile of ours, the line of the source that was hashed."""

    @functools.wraps(numba_def_line)
    def get_func_def_lineno(pyfunc):
        given = _active.def_line
        if given is not None and getattr(pyfunc, "__code__", None) is given[0]:
            return given[1]
        return numba_def_line(pyfunc)

    return get_func_def_lineno


@contextlib.contextmanager
def _stable_shared_memory_names(uid):
    """Name shared arrays after the function being lowered, not a global counter.

    numba-cuda names each ``cuda.shared.array`` ``_cudapy_smem_<N>`` from a
    process-wide counter (the names must be unique across everything linked
    together, an NVVM limitation).  Prefixing the function's symbol uid and
    counting per lowering keeps them unique and makes them the same in every
    compile and process.  Nested lowerings (device functions) get their own.
    """
    counter = itertools.count(1)
    with numba_compat.smem_ids_named(lambda prefix: f"{prefix}_{uid}_{next(counter)}"):
        yield


# ---------------------------------------------------------------------------
# numba's process-wide numbering


@contextlib.contextmanager
def _numbered_afresh():
    """One typing or lowering, numbered as if it were the process's first compile.

    numba numbers what it makes from counters that live as long as the
    process, and the numbers reach the output, so a kernel's NVVM IR followed
    what the process had compiled before (with ``literal_unroll``, two compiles
    in a row differ): the variables it makes and the block labels of code it
    inlines start from 0 here (`numba_compat.numbered_afresh`), and the
    functions it compiles or inlines on its own are numbered by content
    (`numba_compat.PATCHES`).  And its helper cache (numba/cuda/core/base.py:913-946
    ``cached_internal_func``, keyed without the compile's flags or target)
    handed a kernel a helper lowered for another: here it is one per
    lowering config (`_subroutine_cache`).  Runs under numba's compiler lock
    (the counters are process-wide).
    """
    with numba_compat.numbered_afresh(_subroutine_cache(_active.config)):
        yield


_subroutine_caches: Dict[Any, dict] = {}  # (lowering key, target) -> numba's helper cache for them
# a helper's library -> the target reads its compile made (replayed at each reuse)
_subroutine_reads: "weakref.WeakKeyDictionary[Any, frozenset]" = weakref.WeakKeyDictionary()


def _subroutine_cache(config: Optional[CompileConfig]) -> dict:
    """numba's helper cache (``context.compile_internal``: int power, cmath,
    array methods) for compiles with `config`: shared by the lowerings of one
    lowering config and target only, whose helpers come out the same (each
    compiled numbered afresh: `_fresh_subroutine`), so a kernel's helpers
    never depend on what was compiled before."""
    if config is None:
        return {}
    return _subroutine_caches.setdefault((_lowering_key(config), tuple(config.cc)), {})


def _fresh_subroutine(compile_no_cache):
    """numba's compile of a helper on a miss of its cache: numbered afresh
    (its text must not depend on the lowering that first needed it), and its
    target reads kept with it (`_replayed_subroutine`)."""

    @functools.wraps(compile_no_cache)
    def compile_(self, *args, **kwargs):
        if _active.config is None:
            return compile_no_cache(self, *args, **kwargs)
        with _numbered_afresh(), targets.track() as reads:
            cres = compile_no_cache(self, *args, **kwargs)
        _subroutine_reads[cres.library] = frozenset(reads)
        return cres

    return compile_


def _replayed_subroutine(compile_subroutine):
    """numba's helper lookup: a helper found in the cache reads the target as
    its compile did (or a kernel using it would seem valid for every target)."""

    @functools.wraps(compile_subroutine)
    def compile_(self, *args, **kwargs):
        cres = compile_subroutine(self, *args, **kwargs)
        if _active.config is not None:
            targets.note(_subroutine_reads.get(cres.library, ()))
        return cres

    return compile_


_internal_uids: Dict[int, Tuple[Any, tuple]] = {}  # uid -> (code, closure values) it numbers
# the rebound Python functions of user device proxies -> their symbol uid (from their identity)
_proxied_uids: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def _internal_uid(pyfunc) -> int:
    """The number of a function numba compiles or inlines on its own: a user
    device function's snapshot by its proxy's identity (numba inlines an
    ``inline="always"`` one itself), any other's from its content
    (`sources.internal_function_digest`),
    so the same in every process.  Unique as numba's counter is: a function
    whose content describes like another's but is not equal to it takes the
    next free number (then only that one follows the process's history)."""
    from .sources import internal_function_digest

    uid = _proxied_uids.get(pyfunc)
    if uid is not None:
        return uid
    uid = symbol_uid(internal_function_digest(pyfunc))
    holder = (pyfunc.__code__, tuple(_closure_contents(pyfunc)))
    while not _same(_internal_uids.setdefault(uid, holder), holder):
        uid = (uid + 1) % (1 << 48)
    return uid


def _closure_contents(pyfunc):
    for cell in pyfunc.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:
            yield _EMPTY_CELL


_EMPTY_CELL = object()


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # (values with elementwise ==, such as arrays)
        log.debug("%s == %s is no truth value: compared by identity", type(a).__name__, type(b).__name__)
        return a is b


def _numbered_by_content(from_function):
    """numba's FunctionIdentity.from_function, numbering by content inside a
    compile of ours (numba/cuda/core/bytecode.py:675,716 number from a
    process-wide counter; the number is in symbol names, as an ABI tag, and
    in the names of variables inlined from the function)."""

    @functools.wraps(from_function)
    def numbered(cls, pyfunc):
        func_id = from_function(cls, pyfunc)
        if _active.config is not None:
            func_id.unique_id = _internal_uid(pyfunc)
            func_id.unique_name = f"{func_id.func_qualname}${func_id.unique_id}"
        return func_id

    return numbered


def _record_mangling(numba_mangling_args):
    """numba mangles a record type as its process-wide type number
    (numba/core/types/npytypes.py Record.mangling_args: ``self._code``, a
    counter of types made), which is in the symbol of every function taking
    a record.  Inside a compile of ours it is a number derived from the
    record's key (its fields, offsets, size, alignment): unique as the
    type is, and the same in every process."""

    def mangling_args(self):
        if _active.config is None:
            return numba_mangling_args(self)
        key = f"{type(self).__module__}.{type(self).__qualname__}:{self.key!r}"
        return type(self).__name__, (symbol_uid(hashlib.sha256(key.encode()).hexdigest()),)

    return mangling_args


def _stable_const_bytes(insert_const_bytes):
    """numba names a constant byte string after Python's ``hash()`` of it
    (numba/cuda/core/base.py:494), which PYTHONHASHSEED changes; inside a
    compile of ours, after a digest of the bytes."""

    @functools.wraps(insert_const_bytes)
    def insert(self, mod, data, name=None):
        if name is None and _active.config is not None:
            name = str(int(hashlib.sha256(bytes(data)).hexdigest()[:15], 16))
        return insert_const_bytes(self, mod, data, name)

    return insert


def _dispatcher_repr(numba_repr):
    """numba names the type of a dispatcher passed as an argument after its
    repr, with the Python function's address (numba/cuda/dispatcher.py:1416),
    in the mangled name of the function it is passed to; a dispatcher numba
    makes inside a compile of ours (a ``make_function`` closure turned into
    one) is named by its function's content number instead
    (`DeviceProxy.__repr__` for the proxies)."""

    @functools.wraps(numba_repr)
    def repr_(self):
        if _active.config is None:
            return numba_repr(self)
        return f"{type(self).__name__}(<function {self.py_func.__qualname__} at 0x{_internal_uid(self.py_func):x}>)"

    return repr_


def _afresh_inside(run_untyped_passes):
    """numba types an ``@overload(inline="always")`` implementation while it
    types the caller, and keeps the IR for later callers: numbered afresh,
    that IR and the caller's own numbering do not depend on which compile
    made it first."""

    @functools.wraps(run_untyped_passes)
    def run(self, *args, **kwargs):
        if _active.config is None:
            return run_untyped_passes(self, *args, **kwargs)
        with _numbered_afresh():
            return run_untyped_passes(self, *args, **kwargs)

    return run


def _inlined_by_content(inline_ir):
    """The variables numba inlines are named after the callee's numbered name
    (numba/cuda/core/inline_closurecall.py:63-74, 392): inside a compile of
    ours, after its content number, even where the callee's IR was made (and
    kept, see `_afresh_inside`) by one of numba's own compiles."""

    @functools.wraps(inline_ir)
    def inline(self, caller_ir, block, i, callee_ir, *args, **kwargs):
        func = getattr(callee_ir.func_id, "func", None)
        if _active.config is not None and isinstance(func, pytypes.FunctionType):
            func_id = copy.copy(callee_ir.func_id)
            func_id.unique_id = _internal_uid(func)
            func_id.unique_name = f"{func_id.func_qualname}${func_id.unique_id}"
            callee_ir = copy.copy(callee_ir)  # (inline_ir copies its blocks itself)
            callee_ir.func_id = func_id
        return inline_ir(self, caller_ir, block, i, callee_ir, *args, **kwargs)

    return inline


def _lower(typed: TypedFunction, config: CompileConfig, forceinline: bool = False):
    # (numbered afresh before the pipeline is made: it copies numba's target context)
    with _numbered_afresh():
        return _lower_typed(typed, config, forceinline)


def _lower_typed(typed: TypedFunction, config: CompileConfig, forceinline: bool):
    state = typed.state
    flags = _lowering_flags(config)
    if forceinline:
        flags.forceinline = True
    pipeline = _LoweringPipeline(
        cuda_target.typing_context, cuda_target.target_context, None,
        state["args"], state["return_type"], flags, {},
    )
    ps = pipeline.state
    ps.func_id = state["func_id"]
    # Lowering inserts ir.Del nodes into the blocks: give it its own copy.
    ps.func_ir = state["func_ir"].copy()
    if state.get("debug_filename"):
        # numba-cuda names os.path.abspath(the code's file) in debug info, which
        # for a cell reads the working directory at lowering time: name the one
        # the typing token hashed instead
        loc = ps.func_ir.loc
        ps.func_ir.loc = nbir.Loc(state["debug_filename"], loc.line, loc.col, loc.maybe_decorator)
    ps.typemap = state["typemap"]
    ps.calltypes = state["calltypes"]
    ps.return_type = state["return_type"]
    ps.metadata = dict(state["metadata"])
    ps.lifted = ()
    ps.lifted_from = None
    with _stable_shared_memory_names(state["func_id"].unique_id), _def_line_as_hashed(state):
        cres = pipeline._compile_core()
    cres.library.finalize()
    return cres


# ---------------------------------------------------------------------------
# Device functions


class _ActiveConfig(threading.local):
    """The compile running on this thread: the kernel's config, whether it is
    typing or lowering, and (when forced) the library functions already given
    fresh proxies."""

    def __init__(self):
        self.config: Optional[CompileConfig] = None
        self.phase: Optional[str] = None  # "typing" or "lowering"
        self.fresh: Optional[set] = None
        self.def_line = None  # (code, line of def) of the function being lowered, for debug info


_active = _ActiveConfig()


@contextlib.contextmanager
def _compiling_for(config: CompileConfig, phase: str, fresh: Optional[bool] = None):
    """Mark this thread as typing or lowering for `config`; ``fresh`` (typing
    only) makes new proxies for the library functions numba reaches."""
    previous = (_active.config, _active.phase, _active.fresh)
    _active.config, _active.phase = config, phase
    if fresh is not None:
        _active.fresh = set() if fresh else None
    try:
        yield
    finally:
        _active.config, _active.phase, _active.fresh = previous


class _Overload:
    """What numba's typing of a call needs from a compiled overload."""

    objectmode = False
    entry_point = None

    def __init__(self, signature):
        self.signature = signature


class DeviceProxy(CUDADispatcher):
    """Stands in for a ``@cuda.jit(device=True)`` function inside a kernel.

    Typing a call types the device function (once per argument types, and per
    target only if typing read it).  Lowering a call lowers it for the kernel
    being lowered: the active `CompileConfig` comes from `_active`.
    """

    def __init__(self, original, pyfunc, identity_digest, declared=(), options_from=None, options=None,
                 debug_filename=None, def_line=None):
        # As numba: a device function is lowered with its own options, whatever
        # the calling kernel's (its identity hashes them: `device_options`), and
        # a call to one declared inline="always" is inlined in the caller's IR.
        own = dict(options) if options else device_options(original if options_from is None else options_from)
        self.debug_filename = debug_filename
        self.def_line = def_line
        options = {"device": True, "opt": True, **own}
        super().__init__(pyfunc, targetoptions=options)
        self.own_options = own
        self.original = original
        self.identity_digest = identity_digest
        if original is not None:  # (a user function's snapshot, which numba may inline: `_internal_uid`)
            _proxied_uids[pyfunc] = symbol_uid(identity_digest)
        # Declared signatures ((args, return type), ...), one per argument types
        # (`sources.declared_signatures`): as with numba, calls are typed against
        # them (arguments and result cast; a return type None inferred), never per call.
        self.declared = tuple(declared)
        self._typed = targets.VariantMemo()
        # Lowered device functions are registered in numba's (process-wide)
        # target context; unregister them when dropped, or when the proxy goes.
        live_keys = set()
        self._live_keys = live_keys
        self._lazy_keys = {}
        self._lowered = targets.VariantMemo(on_evict=lambda found: _unregister(live_keys, found[0]))
        weakref.finalize(self, _unregister_all, live_keys)

    def __repr__(self):
        """numba names the type of a device function passed as an argument
        after its dispatcher's repr, which is in the mangled name of the
        function it is passed to; numba's has the Python function's address
        (different in every process and compile), this one the identity's
        number in its place."""
        uid = symbol_uid(getattr(self, "identity_digest", None) or "0")
        return f"{type(self).__name__}(<function {self.py_func.__qualname__} at 0x{uid:x}>)"

    def get_call_template(self, args, kws):
        """As numba's, but with declared signatures the call is typed against
        them alone (numba compiled those and turned compiling off)."""
        if not self.declared:
            return super().get_call_template(args, kws)
        pysig, args = self.fold_argument_types(args, kws)
        signatures = [self.compile_device(declared_args).signature for declared_args, _ in self.declared]
        template = nbtyping.make_concrete_template(
            f"CallTemplate({self.py_func.__name__})", key=self.py_func.__name__, signatures=signatures)
        return template, nbutils.pysignature(self.py_func), args, {}

    def compile_device(self, args, return_type=None):
        config = _active.config
        if config is None:
            raise UnsupportedKernelError(
                f"device function {self.py_func.__qualname__} was called outside a gpucache_ext compile"
            )
        args = tuple(args)
        typed = self._typed.get(args, config.cc)
        if typed is None:
            declared = dict(self.declared)
            if self.declared and args not in declared:
                from .results import short_signature

                raise CompileError(self.py_func.__qualname__, "typing",
                                   f"no declared signature takes {short_signature(args)}")
            typed = run_typing(self.py_func, args, config, kernel=False,
                               uid=symbol_uid(self.identity_digest),
                               qualname=self.py_func.__qualname__,
                               return_type=declared.get(args, return_type),
                               inline=self.own_options["inline"], debug_filename=self.debug_filename,
                               def_line=self.def_line)
            self._typed.put(args, typed.target_reads, typed)
        targets.note(typed.target_reads)
        if args not in self.overloads:
            self.overloads[args] = _Overload(nbtyping.signature(typed.return_type, *args))
        return self.overloads[args]

    def lowering_config(self, config: CompileConfig) -> CompileConfig:
        """The kernel's config with this device function's own lowering options."""
        own = self.own_options
        return config.replace(fastmath=own["fastmath"], debug=own["debug"], lineinfo=own["lineinfo"])

    def get_overload(self, args):
        """The implementation key for the call being lowered, for the active config."""
        config = self.lowering_config(_active.config)
        args = tuple(args)
        key = (args, _lowering_key(config))
        found = self._lowered.get(key, config.cc)
        if found is not None:
            impl_key, reads = found
            targets.note(reads)
            return impl_key
        self.compile_device(args)
        typed = self._typed.get(args, config.cc)
        with _compiling_for(config, "lowering"), targets.track() as reads:
            try:
                cres = _lower(typed, config, forceinline=self.own_options["forceinline"])
            except Exception as exc:
                raise _compile_error(self.py_func.__qualname__, "llvm", exc, self.py_func) from exc
        reads = frozenset(reads) | typed.target_reads
        impl_key = _DeviceImplKey(self.py_func.__qualname__)
        cuda_target.target_context.insert_user_function(impl_key, cres.fndesc, [cres.library])
        self._live_keys.add(impl_key)
        self._lowered.put(key, reads, (impl_key, reads))
        return impl_key


class _LazyImplKey:
    """The implementation of a call typed before its lowering config is known.

    numba's @overload templates ask for the implementation while typing and
    keep it in process-wide tables keyed by argument types alone.  Typed IR is
    shared by every lowering config, so the key handed to numba stands for
    "the proxy's lowering of these arguments for whichever config lowers the
    call": `_LazySelector` resolves it then.
    """

    def __init__(self, proxy, args):
        self.proxy = proxy
        self.args = args

    def __repr__(self):
        return f"<lazily lowered {self.proxy.py_func.__qualname__}{self.args}>"


class _LazySelector(OverloadSelector):
    """numba's implementation table entry for a `_LazyImplKey`."""

    def __init__(self, lazy: _LazyImplKey):
        super().__init__()
        self.lazy = lazy

    def find(self, sig):  # never cached: the answer depends on the active config
        impl_key = self.lazy.proxy.get_overload(self.lazy.args)
        return cuda_target.target_context._defns[impl_key].find(sig)


def _lazy_key(proxy, args):
    key = proxy._lazy_keys.get(args)
    if key is None:
        key = proxy._lazy_keys[args] = _LazyImplKey(proxy, args)
        cuda_target.target_context._defns[key] = _LazySelector(key)
        proxy._live_keys.add(key)
    return key


# Device functions numba reaches on its own while a kernel compiles: library
# helpers (cuda.random), @overload and register_jitable implementations in
# libraries.  numba would compile each for the current GPU with its own flags
# and cache it by argument types; here each gets a proxy, typed for the
# kernel's target and lowered with its config, like the kernel's own device
# functions.  Library code changes only with its version (in the token).
_library_proxies: "weakref.WeakKeyDictionary[CUDADispatcher, DeviceProxy]" = weakref.WeakKeyDictionary()


def _route(dispatcher) -> "DeviceProxy":
    from .sources import library_identity_digest

    pyfunc = dispatcher.py_func
    digest = library_identity_digest(pyfunc)
    if digest is None:
        # user code numba compiles on its own while compiling the kernel: an @overload's
        # implementation (what built it is in every typing token: `extensions`), keyed by
        # everything it reads, as a device function is
        from .sources import identify

        digest = tokens.digest(["user function numba compiles", pyfunc.__module__, pyfunc.__qualname__,
                                identify(pyfunc, with_location=False).digest])
    fresh = _active.fresh
    with compiler_lock():
        proxy = _library_proxies.get(dispatcher)
        if proxy is None or proxy.identity_digest != digest or (
                fresh is not None and dispatcher not in fresh):
            proxy = DeviceProxy(None, pyfunc, digest, options_from=dispatcher)
            _library_proxies[dispatcher] = proxy
            if fresh is not None:
                fresh.add(dispatcher)
        return proxy


def _routed(name):
    """What makes a CUDADispatcher method that, inside a gpucache_ext compile,
    hands the call to the dispatcher's proxy (numba's own outside one)."""
    return functools.partial(_route_method, name)


def _route_method(name, original):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        if _active.config is None or isinstance(self, DeviceProxy):
            return original(self, *args, **kwargs)
        proxy = _route(self)
        if name == "get_overload" and _active.phase == "typing":
            proxy.compile_device(tuple(args[0]))
            return _lazy_key(proxy, tuple(args[0]))
        return getattr(proxy, name)(*args, **kwargs)

    return method


def _unregister(live_keys, impl_key):
    if impl_key in live_keys:
        live_keys.discard(impl_key)
        cuda_target.target_context.remove_user_function(impl_key)


def _unregister_all(live_keys):
    for impl_key in list(live_keys):
        _unregister(live_keys, impl_key)


class _DeviceImplKey:
    """Key of one lowered device function in numba's target context."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<lowered device function {self.name}>"


def _lowering_key(config: CompileConfig):
    """What a device function's lowering depends on besides its typed IR: the
    lowering fields and numba's settings that lowering reads (as the llvm
    token), so a memoised lowering is reused only where the kernel's would be."""
    from .toolchain import numba_settings

    settings = numba_settings(reload=False)
    return tuple(sorted(config.stage_fields("llvm").items())) + tuple(sorted(settings.items()))


# ---------------------------------------------------------------------------
# The stages after typing (their artifacts: `artifacts`)


def run_llvm(typed: TypedFunction, config: CompileConfig, external=frozenset()) -> LLVMArtifact:
    """Lower typed IR for the lowering fields of `config` (and its target).
    `external`: the link items of the kernel's external functions (linked by
    the cubin stage, see `linking`), left out of the artifact."""
    with _numba_compiling(), _compiling_for(config, "lowering"), targets.track() as reads:
        try:
            cres = _lower(typed, config)
            library = cres.library
            entry_name = cres.fndesc.llvm_func_name
            kernel = library.get_function(entry_name)
            kernel_fixup(kernel, config.debug)
            nvvm.set_launch_bounds(kernel, config.launch_bounds)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise _compile_error(typed.qualname, "llvm", exc) from exc
        modules = canonical_modules(library)
        links = linking.library_inputs(library, "\n".join(modules), f"{typed.qualname}: ", external)
    return LLVMArtifact(modules, entry_name, frozenset(reads) | typed.target_reads, cres.call_helper,
                        cooperative=bool(library.use_cooperative or library.needs_cudadevrt),
                        links=links)


def canonical_modules(library) -> Tuple[str, ...]:
    """The NVVM IR modules of `library` and everything it links, in a canonical order.

    numba keeps a library's linked libraries in a set (numba/cuda/codegen.py:166,
    walked by ``modules``, :424-427), so their order (and with it libNVVM's
    output: the order of functions in the PTX, the layout of debug info)
    follows memory addresses and differs between processes: there is no
    order of numba's to follow.  Here each library's linked libraries are
    visited sorted by their text.  That is canonical because the text is:
    what numba numbers from process-wide counters (helpers' symbols, record
    types, inlined variables, labels) is numbered from content here
    (`_numbered_afresh`, `gpucache_ext.numba_compat`), and a device function passed
    as an argument is named by its identity (`DeviceProxy.__repr__`), so equal
    inputs give equal texts in every process; libraries of equal text are
    interchangeable, so ties reorder nothing.  (Before, those numbers were in
    the text, and the sort followed them.)  The walk stays depth-first,
    callers before callees, as numba's own: libNVVM links a ``linkonce_odr``
    function only when a module linked before it refers to it.
    """
    return tuple(_library_modules(library))


def _library_modules(library):
    if isinstance(library, ExternalCodeLibrary):
        return []  # external code only (declare_device, numba's shims): linked, not IR
    module = getattr(library, "_module", None)
    if module is None or not hasattr(library, "_linking_libraries"):
        raise UnsupportedKernelError(
            f"cannot order the modules of a {type(library).__name__}; this numba-cuda "
            "version's code libraries are not supported"
        )
    linked = sorted(_library_modules(lib) for lib in library._linking_libraries)
    return [str(module)] + [text for texts in linked for text in texts]


_DI_FILE = re.compile(r'!DIFile\(directory: "((?:[^"\\]|\\.)*)", filename: "((?:[^"\\]|\\.)*)"\)')


def debug_source_files(llvm: LLVMArtifact) -> Tuple[str, ...]:
    """The source files the debug info of `llvm` names (none without debug
    info).  ptxas, inside nvJitLink, reads each one's size and modification
    time from the file system and writes them into the cubin's line table:
    they are inputs of the cubin stage (see `source_file_stats`)."""
    found = getattr(llvm, "_debug_sources", None)  # (read once per artifact: its modules never change)
    if found is None:
        found = llvm._debug_sources = _debug_source_files(llvm)
    return found


def _debug_source_files(llvm: LLVMArtifact) -> Tuple[str, ...]:
    found = set()
    for module in llvm.modules:
        if "!DIFile(" in module:
            for directory, filename in _DI_FILE.findall(module):
                found.add(os.path.join(_unescape(directory), _unescape(filename)))
    return tuple(sorted(found))


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def source_file_stats(paths) -> list:
    """What ptxas records of each file debug info names: its size and
    modification time, or that it is absent (a cell has no file)."""
    stats = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stats.append([path, "absent"])
        else:
            stats.append([path, info.st_size, info.st_mtime_ns])
    return stats


def nvvm_options(config: CompileConfig) -> dict:
    """The libNVVM options for `config`, exactly as passed to compile_ir."""
    options = {"arch": config.arch, "opt": config.opt}
    options.update({k: int(v) for k, v in config.nvvm_math().items()})
    if config.debug:
        options["g"] = None
    if config.lto:
        options["gen-lto"] = None
    return options


def run_ptx(llvm: LLVMArtifact, config: CompileConfig, qualname="kernel") -> PTXArtifact:
    """Compile NVVM IR with libNVVM for config.sm."""
    options = nvvm_options(config)
    # No numba lock: libNVVM's API is thread-safe (a program per call), and
    # this reads nothing of numba's but the libdevice bytes, pinned once
    # (`toolchain`), so several targets' PTX compile at once (compile_fatbin).
    try:
        if config.lto:
            return PTXArtifact((), bytes(nvvm.compile_ir(list(llvm.modules), **options)),
                               llvm.entry_name, llvm.cooperative, llvm.links)
        if config.debug:
            # As numba-cuda: with -g each module is compiled on its own.
            outputs = [nvvm.compile_ir(m, **options) for m in llvm.modules]
        else:
            outputs = [nvvm.compile_ir(list(llvm.modules), **options)]
    except Exception as exc:
        raise _compile_error(qualname, "ptx", exc) from exc
    ptx = tuple(out.decode().strip("\x00").strip() for out in outputs)
    return PTXArtifact(ptx, None, llvm.entry_name, llvm.cooperative, llvm.links)


def _link(ptx: PTXArtifact, config: CompileConfig, output: str, external=()):
    from cuda.core import Linker, LinkerOptions, ObjectCode

    if ptx.ltoir is not None:
        objects = [ObjectCode.from_ltoir(ptx.ltoir, name="kernel.ltoir")]
    else:
        objects = [ObjectCode.from_ptx(p.encode(), name=f"kernel{i}.ptx") for i, p in enumerate(ptx.ptx)]
    options = LinkerOptions(
        arch=config.sm_name,
        max_register_count=config.max_registers,
        link_time_optimization=True if ptx.ltoir is not None else None,
        ptx=True if output == "ptx" else None,
        verbose=True,
    )
    objects.extend(linking.object_codes(_link_inputs(ptx) + list(external), config.cc, ptx.ltoir is not None))
    if ptx.cooperative:
        from .toolchain import cudadevrt

        objects.append(ObjectCode.from_library(cudadevrt(), name="libcudadevrt.a"))
    linker = Linker(*objects, options=options)
    try:
        code = linker.link(output).code
        log = (linker.get_info_log() or "").replace("\x00", "").strip()
    finally:
        linker.close()
    return code, log


def _link_inputs(ptx: PTXArtifact):
    """The artifact's external code, and numba's reshape helper where the
    code calls it (numba-cuda links it on the same test)."""
    inputs = list(ptx.links)
    code = [p.encode() for p in ptx.ptx] + ([ptx.ltoir] if ptx.ltoir is not None else [])
    if any(name.encode() in part for name in linking.reshape_functions() for part in code):
        inputs.append(linking.reshape_helper())
    return inputs


def run_cubin(ptx: PTXArtifact, config: CompileConfig, qualname="kernel", external=()) -> CubinArtifact:
    """Link PTX (or LTO-IR), numba's helpers and the `external` code (the
    `LinkInput`s of the kernel's external functions) into a cubin for
    config.sm with nvJitLink."""
    external = tuple(external)
    try:
        cubin, log = _link(ptx, config, "cubin", external)
        linked_ptx = None
        if ptx.ltoir is not None:
            code, _ = _link(ptx, config, "ptx", external)
            linked_ptx = code.decode() if isinstance(code, bytes) else str(code)
    except (CompileError, UnsupportedKernelError):
        raise
    except Exception as exc:
        raise _compile_error(qualname, "cubin", exc) from exc
    return CubinArtifact(bytes(cubin), log, linked_ptx, ptx.entry_name, external)


def normalize_signature(sig) -> Tuple[Any, ...]:
    """Argument types of a signature string, numba signature or tuple of types."""
    if isinstance(sig, str):  # parsed once: the parse reads numba's type names alone
        return _parse_signature(sig)
    return _normalize_signature(sig)


@functools.lru_cache(maxsize=1024)
def _parse_signature(sig: str) -> Tuple[Any, ...]:
    return _normalize_signature(sig)


def _normalize_signature(sig) -> Tuple[Any, ...]:
    try:
        args, return_type = sigutils.normalize_signature(sig)
    except Exception as exc:
        raise TypeError(f"invalid kernel signature {sig!r}: {exc}") from exc
    if return_type not in (None, nbtypes.void, nbtypes.none):
        raise TypeError(f"invalid kernel signature {sig!r}: a CUDA kernel must return void")
    return tuple(args)


_DISPATCHER = "numba.cuda.dispatcher:CUDADispatcher"
_patches_installed = False  # (numba_compat.install is idempotent too: this keeps each compile's check cheap)


def install_patches() -> None:
    """Apply `numba_compat.PATCHES`, with this module's replacements, if not
    applied yet.  The first compile does (`_numba_compiling`), so that
    importing gpucache_ext changes nothing of numba's; each replacement acts
    only inside a compile of ours anyway."""
    global _patches_installed
    if _patches_installed:
        return
    numba_compat.install({
        f"{_DISPATCHER}.get_call_template": _routed("get_call_template"),
        f"{_DISPATCHER}.compile_device": _routed("compile_device"),
        f"{_DISPATCHER}.get_overload": _routed("get_overload"),
        f"{_DISPATCHER}.__repr__": _dispatcher_repr,
        "numba.cuda.lowering:get_func_def_lineno": _hashed_def_line,
        "numba.cuda.core.bytecode:FunctionIdentity.from_function": _numbered_by_content,
        "numba.cuda.types:Record.mangling_args": _record_mangling,
        "numba.cuda.core.base:BaseContext.insert_const_bytes": _stable_const_bytes,
        "numba.cuda.core.base:BaseContext._compile_subroutine_no_cache": _fresh_subroutine,
        "numba.cuda.core.base:BaseContext.compile_subroutine": _replayed_subroutine,
        "numba.cuda.core.inline_closurecall:InlineWorker.run_untyped_passes": _afresh_inside,
        "numba.cuda.core.inline_closurecall:InlineWorker.inline_ir": _inlined_by_content,
    })
    _patches_installed = True
