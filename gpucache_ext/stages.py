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
import functools
import itertools
import linecache
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from numba.cuda import types as nbtypes
from numba.cuda import typing as nbtyping
from numba.cuda import cudaimpl
from numba.cuda import utils as nbutils
from numba.cuda.compiler import (
    CUDACompiler,
    CUDATranslateBytecode,
    DefaultPassBuilder,
    kernel_fixup,
)
from numba.cuda.core import config as nbconfig
from numba.cuda.core.base import OverloadSelector
from numba.cuda.core import sigutils
from numba.cuda.core.bytecode import FunctionIdentity
from numba.cuda.core.compiler import _EarlyPipelineCompletion
from numba.cuda.core.untyped_passes import ExtractByteCode
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.cuda.core.untyped_passes import TranslateByteCode
from numba.cuda.cudadrv import nvvm
from numba.cuda.descriptor import cuda_target
from numba.cuda.codegen import ExternalCodeLibrary
from numba.cuda.dispatcher import CUDADispatcher
from numba.cuda.flags import CUDAFlags

from . import linking, targets
from .artifacts import CubinArtifact, LLVMArtifact, PTXArtifact  # noqa: F401  (re-exported)
from .config import CompileConfig
from .errors import CompileError, UnsupportedKernelError

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
    """numba's global compiler lock, the CUDA target, and NRT forced off."""
    with global_compiler_lock, nbutils.numba_target_override():
        saved = getattr(nbconfig, "CUDA_ENABLE_NRT", False)
        nbconfig.CUDA_ENABLE_NRT = False
        try:
            yield
        finally:
            nbconfig.CUDA_ENABLE_NRT = saved


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
        self.state.func_id = FunctionIdentity.from_function(func)
        if self.uid is not None:
            self.state.func_id.unique_id = self.uid
            self.state.func_id.unique_name = f"{self.state.func_id.func_qualname}${self.uid}"
        ExtractByteCode().run_pass(self.state)
        self.state.lifted = ()
        self.state.lifted_from = None
        return self._compile_bytecode()

    def define_pipelines(self):
        pm = PassManager("gpucache_typing")
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
        filename, line = pyfunc.__code__.co_filename, _def_line(pyfunc.__code__)
    if filename is not None and line is not None and f"line {line}" not in message:
        source = linecache.getline(filename, line).strip()
        message += f'\n  File "{filename}", line {line}' + (f"\n    {source}" if source else "")
    return CompileError(qualname, stage, message)


def _def_line(code) -> int:
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
               inline: str = "never") -> TypedFunction:
    """Type `pyfunc` for `argtypes`.  Kernels must return void; a device
    function may have a declared `return_type`, and be inlined into its
    callers (``inline="always"``: numba then lets it return a new array).
    ``fresh``: make new proxies for the library device functions reached (a
    forced compile); None keeps the enclosing compile's choice."""
    qualname = qualname or pyfunc.__qualname__
    return_type = nbtypes.void if kernel else return_type
    with _numba_compiling(), _compiling_for(config, "typing", fresh), targets.track() as reads:
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
    if state["metadata"].get("launch_config_sensitive"):
        raise UnsupportedKernelError(
            f"{qualname} reads the launch configuration at compile time; "
            "such kernels are compiled per launch and cannot be cached ahead of it"
        )
    return TypedFunction(qualname, state, frozenset(reads))


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
    saved = cudaimpl._get_unique_smem_id
    cudaimpl._get_unique_smem_id = lambda prefix: f"{prefix}_{uid}_{next(counter)}"
    try:
        yield
    finally:
        cudaimpl._get_unique_smem_id = saved


def _lower(typed: TypedFunction, config: CompileConfig, forceinline: bool = False):
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
    ps.typemap = state["typemap"]
    ps.calltypes = state["calltypes"]
    ps.return_type = state["return_type"]
    ps.metadata = dict(state["metadata"])
    ps.lifted = ()
    ps.lifted_from = None
    with _stable_shared_memory_names(state["func_id"].unique_id):
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


