"""numba-cuda-mlir's compiler as the stages run it (see the package's docstring).

Every stage runs under numba-cuda-mlir's compiler lock, with its host query
answered by the target (`answering_host_query`) and its options made from
the config as its ``cuda.jit`` makes them (`target_options`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Tuple

import numba_cuda_mlir  # noqa: F401  (loads its LLVM and MLIR libraries first, as it must)
from numba_cuda_mlir import mlir_compiler as _mlir_compiler
from numba_cuda_mlir import mlir_optimization as _optimization
from numba_cuda_mlir import tools as _tools
from numba_cuda_mlir._mlir import ir as _ir
from numba_cuda_mlir._mlir.passmanager import PassManager as _MLIRPassManager
from numba_cuda_mlir.ast_transforms import apply_ast_transforms
from numba_cuda_mlir.decorators import verify_target_options
from numba_cuda_mlir.descriptor import mlir_target
from numba_cuda_mlir.install_registry import register_lowering
from numba_cuda_mlir.linker import Linker
from numba_cuda_mlir.lowering_utilities import context as _mlir_context
from numba_cuda_mlir.memory_management.config import is_nrt_enabled
from numba_cuda_mlir.mlir_lowering import get_mlir_module_str
from numba_cuda_mlir.numba_cuda import types as _types
from numba_cuda_mlir.numba_cuda.core import sigutils
from numba_cuda_mlir.numba_cuda.core.compiler import _EarlyPipelineCompletion
from numba_cuda_mlir.numba_cuda.core.compiler_lock import global_compiler_lock
from numba_cuda_mlir.numba_cuda.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba_cuda_mlir.numba_cuda.core.options import ParallelOptions
from numba_cuda_mlir.numba_cuda.core.target_extension import target_override
from numba_cuda_mlir.numba_cuda.cudadrv.nvvm import LibDevice
from numba_cuda_mlir.numba_cuda.flags import CUDAFlags
from numba_cuda_mlir.optimization import run_pre_codegen_patterns

from ... import memos
from ...errors import CompileError, ConfigError, UnsupportedKernelError, compile_error
from ...keys import targets
from ...keys.config import CompileConfig
from ...pipeline.artifacts import CubinArtifact, MLIRArtifact, PTXArtifact

# numba-cuda-mlir remembers the host's compute capability here once it asked the driver
# (`tools.get_gpu_compute_capability`): the one place its host query is answered without one
if not hasattr(_tools, "_cached_cc"):  # pragma: no cover - another numba-cuda-mlir
    raise ImportError(f"numba-cuda-mlir {numba_cuda_mlir.__version__} keeps no tools._cached_cc, which "
                      "gpucache_ext answers its host query with; install numba-cuda-mlir 0.6")


@contextlib.contextmanager
def answering_host_query(cc: Tuple[int, int]):
    """numba-cuda-mlir's compiler lock, its host query answered with `cc`
    (it links for the host's target where that is newer than the one asked:
    here they are the same), and its MLIR context."""
    with global_compiler_lock:
        previous = _tools._cached_cc
        _tools._cached_cc = tuple(cc)
        try:
            with _mlir_context.get_context():
                yield
        finally:
            _tools._cached_cc = previous


def target_options(config: CompileConfig) -> Dict[str, Any]:
    """The options numba-cuda-mlir's ``cuda.jit`` makes of `config`'s fields
    (`verify_target_options`): ``opt`` is its ``opt_level`` (0-3)."""
    given: Dict[str, Any] = {"chip": config.sm_name, "opt_level": config.opt, "fastmath": config.fastmath,
                             "debug": config.debug, "lineinfo": config.lineinfo, "lto": config.lto}
    if config.max_registers is not None:
        given["max_registers"] = config.max_registers
    if config.launch_bounds is not None:
        bounds = config.launch_bounds
        given["launch_bounds"] = bounds[0] if len(bounds) == 1 else tuple(bounds)
    try:
        return verify_target_options(given)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"numba-cuda-mlir refuses {config.summary()}: {exc}") from None


def typing_options(config: CompileConfig) -> Dict[str, Any]:
    """What typing is given: numba-cuda-mlir's defaults, and the target
    (its token names the target: `targets.pinned`)."""
    return verify_target_options({"chip": config.sm_name})


def _flags(options: Dict[str, Any]) -> CUDAFlags:
    """The numba flags numba-cuda-mlir's `compile_mlir` makes of `options`."""
    flags = CUDAFlags()
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.nrt = is_nrt_enabled()
    flags.auto_parallel = ParallelOptions(options.get("parallel", False))
    flags.nvvm_options = {}
    lto = bool(options.get("lto", False))
    if lto:
        flags.nvvm_options["gen-lto"] = None
    flags.dbg_directives_only = options.get("lineinfo", False)
    flags.debuginfo = options.get("debug", False) or flags.dbg_directives_only
    flags.error_model = "python"
    flags.lto = lto
    return flags


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopBeforeLowering(FunctionPass):
    _name = "gpucache_mlir_stop_before_lowering"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _EarlyPipelineCompletion({
            "func_id": state.func_id, "func_ir": state.func_ir, "typemap": state.typemap,
            "calltypes": state.calltypes, "return_type": state.return_type, "args": tuple(state.args),
            "metadata": dict(state.metadata or {})})


