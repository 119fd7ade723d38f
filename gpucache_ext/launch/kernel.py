"""Launchable kernels: numba-cuda's own dispatcher, loading every variant
from a `KernelCache`; on numba's CUDA simulator where there is no GPU.

A `Kernel` is a ``numba.cuda`` dispatcher (``CUDADispatcher``) whose cache
numba asks before it compiles: each variant numba would compile comes from
the `KernelCache` instead (typing, LLVM, PTX, cubin, each stage cached), as a
`CachedKernel` (numba's ``_Kernel``, plus the `CompileResult`).  Everything
else is numba's own code: picking the variant for the arguments, marshalling
them, streams, ``forall``, ``specialize``, ``configure``, binding (module
setup, the shared-memory carveout), pre-launch callbacks and the launch.

What the cache adds on top:

- the image for the current device: a variant keeps one image per device
  architecture (`CachedCodeLibrary`); a kernel whose target was not given
  (see `gpucache_ext.launch.device.default_sm`) compiles the device's architecture
  through the cache when it meets a new one; a kernel whose target was
  given runs its cubin, its fatbin, or PTX for the driver where that is
  valid, and otherwise refuses with the ``--sm`` to use (`image_for`);
- globals and device functions are re-checked at a kernel's first launch
  after `refresh_all()` (the magic calls it after every cell), so an edit in
  another cell recompiles what uses it; between refreshes launches cost no
  lookup; a sweep's other variants are re-checked the same way at the first
  `Kernel.variants` read since a cell, and at `Kernel.use`, and compiled
  again where stale (views that only show results, the cell's report and the
  inspector, mark a stale one instead: `stale_reasons`);
- without a GPU, or with ``simulate=True``, launches run on numba's CUDA
  simulator (the variant is still compiled, cached and inspectable).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import weakref
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from numba.cuda.codegen import CUDACodeLibrary
from numba.cuda.dispatcher import CUDADispatcher, _DispatcherBase, _Kernel

from ..cache import CompileResult, KernelCache
from ..config import CompileConfig
from .device import device_cc, gpu_available
from ..errors import CompileError, ConfigError, GpuCacheError, as_numba_raises
from ..options import config_with_options
from ..results import FatbinResult, short_signature
from .simulator import notice_simulator, simulated_kernel
from .spec import KernelSpec
from ..sources.functions import python_function
from ..stages import normalize_signature

_generation = 0


def refresh_all() -> None:
    """Make every kernel re-check its inputs (globals, device functions) at its
    next launch, and at its next `Kernel.variants` or `Kernel.use`."""
    global _generation
    _generation += 1


class Variant(NamedTuple):
    """One variant of a sweep (`Kernel.variants`).  Its `results` are current:
    `Kernel.variants` re-checks each against the kernel's inputs as a launch
    does, and compiles again (through the cache) the ones whose inputs changed."""

    config: CompileConfig
    results: Dict[Tuple, CompileResult]  # by signature (argument types)
    bound: bool  # the one launches use


# Every live Kernel (`live_kernels`), and which one compiled each live result
# (`compiled_by`): what a view that holds only results (the cell's report, the
# inspector) re-checks them with.  Keyed by id, each entry checked against its
# weak reference (an id is reused once its object is gone).
_kernels: "weakref.WeakSet[Kernel]" = weakref.WeakSet()
_compiled_by: Dict[int, Tuple[Any, Any]] = {}


def _note_compiled(kernel: "Kernel", result: CompileResult) -> None:
    key = id(result)

    def gone(ref, key=key):
        if _compiled_by.get(key, (None,))[0] is ref:
            _compiled_by.pop(key, None)

    _compiled_by[key] = (weakref.ref(result, gone), weakref.ref(kernel))


def compiled_by(result: CompileResult) -> Optional["Kernel"]:
    """The live `Kernel` that compiled `result` (None where none is known)."""
    found = _compiled_by.get(id(result))
    if found is None or found[0]() is not result:
        return None
    return found[1]()


def live_kernels(cache: Optional[KernelCache] = None) -> "list[Kernel]":
    """The Kernels alive in this process (those compiling through `cache` where given)."""
    return [kernel for kernel in list(_kernels) if cache is None or kernel.cache is cache]


def stale_reasons(result: CompileResult) -> Optional[Tuple[str, ...]]:
    """Whether `result` is still what its kernel's inputs compile to now
    (`Kernel.changed_since`): () where it is, what changed where it is not
    ("global K 2.5 -> 3.25"), None where no live kernel compiled it (nothing
    to check it against).  Compiles nothing."""
    kernel = compiled_by(result)
    return None if kernel is None else kernel.changed_since(result)


class LaunchError(GpuCacheError):
    """A kernel cannot be launched as asked (no matching signature, wrong target)."""


class CachedKernel(_Kernel):
    """One compiled variant, as numba's dispatcher holds it (``overloads[sig]``,
    numba's ``_Kernel``): built from a `CompileResult` instead of compiled by
    numba.  It answers the result's attributes too (``.ptx``, ``.cubin``,
    ``.resources``, ``.stages``...), and its resource figures come from the
    compile where no GPU has loaded it."""

    def __init__(self, owner: "Kernel", result: CompileResult):  # numba's compiling __init__ is not called
        from numba.cuda import types as nbtypes
        from numba.cuda import typing as nbtyping

        # the fields numba's own cache-loading path (_Kernel._rebuild) sets
        self.entry_point = None
        self.objectmode = False
        self.cooperative = result.cooperative
        self.entry_name = result.entry_name
        self.signature = nbtyping.signature(nbtypes.void, *result.signature)
        self._type_annotation = None
        self._codelibrary = CachedCodeLibrary(owner, result)
        self.debug = result.config.debug
        self.lineinfo = result.config.lineinfo
        self.call_helper = result.call_helper
        self.extensions = list(owner.options.get("extensions") or ())
        carveout = owner.options.get("shared_memory_carveout")
        self.shared_memory_carveout = None if carveout is None else self._parse_carveout(carveout)
        self.launch_config_sensitive = False
        self.result = result

    @property
    def audit_mismatched(self) -> bool:
        """Whether an audit found the cached artifacts wrong (the result then holds fresh ones)."""
        audit = self.result.audit
        return audit is not None and audit.mismatched

    def _figure(self, attribute: str, name: str) -> int:
        """The driver's figure once a GPU has loaded the kernel, else the compile's."""
        if self._codelibrary.loaded:
            return getattr(self._codelibrary.get_cufunc().attrs, attribute)
        return self.result.resources[name]

    regs_per_thread = property(lambda self: self._figure("regs", "registers"),
                               doc="Registers per thread (nvJitLink's report, or the driver's).")
    shared_mem_per_block = property(lambda self: self._figure("shared", "shared_bytes"),
                                    doc="Static shared memory per block, in bytes.")
    local_mem_per_thread = property(lambda self: self._figure("local", "local_bytes"),
                                    doc="Local memory per thread, in bytes.")
    const_mem_size = property(lambda self: self._figure("const", "user_constant_bytes"),
                              doc="User constant memory in bytes (kernel parameters not counted).")

    @property
    def max_threads_per_block(self) -> int:
        """The most threads a block can have: the driver decides when it loads the kernel."""
        if not self._codelibrary.loaded:
            raise LaunchError(
                f"{self.result.kernel.rsplit('.', 1)[-1]}.get_max_threads_per_block() needs a GPU (the driver "
                "computes it when the kernel is loaded); registers and memory use are in .resources")
        return self._codelibrary.get_cufunc().attrs.maxthreads

    def max_cooperative_grid_blocks(self, blockdim, dynsmemsize=0) -> int:
        """The most blocks a cooperative (grid-synchronised) launch can have:
        the driver's figure on a GPU (numba's own query); 1 on the simulator,
        as numba's simulator says (it cannot synchronise blocks)."""
        if self._codelibrary._owner._on_simulator():
            return 1
        return super().max_cooperative_grid_blocks(blockdim, dynsmemsize)

    def inspect_llvm(self) -> str:
        return self.result.llvm_ir

    def inspect_asm(self, cc=None) -> str:
        return self.result.ptx

    def __repr__(self):
        return f"<compiled {self.result.kernel.rsplit('.', 1)[-1]}{self.result.signature_text}>"