def device_options(dispatcher) -> Dict[str, Any]:
    """The options numba lowers a device function with: its own decorator's
    (numba's defaults where it has none), never the calling kernel's."""
    options = getattr(dispatcher, "targetoptions", None) or {}
    return {"fastmath": bool(options.get("fastmath")), "debug": bool(options.get("debug")),
            "lineinfo": bool(options.get("lineinfo")), "forceinline": bool(options.get("forceinline")),
            "inline": options.get("inline", "never")}


class DeviceProxy(CUDADispatcher):
    """Stands in for a ``@cuda.jit(device=True)`` function inside a kernel.

    Typing a call types the device function (once per argument types, and per
    target only if typing read it).  Lowering a call lowers it for the kernel
    being lowered: the active `CompileConfig` comes from `_active`.
    """

    def __init__(self, original, pyfunc, identity_digest, declared=(), options_from=None):
        # As numba: a device function is lowered with its own options, whatever
        # the calling kernel's (its identity hashes them: `device_options`), and
        # a call to one declared inline="always" is inlined in the caller's IR.
        own = device_options(original if options_from is None else options_from)
        options = {"device": True, "opt": True, **own}
        super().__init__(pyfunc, targetoptions=options)
        self.own_options = own
        self.original = original
        self.identity_digest = identity_digest
        # Declared signatures ((args, return type), ...): as with numba, calls
        # are typed against them (arguments and result cast), never per call.
        self.declared = tuple(declared)
        self._typed = targets.VariantMemo()
        # Lowered device functions are registered in numba's (process-wide)
        # target context; unregister them when dropped, or when the proxy goes.
        live_keys = set()
        self._live_keys = live_keys
        self._lazy_keys = {}
        self._lowered = targets.VariantMemo(on_evict=lambda found: _unregister(live_keys, found[0]))
        weakref.finalize(self, _unregister_all, live_keys)

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
                               inline=self.own_options["inline"])
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
        raise UnsupportedKernelError(
            f"{pyfunc.__module__}.{pyfunc.__qualname__} is user code that numba compiles on its own "
            "while compiling the kernel (an @overload of a library function, or a device function "
            "held where the cache cannot see it); the cache cannot key it, so it is refused. "
            "Call it as a @cuda.jit(device=True) function read from a global or closure variable"
        )
    fresh = _active.fresh
    with global_compiler_lock:
        proxy = _library_proxies.get(dispatcher)
        if proxy is None or proxy.identity_digest != digest or (
                fresh is not None and dispatcher not in fresh):
            proxy = DeviceProxy(None, pyfunc, digest, options_from=dispatcher)
            _library_proxies[dispatcher] = proxy
            if fresh is not None:
                fresh.add(dispatcher)
        return proxy


def _routed(name):
    """A CUDADispatcher method that, inside a gpucache_ext compile, hands the
    call to the dispatcher's proxy (numba's own outside one)."""
    original = getattr(CUDADispatcher, name)

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        if _active.config is None or isinstance(self, DeviceProxy):
            return original(self, *args, **kwargs)
        proxy = _route(self)
        if name == "get_overload" and _active.phase == "typing":
            proxy.compile_device(tuple(args[0]))
            return _lazy_key(proxy, tuple(args[0]))
        return getattr(proxy, name)(*args, **kwargs)

    method._gpucache_routed = True
    return method


def _install_routes():
    for name in ("get_call_template", "compile_device", "get_overload"):
        if not getattr(getattr(CUDADispatcher, name), "_gpucache_routed", False):
            setattr(CUDADispatcher, name, _routed(name))


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

    numba keeps a library's linked libraries in a set, so their order (and
    with it libNVVM's output) follows memory addresses and differs between
    processes.  Here each library's linked libraries are visited sorted by
    their text.  The walk stays depth-first, callers before callees, as
    numba's own: libNVVM links a ``linkonce_odr`` function only when a module
    linked before it refers to it.
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
    try:
        args, return_type = sigutils.normalize_signature(sig)
    except Exception as exc:
        raise TypeError(f"invalid kernel signature {sig!r}: {exc}") from exc
    if return_type not in (None, nbtypes.void, nbtypes.none):
        raise TypeError(f"invalid kernel signature {sig!r}: a CUDA kernel must return void")
    return tuple(args)


_install_routes()