def _typing_pipeline(options):
    base = _mlir_compiler.get_compiler_class(options)

    class TypingPipeline(base):
        """numba-cuda-mlir's untyped and typed passes (its own in place of
        numba's), stopped where its lowering passes would start."""

        def define_mlir_lowering_pipeline(self, state):
            pm = PassManager("mlir_typing")
            pm.add_pass(_StopBeforeLowering, "stop before lowering")
            pm.finalize()
            return pm

    return TypingPipeline


def _lowering_pipeline(options):
    base = _mlir_compiler.get_compiler_class(options)

    class LoweringPipeline(base):
        """numba-cuda-mlir's lowering passes alone, on typed IR."""

        def define_pipelines(self):
            return [self.define_mlir_lowering_pipeline(self.state)]

    return LoweringPipeline


class TypedKernel:
    """numba-cuda-mlir's typed IR of a kernel, which every lowering of it reuses."""

    def __init__(self, qualname: str, pyfunc, state: Dict[str, Any], cc):
        self.qualname, self.pyfunc, self.state = qualname, pyfunc, state
        self.target_reads = targets.pinned(cc)  # (typing is given the target: it serves that one)
        self.proxies: tuple = ()
        self.snapshot_bytes = 0

    @property
    def nbytes(self) -> int:
        return 4096 + 256 * len(self.state["typemap"]) + self.snapshot_bytes


def run_typing(pyfunc, argtypes, config: CompileConfig, qualname: str) -> TypedKernel:
    """Type `pyfunc` (the snapshot's function) for `argtypes` as a kernel."""
    options = typing_options(config)
    if options.get("experimental_ast_transforms") or _reads_experimental(pyfunc):
        raise UnsupportedKernelError(
            f"{qualname} uses numba-cuda-mlir's cuda.experimental (compile-time AST transforms), "
            "whose inputs gpucache_ext cannot key yet; compile it with numba-cuda-mlir's own cuda.jit")
    mlir_target.ensure_initialized()
    register_lowering()
    with answering_host_query(config.cc):
        try:
            function, _ = apply_ast_transforms(pyfunc, options, tuple(argtypes))
            with target_override("numba_cuda_mlir"), _ir.Location.unknown():
                pipeline = _typing_pipeline(options)(
                    mlir_target.typing_context, mlir_target.target_context, None, tuple(argtypes),
                    _types.void, _flags(options), {})
                state = pipeline.compile_extra(function)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise compile_error(qualname, "typing", exc, pyfunc) from exc
    if state["return_type"] not in (_types.void, _types.none):
        raise CompileError(qualname, "typing", "a CUDA kernel must not return a value")
    return TypedKernel(qualname, function, state, config.cc)


def _reads_experimental(pyfunc) -> bool:
    import sys

    experimental = sys.modules.get("numba_cuda_mlir.cuda.experimental")
    if experimental is None:
        return False
    marks = {id(experimental), id(getattr(experimental, "consteval", None)),
             id(getattr(experimental, "local_array_from", None))}
    return any(id(value) in marks for value in getattr(pyfunc, "__globals__", {}).values())