# The CompileResult's attributes a variant answers too (a FatbinResult's where
# it is one).  Properties, not __getattr__: a class with __getattr__ makes
# every attribute read slower, and numba reads many at every launch.
_RESULT_ATTRIBUTES = (
    "ptx", "cubin", "cubins", "llvm_ir", "ltoir", "link_log", "links", "resources", "resources_by_arch",
    "stages", "layers", "hit", "every_stage", "config", "kernel", "signature_text", "explain", "artifacts",
    "audit", "referenced", "generic_tokens", "seconds", "saved_seconds",
    "fatbin", "fatbin_stage", "members", "per_target", "ptx_note", "targets")


def _forwarded(name: str) -> property:
    return property(lambda self: getattr(self.result, name), doc=f"The CompileResult's {name}.")


for _name in _RESULT_ATTRIBUTES:
    setattr(CachedKernel, _name, _forwarded(_name))


class CachedCodeLibrary(CUDACodeLibrary):
    """numba's code library for one cached variant: the image numba loads on a
    device is the one `Kernel.image_for` chooses for that device's
    architecture, made once per architecture (numba loads it once per device)."""

    def __init__(self, owner: "Kernel", result: CompileResult):
        from numba.cuda.descriptor import cuda_target

        super().__init__(cuda_target.target_context.codegen(), result.kernel, entry_name=result.entry_name,
                         max_registers=result.config.max_registers)
        self._owner = owner
        self._result = result
        self.use_cooperative = result.cooperative
        self._finalized = True

    @property
    def loaded(self) -> bool:
        """Whether a GPU has loaded this variant."""
        return bool(self._cufunc_cache)

    def get_cubin(self, cc=None):
        cc = self._ensure_cc(cc)
        image = self._cubin_cache.get(cc)
        if image is None:
            image = self._cubin_cache[cc] = self._owner.image_for(self._result, tuple(cc[:2]))
        return image

    def get_llvm_str(self):
        return self._result.llvm_ir

    def get_asm_str(self, cc=None):
        return self._result.ptx


class _CacheSource:
    """What numba's dispatcher takes for its cache: it asks ``load_overload``
    before it compiles, and the answer always comes from the `KernelCache`."""

    def __init__(self, kernel: "Kernel"):
        self._kernel = kernel

    def load_overload(self, sig, target_context):
        return self._kernel._load(normalize_signature(sig))

    def save_overload(self, sig, data):  # never reached: every variant is loaded
        pass

    def flush(self):
        pass


class _NotOffered:
    """A part of numba's dispatcher a Kernel leaves out: reading it raises
    AttributeError, saying what to use instead."""

    def __init__(self, name: str, instead: str):
        self.name = name
        self.instead = instead

    def __get__(self, instance, owner=None):
        raise AttributeError(f"gpucache_ext.Kernel does not offer numba's {self.name}: {self.instead}")


