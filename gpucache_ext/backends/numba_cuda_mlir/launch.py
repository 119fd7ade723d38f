"""numba-cuda-mlir kernels launched through its own dispatcher and C++
launcher, with the cubins the pipeline built (`MlirKernel`, `jit`).

numba-cuda-mlir's dispatcher asks its cache (``MLIRDispatcher._cache``,
`load_overload`) for a compiled overload before it compiles one, at a launch
with new argument types and at ``compile(sig)``: here that hook answers from a
`KernelCache` (`_PipelineHook`), as numba-cuda's `load_overload` does for
numba-cuda's kernels.  Everything else, the argument marshalling, the
allocations and copies, the loads and the launch, is numba-cuda-mlir's own,
so a kernel launches as it would without the cache (tests/test_mlir_launch.py
compares the driver calls on the recording stand-in driver).

A kernel re-checks what it was built from (its globals, its options) at its
first launch after `launch.registry.refresh_all` (the magic calls it after
each cell): a result whose inputs changed is dropped, numba-cuda-mlir's
launch caches with it (``recompile``), and the next launch compiles through
the cache again.  numba-cuda-mlir has no simulator: without a GPU a launch
fails with its own driver error, which says so.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Optional, Tuple

from numba_cuda_mlir.caching import CachedCompileResult
from numba_cuda_mlir.descriptor import MLIRDispatcher
from numba_cuda_mlir.decorators import mlir_jit
from numba_cuda_mlir.numba_cuda import types as _types
from numba_cuda_mlir.numba_cuda import typing as _typing
from numba_cuda_mlir.numba_cuda.core import sigutils

from ...errors import GpuCacheError, UnsupportedKernelError
from ...keys.config import CompileConfig
from ...launch import registry
from . import compiler

# numba-cuda-mlir's options the config has a field for, and that field
_FIELDS = {"opt_level": "opt", "fastmath": "fastmath", "debug": "debug", "lineinfo": "lineinfo",
           "max_registers": "max_registers", "launch_bounds": "launch_bounds", "lto": "lto"}
# what its decorator sets itself (or only tells it about the function), whatever the user gave
_OWN = frozenset({"opt", "fast_math", "chip", "cc", "device", "nopython", "no_cpython_wrapper", "_nrt",
                  "signature", "cache", "_lto_explicit", "abi", "abi_info", "help"})


def config_of(targetoptions: Dict[str, Any], sm: Optional[int] = None) -> CompileConfig:
    """The config a numba-cuda-mlir kernel's options (its ``cuda.jit``'s, as
    `verify_target_options` made them) give; an option the cache cannot key
    is refused by name."""
    from numba_cuda_mlir.decorators import _get_schema

    defaults = {option.name: option.default_value for option in _get_schema()}
    fields: Dict[str, Any] = {}
    for name, value in targetoptions.items():
        if name in _FIELDS:
            if value is not None:
                fields[_FIELDS[name]] = value
        elif name not in _OWN and name in defaults and value != defaults[name] and value not in ([], (), None):
            raise UnsupportedKernelError(
                f"numba-cuda-mlir's option {name}={value!r} is not keyed by gpucache_ext yet; leave it out, or "
                f"launch the kernel with numba-cuda-mlir's own cuda.jit")
    bounds = fields.get("launch_bounds")
    if isinstance(bounds, int):
        fields["launch_bounds"] = (bounds,)
    return CompileConfig(sm=sm if sm is not None else 86, backend="mlir", **fields)


def config_over(config: CompileConfig, targetoptions: Dict[str, Any]) -> CompileConfig:
    """`config` (a warm's flags) with a numba-cuda-mlir kernel's own options
    over it, where they are not the defaults (its decorator's win, as
    numba-cuda's do: `options.config_with_options`)."""
    own = config_of(targetoptions, config.sm)
    default = CompileConfig(sm=config.sm)
    given = {name: getattr(own, name) for name in ("opt", "fastmath", "debug", "lineinfo", "max_registers",
                                                     "launch_bounds", "lto")
             if getattr(own, name) != getattr(default, name)}
    return config.replace(backend="mlir", **given)


class _Overload(CachedCompileResult):
    """An overload the cache answered (numba-cuda-mlir's `CachedCompileResult`),
    with the type annotation a compile of numba-cuda-mlir's own has
    (``kernel.inspect_types()``), made when first asked."""

    def __init__(self, signature, metadata, typed):
        super().__init__(signature, metadata)
        self._typed = typed

    @property
    def type_annotation(self):
        """numba's annotation of the typed IR, as its AnnotateTypes pass makes it."""
        from numba_cuda_mlir.numba_cuda.core.annotations import type_annotations

        state = self._typed().state
        return type_annotations.TypeAnnotation(
            func_ir=state["func_ir"].copy(), typemap=state["typemap"], calltypes=state["calltypes"],
            lifted=state.get("lifted", ()), lifted_from=state.get("lifted_from"), args=state["args"],
            return_type=state["return_type"], html_output=None)


class _PipelineHook:
    """What numba-cuda-mlir asks of a dispatcher's cache (its `Cache`'s
    interface): `load_overload` answered by the kernel's `KernelCache`;
    nothing is saved by numba-cuda-mlir (the cache filed every stage)."""

    cache_path = "gpucache_ext (KernelCache)"

    def __init__(self, kernel: "MlirKernel"):
        self._kernel = kernel

    def load_overload(self, sig, target_context):
        return self._kernel._load(sig)

    def save_overload(self, sig, cres) -> None:
        return None

    def flush(self) -> None:
        return None


class MlirKernel(MLIRDispatcher):
    """A numba-cuda-mlir kernel whose overloads come from a `KernelCache`:
    numba-cuda-mlir's own dispatcher (launch it as any: ``kernel[grid,
    block](args)``), with ``results`` (its `CompileResult` per argument
    types) and ``last`` (the latest)."""

    def __init__(self, source: MLIRDispatcher, cache, config: Optional[CompileConfig] = None, *,
                 overrides: Optional[Dict[str, Any]] = None, on_compile=None):
        super().__init__(source.py_func, targetoptions=dict(source.targetoptions))
        self.source = source
        self.cache = cache
        self.pinned = config  # (None: the options of the kernel, for the GPU it launches on)
        self.overrides = dict(overrides or {})  # fields set over its options (a cell's flags; sm: pinned)
        self.on_compile = on_compile  # told each result compiled for a launch or compile()
        self.results: Dict[Tuple, Any] = {}
        self.last = None
        self._checked: Optional[int] = None  # (the first launch checks, as after a cell)
        self._check_lock = threading.Lock()
        self._cache = _PipelineHook(self)

    def enable_caching(self):  # (its cache=True: every kernel here is cached)
        return None

    @property
    def config(self) -> CompileConfig:
        """The config its launches compile for: the one given, else its
        options' for the current GPU's target."""
        if self.pinned is not None:
            return self.pinned
        sm = self.overrides.get("sm")
        return config_of(self.source.targetoptions, sm if sm is not None else _device_sm()).replace(
            **{name: value for name, value in self.overrides.items() if name != "sm"})

    def _resolve_target_options(self):
        """numba-cuda-mlir names the target in its options before it compiles
        (asking the driver): a pinned config's, else the GPU's."""
        self.targetoptions["chip"] = self.config.sm_name

    def _load(self, sig):
        argtypes, _ = sigutils.normalize_signature(sig)
        argtypes = tuple(argtypes)
        result = self.cache.compile(self.source, argtypes, self.config)
        self.results[argtypes] = self.last = result
        if self.on_compile is not None:
            self.on_compile(result)
        options = compiler.target_options(result.config)
        return _Overload(_typing.signature(_types.none, *argtypes), {
            "cubin": result.cubin, "ptx": result.ptx, "ltoir": None, "func_name": result.entry_name,
            "mlir_module_optimized": None, "needs_nrt": False, "nrt_inline": None,
            "targetoptions": options, "gpu_target": None}, lambda: self._typed(result))

    def _typed(self, result) -> "compiler.TypedKernel":
        """The typed IR `result` was built from: the typing entry its compile
        kept in memory, else the kernel typed again as it stands."""
        entry = self.cache.entry("typing", result.stages["typing"].token)
        typed = getattr(entry, "artifact", None)
        if isinstance(typed, compiler.TypedKernel):
            return typed
        return compiler.run_typing(self.py_func, result.signature, result.config, result.kernel)

    def configure(self, *args, **kwargs):
        if self._checked != registry.generation:
            _require_gpu()
            self._recheck()
        return super().configure(*args, **kwargs)

    def _recheck(self) -> None:
        """At the first launch since a cell ran: where any result's inputs
        changed, numba-cuda-mlir forgets what it loaded (`recompile`), and
        the next launch of each compiles through the cache again."""
        with self._check_lock:
            generation = registry.generation
            config = self.config
            stale = [argtypes for argtypes, result in self.results.items()
                     if not self.cache.still_current(self.source, argtypes, config, result)]
            if stale:
                for argtypes in stale:
                    del self.results[argtypes]
                self.recompile()
            self._checked = generation


def _require_gpu() -> None:
    """Refuse a launch without a GPU, saying so (numba-cuda-mlir has no simulator)."""
    from numba_cuda_mlir.numba_cuda.cudadrv.driver import driver

    if not driver.is_available:
        why = " ".join(str(driver.initialization_error or "").split()) or "no CUDA driver"
        raise GpuCacheError(
            f"launching a numba-cuda-mlir kernel needs an NVIDIA GPU and its driver ({why}); numba-cuda-mlir "
            "has no simulator (numba-cuda's has: NUMBA_ENABLE_CUDASIM=1 with numba.cuda.jit kernels).  "
            "Without a GPU its kernels still compile: kernel.compile(sig) with jit(..., config=CompileConfig(sm=86))")


def _device_sm() -> int:
    """The current GPU's target, as numba-cuda-mlir asks the driver for it;
    without one, ``GPUCACHE_SM``, else 86 (as for numba-cuda's kernels)."""
    from numba_cuda_mlir.numba_cuda.cudadrv.driver import driver

    from ...keys.config import parse_sm
    from .. import backend

    if not driver.is_available:
        return backend("mlir").default_sm()
    return parse_sm(compiler._tools.get_gpu_compute_capability(tuple))


@contextlib.contextmanager
def jit_replaced(stand_in):
    """numba-cuda-mlir's ``cuda.jit`` is `stand_in` while the block runs (a
    %%gpukernel cell's: `ipython.cell.MlirCellJit`), and its own after;
    yields its own.  The one attribute of numba-cuda-mlir replaced outside a
    compile (inside one, its host query's answer: `compiler.answering_host_query`)."""
    from numba_cuda_mlir import cuda

    cuda.jit = stand_in
    try:
        yield mlir_jit
    finally:
        cuda.jit = mlir_jit


def jit(func_or_sig=None, *, cache=None, config: Optional[CompileConfig] = None, **options):
    """numba-cuda-mlir's ``cuda.jit`` (same forms and options), its kernels'
    overloads compiled through `cache` (default: `gpucache_ext.default_cache()`);
    ``config`` pins the target and fields instead of the kernel's options for
    the GPU it launches on.  Kernels with a signature compile when decorated,
    as numba-cuda-mlir's do."""
    if cache is None:
        from ...defaults import default_cache

        cache = default_cache()

    def decorate(func):
        source = func if isinstance(func, MLIRDispatcher) else mlir_jit(**options)(func)
        if source.targetoptions.get("device"):
            return source  # (a device function: a kernel that calls it compiles it)
        kernel = MlirKernel(source, cache, config)
        for sig in signatures:
            kernel.compile(sig)
        if signatures:  # (those alone, as numba-cuda-mlir's decorator compiles them and no other)
            kernel.disable_compile()
            kernel._specialized = True
        return kernel

    signatures: Tuple = ()
    if func_or_sig is None:
        return decorate
    if isinstance(func_or_sig, (str, list)) or sigutils.is_signature(func_or_sig):
        signatures = tuple(func_or_sig) if isinstance(func_or_sig, list) else (func_or_sig,)
        return decorate
    return decorate(func_or_sig)