def run_mlir(typed: TypedKernel, config: CompileConfig) -> MLIRArtifact:
    """Lower typed IR for `config` to one MLIR module, as text."""
    options = target_options(config)
    with answering_host_query(config.cc):
        try:
            with target_override("numba_cuda_mlir"), _ir.Location.unknown():
                cres = _lower(typed, options)
            metadata = cres.metadata
            _refuse_what_it_links(typed.qualname, metadata)
            text = get_mlir_module_str(metadata)
            entry = _tools.generate_mangled_name(cres.fndesc.qualname, cres.fndesc.argtypes)
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise compile_error(typed.qualname, "mlir", exc, typed.pyfunc) from exc
    return MLIRArtifact(text, entry, typed.target_reads)


@contextlib.contextmanager
def _numbered_afresh():
    """numba-cuda-mlir numbers static shared arrays, string constants and the
    constant arrays of globals a kernel reads from process-wide counters
    (``lowering.cuda.shmem_id``, ``lowering_utilities.string._counter``,
    ``mlir_lowering.constant_array_id``) into their symbols in the module:
    each kernel's module numbers them from the start here (they are unique
    within it), so the same inputs give the same MLIR, PTX and cubin in every
    compile and every process."""
    from numba_cuda_mlir import mlir_lowering as _constants
    from numba_cuda_mlir._threading import _LockedCounter
    from numba_cuda_mlir.lowering import cuda as _shared
    from numba_cuda_mlir.lowering_utilities import string as _strings

    before = (_shared.shmem_id, _strings._counter, _constants.constant_array_id)
    _shared.shmem_id, _strings._counter, _constants.constant_array_id = 0, _LockedCounter(1), 0
    try:
        yield
    finally:
        _shared.shmem_id, _strings._counter, _constants.constant_array_id = before


def _lower(typed: TypedKernel, options):
    state = typed.state
    pipeline = _lowering_pipeline(options)(
        mlir_target.typing_context, mlir_target.target_context, None, state["args"], state["return_type"],
        _flags(options), {})
    ps = pipeline.state
    ps.func_id = state["func_id"]
    ps.func_ir = state["func_ir"].copy()  # (lowering changes the IR it is given: its own copy)
    ps.typemap = state["typemap"]
    ps.calltypes = state["calltypes"]
    ps.return_type = state["return_type"]
    ps.metadata = {**state["metadata"], "targetoptions": options}
    ps.lifted = ()
    ps.lifted_from = None
    with _numbered_afresh():
        cres = pipeline._compile_core()
    gpu_target = _tools.resolve_gpu_target(options)
    cres.metadata["targetoptions"] = options
    cres.metadata["gpu_target"] = gpu_target
    return cres


def _refuse_what_it_links(qualname: str, metadata) -> None:
    """Code the kernel links besides its own (device functions' LTO-IR, CUDA
    sources, libraries), its memory runtime and cooperative launches are
    not keyed yet: refused by name."""
    linker = metadata.get("linker")
    linked = [*getattr(linker, "_object_codes", ()), *getattr(linker, "_pending_cu", ())]
    if linked or getattr(linker, "_ltoirs", None):
        raise UnsupportedKernelError(
            f"{qualname} links code besides its own under numba-cuda-mlir (link=, declare_device, a library): "
            "not supported by gpucache_ext's mlir backend yet; compile it with numba-cuda-mlir's own cuda.jit")
    if metadata.get("needs_nrt"):
        raise UnsupportedKernelError(
            f"{qualname} allocates memory in the kernel (numba-cuda-mlir's memory runtime): not supported by "
            "gpucache_ext's mlir backend yet")
    if metadata.get("use_cooperative"):
        raise UnsupportedKernelError(
            f"{qualname} synchronises its grid (a cooperative launch): not supported by gpucache_ext's mlir "
            "backend yet")