# Parts of numba's dispatcher API a Kernel leaves out, and what to use instead.
_NUMBA_ONLY = {
    "inspect_sass_cfg": "use .inspect_sass()",
    "get_metadata": "use .last (the CompileResult) and .inspect()",
    "stats": "use the cache's statistics: kernel.cache.stats() or %gpucache stats",
    "enable_caching": "every kernel is cached by gpucache_ext already",
    "recompile": "use .compile(sig, force=True), or %%gpukernel --force",
    "get_compile_result": "use .compile(sig), which returns the compiled variant and its CompileResult",
    "mark_launch_config_sensitive": "kernels that read the launch configuration are not supported",
}



@contextlib.contextmanager
def _raised_as_numba():
    """A compile that a launch needs and that fails raises what numba raises
    at such a launch (its TypingError...), chained from the CompileError."""
    try:
        yield
    except CompileError as exc:
        shown = as_numba_raises(exc)
        if shown is exc:
            raise
        raise shown from exc


class Kernel(CUDADispatcher):
    """A numba-cuda dispatcher whose variants come from a `KernelCache`.

    `config` and `targets` say what to build (`targets`: several, as a
    fatbin); `options` are ``@cuda.jit`` options, which override the config.
    With neither a config nor targets, the target is `default_sm()`'s and
    follows the device (`pinned` False); a given target is pinned.
    `signatures` are compiled by `compile_declared` (the magic and
    `gpucache_ext.jit` call it), and then only they launch, as with numba;
    `specialized` (numba's ``@jit("sig")``, one signature not in a list):
    launches take the one variant without dispatching on the arguments.
    """

    def __init__(self, func, signatures: Sequence = (), config: Optional[CompileConfig] = None,
                 cache: Optional[KernelCache] = None, options: Optional[Dict[str, Any]] = None, *,
                 spec: Optional[KernelSpec] = None, on_compile: Optional[Callable[[CompileResult, str], None]] = None,
                 specialized: bool = False, **settings):
        """`spec`, or its fields as keywords (`KernelSpec.make`: ``targets``,
        ``pinned``, ``variants``, ``blocks``, ``dynamic_shared``,
        ``simulate``, ``force``, ``audit``) with `config`."""
        if spec is None:
            spec = KernelSpec.make(config, **settings)
        elif config is not None or settings:
            raise TypeError("Kernel: give spec= or the config and settings it holds, not both")
        self.spec = spec
        py_func = python_function(func)
        self.options = dict(options or {})
        self.pinned = spec.pinned
        self.config = config_with_options(spec.config, self.options)
        # several targets (a `Targets`): each signature compiles to a fatbin
        # (`KernelCache.compile_fatbin`), and the config's sm is the lowest target
        self.targets = spec.targets
        if self.targets is not None:
            self.config = self.config.replace(sm=self.targets.sms[0])
        super().__init__(py_func, _target_options(self.config, self.options))
        self._cache = _CacheSource(self)
        # one signature, launched without dispatch: numba's @jit("sig") (a list is dispatched)
        self._specialized = specialized
        self.cache = cache if cache is not None else _default_cache()
        self.simulate = spec.simulate
        # told of each compile with what made it ("at this launch", "as its variants were read")
        self.on_compile = on_compile
        self._occasion = threading.local()
        self.force = spec.force
        self.audit = spec.audit
        self.declared = tuple(normalize_signature(sig) for sig in signatures)
        self.results: Dict[Tuple, CompileResult] = {}
        # a sweep's variants (`gpucache_ext.sweeps`): the configs compiled
        # besides the bound one (`use` binds another), each with its results
        sweep = [config_with_options(v, self.options) for v in spec.variants] or [self.config]
        if self.targets is not None:
            sweep = [v.replace(sm=self.targets.sms[0]) for v in sweep]
        self.sweep: Tuple[CompileConfig, ...] = tuple(dict.fromkeys([self.config, *sweep]))
        self._variant_results: Dict[CompileConfig, Dict[Tuple, CompileResult]] = {}
        self.blocks: Tuple[int, ...] = spec.blocks
        self.dynamic_shared = spec.dynamic_shared
        self._generation = -1  # refresh_all's count when the bound variant was last checked
        # ... and when `variants` last checked every variant (results made in this cell are of its state)
        self._variants_generation = _generation
        self._forced = set()
        self._simulated = None
        self._lock = threading.RLock()
        _kernels.add(self)

    @property
    def _link(self):
        return self.options.get("link") or ()

    def _on_simulator(self) -> bool:
        return self.simulate or not gpu_available()

    # -- compiling -------------------------------------------------------------
    def compile(self, sig, force: bool = False) -> CachedKernel:
        """The variant for one signature, compiled (or found in the cache) now:
        numba's ``compile``, also with the `CompileResult`'s attributes."""
        argtypes = normalize_signature(sig)
        with self._lock:
            if force:
                self._forced.add(argtypes)
                self._drop({argtypes})
            if self._specialized and argtypes not in self.overloads:  # numba hands back its one variant
                self.add_overload(self._load(argtypes), argtypes)
            return super().compile(argtypes)

    def compile_declared(self, force: bool = False):
        """Compile every signature given to the decorator (or with ``--sig``),
        except those already checked since the last `refresh_all`; then, as
        numba, launches take only these."""
        with self._lock:
            if not force:
                self._recheck()
            kernels = [self.compile(argtypes, force) for argtypes in self.declared]
            if self.declared:
                self.disable_compile()
            results = [kernel.result for kernel in kernels]
            for config in self.sweep:  # a sweep's other variants: compiled (cached), not bound
                if config == self.config:
                    continue
                built = self._variant_results.setdefault(config, {})
                for argtypes in self.declared:
                    if force or argtypes not in built:
                        built[argtypes] = self._compile_result(argtypes, config, force)
                        self._compiled(built[argtypes])
            return results

    @property
    def variants(self) -> "list[Variant]":
        """A sweep's variants (``--max-registers 32,64 --fastmath off,on``),
        the bound one first: each config and what it compiled, by signature
        (a lazy kernel's other variants compile once `use` binds them).

        Every result listed is current: at the first read since a cell ran
        (`refresh_all`) each is re-checked against the kernel's inputs as a
        launch re-checks the bound one (``cache.still_current``), and one
        whose inputs changed (a global, a device function) is dropped and
        compiled again through the cache (only the stages whose inputs
        changed compile; a `CompileError` of the new state is raised, as a
        launch would).  Between cells a read checks nothing."""
        with self._lock:
            self._refresh_variants()
            return [Variant(config, dict(self.results) if config == self.config
                            else dict(self._variant_results.get(config, {})), config == self.config)
                    for config in sorted(self.sweep, key=lambda c: c != self.config)]

    def _compiled(self, result: CompileResult) -> None:
        if self.on_compile is not None:
            self.on_compile(result, getattr(self._occasion, "text", "at this launch"))

    @contextlib.contextmanager
    def _compiling(self, occasion: str):
        """What compiles inside is told to `on_compile` as made `occasion`."""
        before = getattr(self._occasion, "text", "at this launch")
        self._occasion.text = occasion
        try:
            yield
        finally:
            self._occasion.text = before

    def _refresh_variants(self) -> None:
        """Once per cell: re-check every variant's results, compiling the stale ones again."""
        if self._variants_generation == _generation:
            return
        with self._compiling("as its variants were read"):
            self._refresh_each_variant()

    def _refresh_each_variant(self) -> None:
        self._recheck()  # the bound variant, as a launch checks it
        self._reload_stale()  # (a signature the re-check dropped)
        for config, results in self._variant_results.items():
            for argtypes, result in list(results.items()):
                if not self._current(argtypes, config, result):
                    results[argtypes] = self._compile_result(argtypes, config)
                    self._compiled(results[argtypes])
        self._variants_generation = _generation

    def _current(self, argtypes, config: CompileConfig, result: CompileResult) -> bool:
        return self.cache.still_current(self.py_func, argtypes, config, result, link=self._link)

    def changed_since(self, result: CompileResult) -> Tuple[str, ...]:
        """What changed in this kernel's inputs since `result` (one of its
        compiles) was built, as the cache explains a miss ("global K 2.5 ->
        3.25", "device function scale: code changed"); () where compiling
        again would give `result` (the check a launch makes, whatever cells
        ran).  Compiles nothing."""
        if self._current(result.signature, result.config, result):
            return ()
        from ..queries import miss_reasons

        reasons = []
        for each in (result.per_target.values() if isinstance(result, FatbinResult) else (result,)):
            tokens = self.cache.tokens(self.py_func, each.signature, each.config, link=self._link)
            for stage in ("typing", "llvm"):
                done = each.stages.get(stage)
                if done is None or stage not in tokens or tokens[stage].hex == each.generic_tokens.get(stage):
                    continue
                old = dict(done.components)
                if stage == "typing" and not old and "llvm" in each.stages:  # (not needed: llvm holds them)
                    old = dict(getattr(each.stages["llvm"].components.get("typing"), "parts", None) or ())
                reasons += [reason for reason in miss_reasons(stage, tokens[stage].components, old)
                            if not reason.is_upstream]
        return tuple(dict.fromkeys(reasons)) or ("its inputs changed",)

    def typing_inputs(self, definitions=None) -> Dict[Tuple[str, Optional[str], str], Dict[str, Any]]:
        """What typing would read now, for each signature this kernel compiled
        (in any variant): {(qualified name, place, signature as entries show
        it): the typing token's components}, the inputs a cached entry's source
        is told from (`gpucache_ext.queries.Sources`); only those of
        `definitions` ((qualified name, place) pairs) where given.  Compiles nothing."""
        with self._lock:
            results = [*self.results.values(), *(r for found in self._variant_results.values()
                                                  for r in found.values())]
        found = {}
        for result in results:
            key = (result.kernel, result.place, result.signature_text)
            if key not in found and (definitions is None or key[:2] in definitions):
                tokens = self.cache.tokens(self.py_func, result.signature, self.config, link=self._link)
                found[key] = dict(tokens["typing"].components)
        return found

    def use(self, **fields) -> "Kernel":
        """Bind the variant whose config is the bound one's with `fields`
        changed (``kernel.use(max_registers=64, fastmath=True)``): its entries
        are in the cache, so nothing compiles where nothing changed.  Binding
        never keeps a stale result: each of the variant's results is re-checked
        against the kernel's inputs now (as a launch checks them), and one whose
        inputs changed since it was compiled (a global, a device function) is
        compiled again through the cache, only the stages that changed.  A
        config no variant has is a `ConfigError` listing the variants."""
        wanted = self.config.replace(**fields)
        chosen = next((config for config in self.sweep if config.normalised() == wanted.normalised()), None)
        if chosen is None:
            listed = "; ".join(config.summary() for config in self.sweep)
            raise ConfigError(f"{self.__name__} has no variant {wanted.summary()}; its variants: {listed} "
                              "(compile more by listing values in the cell's flags, e.g. --max-registers 32,64)")
        with self._compiling(f"at use({', '.join(f'{k}={v!r}' for k, v in fields.items())})"):
            return self._bind(chosen)

    def _bind(self, chosen: CompileConfig) -> "Kernel":
        """Make `chosen` (one of `sweep`) the variant launches use, with current results."""
        with self._lock:
            if chosen == self.config:
                return self
            self._variant_results[self.config] = dict(self.results)
            self.config = chosen
            self.targetoptions.update(_target_options(chosen, self.options))
            self._reset_overloads()
            self.results = dict(self._variant_results.pop(chosen, {}))
            self._generation = -1
            self._variants_generation = -1  # (the next `variants` checks every variant again)
            self.disable_compile(False)
            if self.declared:
                self.compile_declared()  # (the declared signatures: loaded, so compiled again where stale)
            self._reload_stale()  # (a lazy kernel's: compiled again now)
        return self

    def _reload_stale(self) -> None:
        """Compile again, through the cache, the bound variant's results that
        are not loaded and whose inputs changed since they were built."""
        for argtypes, result in list(self.results.items()):
            if argtypes not in self.overloads and not self._current(argtypes, self.config, result):
                self.add_overload(self._load(argtypes), argtypes)

    def tune(self, *args, blocks=None, grid=None, runs: int = 5, warmup: int = 1, signature=None,
             force: bool = False):
        """Choose the variant and block size for these arguments, and bind it.

        Every variant of the sweep (``--max-registers 32,64 --fastmath off,on``)
        at every size of `blocks` (default: the cell's ``--block``, else 128 to
        1024; a tuple for 2D blocks); `grid`: the grid, or a function of the
        block size (default: enough blocks to cover the largest array
        argument once).  On a GPU each pair is launched on `args` and timed
        with CUDA events (`warmup` launches, then the median of `runs`); the
        fastest is bound and filed in the cache for this device, these
        argument types and shapes and these variants' cubins, so a new
        process reuses it (`force`: time again).  Pass device arrays: host
        arrays are copied at every launch, and the copies are timed too.
        Without a GPU nothing is timed: the variants are ranked by
        theoretical occupancy, which is not speed, and the result says so.
        Returns a `gpucache_ext.launch.tuning.TuneResult`."""
        from .tuning import tune

        return tune(self, args, blocks=blocks, grid=grid, runs=runs, warmup=warmup, signature=signature,
                    force=force)

    def _tuning_signature(self, args, signature) -> Tuple:
        """The argument types `tune` compiles the variants for."""
        if signature is not None:
            return normalize_signature(signature)
        if len(self.declared) == 1:
            return self.declared[0]
        if self.declared:
            raise LaunchError(f"{self.__name__} has {len(self.declared)} signatures; give the one to tune for: "
                              f"{self.__name__}.tune(..., signature={short_signature(self.declared[0])!r})")
        return tuple(self.typeof_pyval(arg) for arg in args)

    def _load(self, argtypes) -> CachedKernel:
        """numba asks its cache for a variant (`_CacheSource`): compile it
        through the `KernelCache`; on a GPU, bind it as numba binds what it
        compiles (load the image, module setup, the carveout)."""
        forced = argtypes in self._forced or (self.force and argtypes not in self.results)
        self._forced.discard(argtypes)
        result = self._compile_result(argtypes, self.config, forced)
        if result.config.debug and result.call_helper is None and not self._on_simulator():
            # a debug launch reads numba's exception table, which lives only in
            # the process that lowered the kernel (a disk hit has none)
            result = self._compile_result(argtypes, self.config, force=True)
        kernel = CachedKernel(self, result)
        with self._lock:
            self.results[argtypes] = kernel.result
        self._compiled(kernel.result)
        if not self._on_simulator():
            kernel.bind()
        return kernel

    def _compile_result(self, argtypes, config: CompileConfig, force: bool = False) -> CompileResult:
        if self.targets is not None:
            result = self.cache.compile_fatbin(self.py_func, argtypes, config, sms=self.targets, force=force,
                                               audit=self.audit, link=self._link)
        else:
            result = self.cache.compile(self.py_func, argtypes, config, force=force, audit=self.audit,
                                        link=self._link)
        _note_compiled(self, result)
        return result

    def _recheck(self) -> None:
        """At the first launch since a cell ran: drop the variants whose inputs
        changed (numba compiles them again, through the cache, when they are
        next needed) and compile the declared signatures."""
        if self._generation == _generation:
            return
        with self._lock:
            # (an audit that found a mismatch gave the result a fresh cubin: load that)
            stale = {argtypes for argtypes, kernel in self.overloads.items()
                     if kernel.audit_mismatched or not self.cache.still_current(
                         self.py_func, argtypes, self.config, kernel.result, link=self._link)}
            self._drop(stale)
            if self.declared:
                for argtypes in self.declared:
                    if argtypes not in self.overloads:
                        self.add_overload(self._load(argtypes), argtypes)
                self.disable_compile()
            # (last: a declared signature that failed to compile is tried again at the next launch)
            self._generation = _generation

    def _drop(self, stale) -> None:
        """Take variants out of numba's dispatch table (numba has no way to
        take out one, so the table is rebuilt from those kept)."""
        if not stale & set(self.overloads):
            return
        kept = [(argtypes, kernel) for argtypes, kernel in self.overloads.items() if argtypes not in stale]
        self._reset_overloads()
        for argtypes, kernel in kept:
            self.add_overload(kernel, argtypes)

    def _explain_matching_error(self, *args, **kws):
        # numba's dispatch calls this when no variant accepts the arguments
        actual = tuple(self.typeof_pyval(a) for a in args)
        raise LaunchError(
            f"{self.__name__}: no signature accepts {short_signature(actual)}; declared: "
            + "; ".join(short_signature(d) for d in self.overloads))

    def _explain_ambiguous(self, *args, **kws):
        actual = tuple(self.typeof_pyval(a) for a in args)
        raise LaunchError(
            f"{self.__name__}: arguments {short_signature(actual)} match several signatures equally "
            f"well: {'; '.join(short_signature(d) for d in self.overloads)}; pass arguments of the exact "
            "types of one of them")

    # -- the image for a device ---------------------------------------------------
    def image_for(self, result: CompileResult, cc: Tuple[int, int]):
        """What a GPU of `cc` loads for `result`, as a cuda.core ``ObjectCode``
        (see `choose_image`); a kernel that follows the device compiles `cc`'s
        own target through the cache first when `result` has no cubin for it."""
        if not self.pinned and self.targets is None and not runs_on("cubin", result.config.sm, cc):
            try:
                config = self.config.replace(sm=cc)
            except ConfigError as exc:
                raise LaunchError(f"{self.__name__}: this GPU (sm_{cc[0]}{cc[1]}) is no target the "
                                  f"cache can build: {exc}") from None
            result = self._compile_result(result.signature, config)
        return choose_image(result, cc)

    # -- launching -------------------------------------------------------------
    def __getitem__(self, launch):
        if not isinstance(launch, tuple) or not 2 <= len(launch) <= 4:
            raise LaunchError(
                f"launch {self.__name__} as kernel[blocks, threads] or "
                "kernel[blocks, threads, stream, shared_bytes]"
            )
        if self._on_simulator():
            return functools.partial(self._simulate, griddim=launch[0], blockdim=launch[1],
                                     stream=launch[2] if len(launch) > 2 else 0,
                                     sharedmem=launch[3] if len(launch) > 3 else 0)
        return CUDADispatcher.configure(self, *launch)  # numba's launch configuration

    def configure(self, griddim, blockdim, stream=0, sharedmem=0):
        """The kernel configured for a launch, as numba's ``configure``:
        the same as ``kernel[griddim, blockdim, stream, sharedmem]``."""
        return self[griddim, blockdim, stream, sharedmem]

    def __call__(self, *args, **kwargs):
        raise LaunchError(f"launch {self.__name__} with a configuration: {self.__name__}[blocks, threads](...)")

    def call(self, args, launch_config):
        """numba's launch, after re-checking the variants at the first launch since a cell ran."""
        if self._generation != _generation:
            self._recheck()
        if self._specialized and len(args) != len(self.declared[0]):
            self._wrong_count(args)
        with _raised_as_numba():
            return CUDADispatcher.call(self, args, launch_config)

    def _wrong_count(self, args):
        # numba launches a specialized kernel without looking at its arguments
        # (zip stops at the shorter); a wrong count would launch garbage
        raise LaunchError(f"{self.__name__} takes {len(self.declared[0])} arguments "
                          f"{short_signature(self.declared[0])}, not {len(args)}")

    def forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
        """A launcher over `ntasks` tasks, as numba's ``forall`` (the kernel maps
        ``cuda.grid(1)`` to tasks and ignores ids past `ntasks`): numba's own
        on a GPU; on the simulator, `ntasks` blocks of one thread, as numba's
        simulator does (one block for a kernel that synchronises its grid)."""
        if not self._on_simulator():
            return super().forall(ntasks, tpb=tpb, stream=stream, sharedmem=sharedmem)
        if ntasks < 0:
            raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")

        def launch_all(*args):
            if ntasks == 0:
                return None
            if self.result_for(*args).cooperative:  # grid sync: one block, where the simulator can
                return self._simulate(*args, griddim=1, blockdim=ntasks, stream=stream, sharedmem=sharedmem)
            return self._simulate(*args, griddim=ntasks, blockdim=1, stream=stream, sharedmem=sharedmem)

        return launch_all

    def specialize(self, *args) -> "Kernel":
        """A kernel compiled for exactly these arguments' types, as numba's
        ``specialize`` (it never compiles for other types), through the cache."""
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        argtypes = tuple(self.typeof_pyval(a) for a in args)
        key = (None if self._on_simulator() else device_cc(), argtypes)
        special = self.specializations.get(key)
        if special is None:
            # (all of this kernel's spec: its sweep, blocks and flags, bound to the variant bound now)
            special = Kernel(self.py_func, [argtypes], None, self.cache, self.options,
                             spec=self.spec.replace(config=self.config), on_compile=self.on_compile,
                             specialized=True)
            special.compile_declared()
            self.specializations[key] = special
        return special

    # -- the simulator -----------------------------------------------------------
    def result_for(self, *args) -> CompileResult:
        """The compiled variant a launch with these arguments runs, as numba's
        dispatch picks it (compiled now if needed)."""
        from numba.cuda.cext import _dispatcher

        self._recheck()
        if self.specialized:
            if len(args) != len(self.declared[0]):
                self._wrong_count(args)
            return next(iter(self.overloads.values())).result
        return _dispatcher.Dispatcher._cuda_call(self, *args).result

    def _simulate(self, *args, griddim, blockdim, stream=0, sharedmem=0):
        from numba.cuda import types as nbtypes
        from numba.cuda.errors import normalize_kernel_dimensions

        if any(isinstance(t, nbtypes.CPointer) for sig in self.declared for t in sig):
            raise LaunchError(
                f"{self.__name__} takes raw pointers, which need a GPU: the simulator runs "
                "Python and cannot follow a device pointer")
        with _raised_as_numba():
            result = self.result_for(*args)
        notice_simulator(self.simulate)
        if result.cooperative and math.prod(normalize_kernel_dimensions(griddim, blockdim)[0]) > 1:
            raise LaunchError(
                f"{self.__name__} synchronises its grid (cuda.cg.this_grid), which numba's "
                f"simulator can do within one block only; launch it as [1, threads] (or with "
                f".forall(n)) to simulate it, or run it on a GPU")
        self._simulator()[griddim, blockdim, stream, sharedmem](*self._as_launched(result, args))

    def _as_launched(self, result: CompileResult, args) -> tuple:
        """The arguments as a GPU launch of `result` gets them (a float32
        parameter gets a rounded float), for the simulator, which would
        otherwise compute with the Python values themselves."""
        from .simulator import launch_arguments

        try:
            return launch_arguments(result.signature, args)
        except (TypeError, OverflowError, ValueError) as exc:
            raise LaunchError(f"{self.__name__}: {exc}") from None

    def _simulator(self):
        with self._lock:
            if self._simulated is None or self._simulated[0] != _generation:
                self._simulated = (_generation, simulated_kernel(self.py_func, self.config,
                                                                 self.options.get("extensions") or ()))
            return self._simulated[1]

    # -- numba's dispatcher API, answered from the compile results ----------------
    @property
    def definitions(self):
        return self.overloads

    def _per_signature(self, signature, value: Callable[[CompileResult], Any]):
        """numba's convention: one value for a given signature (or a specialized
        kernel), else {argument types: value} for every compiled signature."""
        if signature is not None:
            return value(self._variant_of(signature))
        if self.specialized:
            return value(next(iter(self.overloads.values())))
        return {argtypes: value(kernel) for argtypes, kernel in self.overloads.items()}

    def _variant_of(self, signature) -> CachedKernel:
        args = getattr(signature, "args", None)
        if args is None:
            args = signature if isinstance(signature, tuple) else normalize_signature(signature)
        args = tuple(args)
        kernel = self.overloads.get(args)
        if kernel is None and (self._can_compile or args in self.declared):
            kernel = self.compile(args)
        if kernel is None:
            raise LaunchError(f"{self.__name__} has no signature {short_signature(args)}; "
                              f"compiled: {', '.join(map(short_signature, self.overloads)) or 'none'}")
        return kernel

    def inspect_llvm(self, signature=None):
        """The NVVM IR, as numba's ``inspect_llvm`` (per signature)."""
        return self._per_signature(signature, lambda k: k.result.llvm_ir)

    def inspect_asm(self, signature=None):
        """The PTX, as numba's ``inspect_asm`` (for this kernel's target, not the GPU's)."""
        return self._per_signature(signature, lambda k: k.result.ptx)

    def inspect_lto_ptx(self, signature=None):
        """The PTX after link-time optimisation (the kernel must be compiled with lto)."""
        def lto_ptx(kernel):
            if not kernel.result.config.lto:
                raise LaunchError(f"{self.__name__} was not compiled with lto (--lto or lto=True)")
            return kernel.result.ptx
        return self._per_signature(signature, lto_ptx)

    def inspect_types(self, file=None, signature=None, pretty=False, style="default", **kwargs):
        """numba's ``inspect_types``: the Python source of each compiled
        variant (or of `signature`'s) annotated with numba's IR and types,
        printed to `file` (default stdout), or with ``pretty=True`` an object
        Jupyter shows highlighted (needs pygments).  From the typing stage:
        its typed IR where still cached, else typed again (after a restart a
        disk hit holds none)."""
        self._annotate([signature] if signature is not None else list(self.overloads))
        if signature is None and not pretty and not kwargs:  # numba-cuda's own (each variant's entry name)
            return super().inspect_types(file=file)
        # numba's general one (numba-cuda's takes `file` alone): a signature, pretty
        return _DispatcherBase.inspect_types(self, file=file, signature=signature, pretty=pretty, style=style,
                                             **kwargs)

    def get_annotation_info(self, signature=None):
        """numba's: the annotation per signature (what ``inspect_types(pretty=True)`` renders)."""
        self._annotate([signature] if signature is not None else list(self.signatures))
        return super().get_annotation_info(signature)

    def _annotate(self, signatures) -> None:
        """Give each variant of `signatures` numba's type annotation, from the typing stage."""
        from numba.cuda.core import postproc
        from numba.cuda.core.annotations import type_annotations

        for argtypes in signatures:
            variant = self.overloads[argtypes]  # (a KeyError for a signature not compiled, as numba's)
            if variant._type_annotation is not None:
                continue
            config = variant.result.config
            state = self.cache.typed(self.py_func, argtypes, config, link=self._link).state
            # what numba's IRLegalization (its ir.Dels) and AnnotateTypes passes make of the same typed IR
            func_ir = state["func_ir"].copy()
            postproc.PostProcessor(func_ir).run(True, extend_lifetimes=config.debug)
            variant._type_annotation = type_annotations.TypeAnnotation(
                func_ir=func_ir, typemap=state["typemap"], calltypes=state["calltypes"],
                lifted=(), lifted_from=None, args=state["args"], return_type=state["return_type"],
                html_output=None)

    def inspect_sass(self, signature=None):
        """The SASS, from nvdisasm, as numba's ``inspect_sass``: per signature,
        the text (`gpucache_ext.toolchain.sass.disassemble`; `SassUnavailable` says why not)."""
        from ..toolchain.sass import disassemble

        return self._per_signature(signature, lambda k: disassemble(k.result.cubin))

    def inspect_sass_by_arch(self, signature=None):
        """The SASS of every cubin target, ``{86: text, ...}`` (one entry for a
        single-target kernel), per signature as `inspect_sass`.  A target
        nvdisasm cannot read (sm_72 and older for the wheel's nvdisasm 13)
        gives the `SassUnavailable` message, which names what would work, in
        place of its text."""
        from ..toolchain.sass import SassUnavailable, disassemble

        def by_arch(kernel):
            found = {}
            for sm, cubin in kernel.result.cubins.items():
                try:
                    found[sm] = disassemble(cubin)
                except SassUnavailable as exc:
                    found[sm] = f"(no SASS: {exc})"
            return found
        return self._per_signature(signature, by_arch)

    # -- inspecting --------------------------------------------------------------
    @property
    def last(self) -> CompileResult:
        """The most recently compiled signature's result."""
        if not self.results:
            raise LaunchError(
                f"{self.__name__} has not been compiled yet: launch it, or give it a signature "
                "(@cuda.jit('void(float32[:])') or %%gpukernel --sig ...)"
            )
        return next(reversed(self.results.values()))

    @property
    def ptx(self) -> str:
        return self.last.ptx

    @property
    def llvm_ir(self) -> str:
        return self.last.llvm_ir

    @property
    def cubin(self) -> bytes:
        return self.last.cubin

    @property
    def resources(self) -> Dict[str, int]:
        return self.last.resources

    @property
    def fatbin(self) -> bytes:
        """The fatbin of the most recently compiled signature: every target's
        cubin and the PTX (a kernel built for several targets: ``--sm 80,86,90``)."""
        last = self.last
        if not isinstance(last, FatbinResult):
            raise LaunchError(
                f"{self.__name__} was compiled for one target ({self.config.summary().split()[0]}), and "
                "has a cubin but no fatbin; list several targets (--sm 80,86,90, or Kernel(targets=...)) "
                "to build one")
        return last.fatbin

    def inspect(self) -> str:
        """Config, per-stage tokens and hits, resources and PTX size, per signature."""
        lines = [f"{self.__name__}: {self.summary()}"]
        for result in self.results.values():
            lines.append(result.explain())
            for sm, res in result.resources_by_arch.items():
                lines.append(
                    f"  resources sm_{sm}: {res['registers']} registers, {res['shared_bytes']} B shared, "
                    f"{res['local_bytes']} B local, {res['constant_bytes']} B constant, "
                    f"spills {res['spill_stores']}/{res['spill_loads']} B, cubin {res['cubin_bytes']} B"
                )
            lines.append(f"  ptx: {len(result.ptx.splitlines())} lines"
                         + (f", fatbin: {len(result.fatbin)} bytes" if isinstance(result, FatbinResult) else ""))
        if not self.results:
            lines.append("  (not compiled yet)")
        return "\n".join(lines)

    def summary(self) -> str:
        """The config's summary, with the targets in place of sm for a multi-target kernel."""
        return self.config.summary() if self.targets is None else self.targets.describe(self.config)

    def __repr__(self):
        sigs = ", ".join(map(short_signature, self.results)) or "not compiled"
        return f"<gpucache_ext.Kernel {self.__name__} [{self.summary()}] {sigs}>"


