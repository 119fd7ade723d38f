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
  simulator (the variant is still compiled, cached and inspectable);
- a kernel of one signature, which numba launches without looking at its
  arguments, has them checked as numba's dispatch checks a list's
  (`arguments`): a float64 array for a float32 parameter is a `LaunchError`.

Its parts elsewhere: `compiled` (a variant as numba holds it, the image a GPU
loads), `variants` (a sweep's variants, `use`, `tune`), `inspection` (numba's
``inspect_*`` and the last compile's artifacts), `registry` (the live
kernels, and `refresh_all`), `arguments` (which arguments a launch takes).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from numba.cuda.dispatcher import CUDADispatcher

from . import registry
from .arguments import check_specialized, no_match_error, untypeable_refused
from ..cache import CompileResult, KernelCache
from ..config import CompileConfig
from .compiled import CachedKernel, LaunchError, LaunchTypeError, LaunchValueError, choose_image, runs_on
from .device import device_cc, gpu_available
from ..errors import CompileError, ConfigError, as_numba_raises
from .inspection import KernelInspection
from ..options import config_with_options
from .registry import compiled_by, live_kernels, refresh_all, stale_reasons
from ..results import short_signature
from .simulator import notice_simulator, simulated_kernel
from .spec import KernelSpec
from ..sources.functions import python_function
from ..signatures import normalize_signature
from .variants import KernelVariants
from .batch import BegunAhead


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


class Kernel(KernelInspection, KernelVariants, BegunAhead, CUDADispatcher):
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
        # a raw pointer parameter (CPointer): a specialized launch takes an address for it
        self.takes_addresses = _takes_addresses(self.declared)
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
        self._variants_generation = registry.generation
        self._forced = set()
        # compiles `begin_declared` began (`gpucache_ext.launch.batch`), taken by `_compile_result`:
        # {(argtypes, config, force): `gpucache_ext.pipeline.Begun`}, with the generation they began in
        self._prepared: Optional[Dict[tuple, Any]] = None
        self._prepared_generation = -1
        self._simulated = None
        self._lock = threading.RLock()
        registry.add_kernel(self)

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
            try:
                return self._compile_declared(force)
            finally:
                self._prepared = None  # (what was begun for it is taken, or never will be)

    def _compile_declared(self, force: bool):
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
        prepared = self._prepared
        started = None
        if prepared is not None:
            # (begun in this cell, before anything could change what it read: else compiled again)
            if self._prepared_generation == registry.generation:
                started = prepared.pop((argtypes, config, force), None)
            else:
                self._prepared = None
        result = started.result() if started is not None else self._build_result(argtypes, config, force)
        registry.note_compiled(self, result)
        return result

    def _build_result(self, argtypes, config: CompileConfig, force: bool = False) -> CompileResult:
        if self.targets is not None:
            result = self.cache.compile_fatbin(self.py_func, argtypes, config, sms=self.targets, force=force,
                                               audit=self.audit, link=self._link)
        else:
            result = self.cache.compile(self.py_func, argtypes, config, force=force, audit=self.audit,
                                        link=self._link)
        return result

    def _recheck(self) -> None:
        """At the first launch since a cell ran: drop the variants whose inputs
        changed (numba compiles them again, through the cache, when they are
        next needed) and compile the declared signatures."""
        if self._generation == registry.generation:
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
            self._generation = registry.generation

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
        raise no_match_error(self, args)

    def _explain_ambiguous(self, *args, **kws):
        actual = tuple(self.typeof_pyval(a) for a in args)
        raise LaunchTypeError(
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
        if type(launch) is not tuple or not 2 <= len(launch) <= 4:
            launch = self._as_numba_takes(launch)
        if self._on_simulator():
            return functools.partial(self._simulate, griddim=launch[0], blockdim=launch[1],
                                     stream=launch[2] if len(launch) > 2 else 0,
                                     sharedmem=launch[3] if len(launch) > 3 else 0)
        return CUDADispatcher.configure(self, *launch)  # numba's launch configuration

    def _as_numba_takes(self, launch) -> tuple:
        """A launch configuration other than a tuple of 2 to 4 items, as numba
        takes it: any sequence of 2 to 4 items; else numba's exception types,
        a TypeError where it has no length, a ValueError for another length."""
        try:
            count = len(launch)
        except TypeError:
            raise LaunchTypeError(
                f"launch {self.__name__} as kernel[blocks, threads] or "
                f"kernel[blocks, threads, stream, shared_bytes], not kernel[{launch!r}]") from None
        if count not in (2, 3, 4):
            raise LaunchValueError(
                f"launch {self.__name__} as kernel[blocks, threads] or "
                "kernel[blocks, threads, stream, shared_bytes]"
            )
        return tuple(launch)

    def configure(self, griddim, blockdim, stream=0, sharedmem=0):
        """The kernel configured for a launch, as numba's ``configure``:
        the same as ``kernel[griddim, blockdim, stream, sharedmem]``."""
        return self[griddim, blockdim, stream, sharedmem]

    def __call__(self, *args, **kwargs):
        raise LaunchValueError(
            f"launch {self.__name__} with a configuration: {self.__name__}[blocks, threads](...)")

    def call(self, args, launch_config):
        """numba's launch, after re-checking the variants at the first launch since a cell ran."""
        if self._generation != registry.generation:
            self._recheck()
        if self._specialized:
            # numba launches one signature without looking at the arguments
            # (a float64 array would be read as float32): checked as a list's would be
            check_specialized(self, args)
        with _raised_as_numba():
            with untypeable_refused(self, args):
                return CUDADispatcher.call(self, args, launch_config)

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
            check_specialized(self, args)
            return next(iter(self.overloads.values())).result
        with untypeable_refused(self, args):
            return _dispatcher.Dispatcher._cuda_call(self, *args).result

    def _simulate(self, *args, griddim, blockdim, stream=0, sharedmem=0):
        from numba.cuda.errors import normalize_kernel_dimensions

        if self.takes_addresses:
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
            if self._simulated is None or self._simulated[0] != registry.generation:
                self._simulated = (registry.generation, simulated_kernel(
                    self.py_func, self.config, self.options.get("extensions") or ()))
            return self._simulated[1]

    # -- what it is --------------------------------------------------------------
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


def _takes_addresses(declared) -> bool:
    from numba.cuda import types

    return any(isinstance(t, types.CPointer) for sig in declared for t in sig)


def _default_cache():
    from ..defaults import default_cache

    return default_cache()


__all__ = ["Kernel", "CachedKernel", "LaunchError", "refresh_all", "gpu_available", "device_cc", "choose_image",
           "compiled_by", "live_kernels", "stale_reasons"]