def run_ptx(mlir: MLIRArtifact, config: CompileConfig, kernel: str) -> PTXArtifact:
    """The MLIR's text, parsed again, through numba-cuda-mlir's pass pipeline
    and its code generation: PTX, or LTO-IR with ``lto``."""
    options = target_options(config)
    sm = str(config.sm)
    debug = bool(options.get("debug"))
    with answering_host_query(config.cc):
        try:
            module = _ir.Module.parse(mlir.text)
            passes = _MLIRPassManager.parse(_optimization.get_base_pipeline())
            passes.run(module.operation)
            if debug:
                _optimization._emit_deferred_dbg_declares(module)
            run_pre_codegen_patterns(module)
            if _optimization._needs_llvm70_path(sm):
                code = _optimization._call_llvm70_capi(module, options, gen_lto=config.lto)
            else:
                nvvm_ir = _optimization._prepare_llvm_ir(
                    module, preserve_debug_info=debug or bool(options.get("lineinfo")))
                nvvm_options = _optimization._nvvm_options(sm, options)
                code = (_optimization._compile_to_ltoir(nvvm_ir, LibDevice(), nvvm_options) if config.lto
                        else _optimization._compile_to_ptx(nvvm_ir, sm, LibDevice(), nvvm_options))
        except (CompileError, UnsupportedKernelError):
            raise
        except Exception as exc:
            raise compile_error(kernel, "ptx", exc) from exc
    if config.lto:
        return PTXArtifact((), bytes(code), mlir.entry_name)
    return PTXArtifact((bytes(code).decode(),), None, mlir.entry_name)


def _linker(config: CompileConfig, options) -> Linker:
    """numba-cuda-mlir's linker as its lowering makes it (`MLIRLower`), for
    the target itself, verbose: nvJitLink's log then says what the kernel uses
    (registers, spills); the code is the same (CUDA 13's nvJitLink writes its
    command line into a note of the cubin, so there the bytes differ in it).  nvJitLink takes
    -O0 and -O3 alone (numba-cuda-mlir 0.6 passes it opt_level 1 and 2 too,
    and its link fails): levels 1 and 2 link at 3."""
    level = int(options.get("opt_level", 3))
    return Linker(cc=config.cc, arch=config.sm_name, verbose=True,
                  optimization_level=0 if level == 0 else 3, debug=bool(options.get("debug")),
                  lineinfo=bool(options.get("lineinfo")), ptxas_options=options.get("ptxas_options"),
                  max_registers=options.get("max_registers"))


def run_cubin(ptx: PTXArtifact, config: CompileConfig, kernel: str) -> CubinArtifact:
    """nvJitLink, through numba-cuda-mlir's linker, as its `optimize` links."""
    options = target_options(config)
    with answering_host_query(config.cc):
        try:
            base = _linker(config, options)
            if ptx.ltoir is not None:
                linker = base.recreate_with_lto(kernel_ltoir=ptx.ltoir)
            else:
                linker = base.recreate_with_lto()
                linker.add_ptx(ptx.ptx[0].encode())
            code = linker.complete()
            log = linker.info_log or ""
        except Exception as exc:
            raise compile_error(kernel, "cubin", exc) from exc
    return CubinArtifact(bytes(code.code), log if isinstance(log, str) else log.decode(), None, ptx.entry_name)


# modules whose registrations are numba-cuda-mlir's own (or the functions it types: numpy's, math's)
_OWN_MODULES = frozenset({"numba_cuda_mlir", "numba", "numpy", "math", "cmath", "builtins", "operator", "ctypes",
                          "cffi", "gpucache_ext"})
_EXTENSIONS_SEEN: Dict[tuple, Tuple[str, ...]] = memos.memo(
    "backends.numba_cuda_mlir.compiler._EXTENSIONS_SEEN", {})  # (the registries and their sizes) -> user code's