for _name, _instead in _NUMBA_ONLY.items():
    setattr(Kernel, _name, _NotOffered(_name, _instead))


def _target_options(config: CompileConfig, options: Dict[str, Any]) -> Dict[str, Any]:
    """numba's ``targetoptions`` for a kernel of `config` (numba's dispatcher
    reads some of them: extensions, device)."""
    return {"debug": config.debug, "lineinfo": config.lineinfo, "fastmath": config.fastmath,
            "opt": config.opt != 0, "max_registers": config.max_registers, "lto": config.lto,
            "launch_bounds": config.launch_bounds, "link": list(options.get("link") or ()),
            "extensions": list(options.get("extensions") or ()),
            "shared_memory_carveout": options.get("shared_memory_carveout"), "device": False}


def _default_cache():
    from ..defaults import default_cache

    return default_cache()


# ---------------------------------------------------------------------------
# The image a GPU loads


def runs_on(member_kind: str, arch: int, cc: Tuple[int, int]) -> bool:
    """Whether a cubin for sm_XY (or PTX for compute_XY) runs on a GPU of
    `cc`: a cubin on sm_XZ with Z >= Y, PTX on any GPU of cc >= XY."""
    compiled = divmod(arch, 10)
    if member_kind == "cubin":
        return compiled[0] == cc[0] and compiled[1] <= cc[1]
    return compiled <= cc