def user_extensions() -> Tuple[str, ...]:
    """What user code registered in numba-cuda-mlir's extension registries
    (an overload, a typing or lowering of its own, installed in its typing
    or target context): typing reads them, and no token covers them yet.
    Worked out again only when a registry was installed or grew."""
    from numba_cuda_mlir import extending

    # (its own registries, read at the contexts' first use, and those installed in the contexts since:
    # contexts not made yet hold none, and are not made here, which takes numba-cuda-mlir a second)
    registries = [extending.typing_registry, extending.lowering_registry]
    for context in (mlir_target._typingctx, mlir_target._targetctx):
        registries += list(getattr(context, "_registries", None) or ())
    key = tuple((id(registry), *(len(getattr(registry, name, ()) or ()) for name in _REGISTRY_LISTS))
                for registry in registries)
    found = _EXTENSIONS_SEEN.get(key)
    if found is None:
        found = []
        for registry in dict.fromkeys(registries):
            for entry in _registry_entries(registry):
                code = _origin(entry)
                module = getattr(code, "__module__", None)
                if module and module.split(".")[0] not in _OWN_MODULES:
                    found.append(f"{getattr(code, '__qualname__', type(code).__name__)} in {module}")
        found = _EXTENSIONS_SEEN[key] = tuple(dict.fromkeys(found))
    return found


_REGISTRY_LISTS = ("functions", "attributes", "globals", "getattrs", "setattrs", "casts", "constants")


def _registry_entries(registry):
    for name in _REGISTRY_LISTS:
        for entry in getattr(registry, name, ()) or ():
            if isinstance(entry, tuple):  # (lowering: (implementation, key, signature); globals: (value, template))
                yield entry[-1] if name == "globals" else entry[0]
            else:
                yield entry


def _origin(entry):
    """The code behind a registration (an overload's function, a template's
    typing, a lowering implementation), else the entry itself."""
    for attribute in ("_overload_func", "generic", "_impl", "_defn"):
        found = getattr(entry, attribute, None)
        if callable(found) and getattr(found, "__module__", None):
            return found
    return entry


def normalize_signature(sig) -> tuple:
    """`sig` as numba-cuda-mlir's argument types: its signature string
    ("void(float32[:], float32)"), or a tuple of its types."""
    if isinstance(sig, str) or hasattr(sig, "args"):
        try:
            argtypes, return_type = sigutils.normalize_signature(sig)
        except Exception as exc:
            raise TypeError(f"invalid kernel signature {sig!r}: {exc}") from exc
        if return_type not in (None, _types.void, _types.none):
            raise TypeError(f"a kernel returns nothing: {sig!r} returns {return_type}")
        return tuple(argtypes)
    return tuple(each if isinstance(each, _types.Type) else _namesake_type(each) for each in sig)


def _namesake_type(given):
    """numba-cuda-mlir's type for `given`, numba-cuda's (the argument types
    of a numba-cuda kernel's launch, compiled in a sweep --backend
    numba-cuda,mlir): scalars by name, arrays by dtype, dimensions, layout
    and mutability; anything else refused."""
    if type(given).__name__ == "Array" and hasattr(given, "dtype") and hasattr(given, "ndim"):
        return _types.Array(_namesake_type(given.dtype), given.ndim, given.layout, readonly=not given.mutable,
                            aligned=given.aligned)
    found = getattr(_types, str(given), None) if type(given).__module__.startswith("numba.") else None
    if isinstance(found, _types.Type) and type(found).__name__ == type(given).__name__:
        return found
    raise TypeError(
        f"{given!r} is no numba-cuda-mlir type: give the signature as a string "
        "(\"void(float32[:], float32)\") or with numba_cuda_mlir's types")


def settings() -> Dict[str, Any]:
    """What numba-cuda-mlir reads of the process besides a kernel's inputs and
    options: its configuration's values (from NUMBA_* variables at import,
    which code may change), the NUMBA_* and LIBLLVM7 variables it reads as it
    compiles, and where it looks for the CUDA toolkit."""
    from numba_cuda_mlir.numba_cuda.core import config

    values = {f"config.{name}": value for name, value in vars(config).items()
              if name.isupper() and isinstance(value, (bool, int, float, str, type(None)))}
    values.update((f"environment {name}", value) for name, value in os.environ.items()
                  if name.startswith("NUMBA_") or name in ("LIBLLVM7", "CUDA_HOME", "CUDA_PATH"))
    return dict(sorted(values.items()))