def choose_image(result: CompileResult, cc: Tuple[int, int]):
    """What to load on a GPU of `cc`, as a cuda.core ``ObjectCode``: a
    multi-target kernel's fatbin (the driver picks the cubin, or compiles the
    PTX) where something in it runs there; else the cubin if it runs there,
    else PTX for the driver to compile, where the PTX is complete alone."""
    from cuda.core import ObjectCode

    if isinstance(result, FatbinResult):
        if any(runs_on(member.kind, member.arch, cc) for member in result.members):
            return ObjectCode.from_fatbin(result.fatbin)
        raise LaunchError(
            f"{result.kernel.rsplit('.', 1)[-1]} was built for {result.targets.summary()}, none of which "
            f"this GPU (sm_{cc[0]}{cc[1]}) can run; add {cc[0]}{cc[1]} to --sm (or to the targets)")
    return ObjectCode.from_cubin(result.cubin) if runs_on("cubin", result.config.sm, cc) \
        else _ptx_image(result, cc)


def _ptx_image(result: CompileResult, cc: Tuple[int, int]):
    from cuda.core import ObjectCode

    from ..toolchain.fatbin import ptx_problem

    name = result.kernel.rsplit('.', 1)[-1]
    compiled = result.config.cc
    fix = f"use --sm {cc[0]}{cc[1]} (or CompileConfig(sm={cc[0]}{cc[1]}))"
    if compiled > cc:
        raise LaunchError(f"{name} was compiled for sm_{compiled[0]}{compiled[1]}, which this GPU "
                          f"(sm_{cc[0]}{cc[1]}) cannot run; {fix}")
    problem = ptx_problem(result._ptx, result._cubin.links)
    if problem:
        raise LaunchError(f"{name} was compiled for sm_{compiled[0]}{compiled[1]}, and this GPU "
                          f"(sm_{cc[0]}{cc[1]}) would need its PTX compiled by the driver, which cannot "
                          f"be done: {problem}; {fix}")
    return ObjectCode.from_ptx(result.ptx.encode())  # bytes: cuda.core reads a str as a file name



__all__ = ["Kernel", "CachedKernel", "LaunchError", "refresh_all", "gpu_available", "device_cc", "choose_image",
           "compiled_by", "live_kernels", "stale_reasons"]
