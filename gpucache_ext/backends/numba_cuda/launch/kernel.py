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
  (see `gpucache_ext.backends.numba_cuda.launch.device.default_sm`) compiles the device's architecture
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

Its parts are objects it holds, each written against what it asks (passed
in, or a Protocol): `builds` (`Builds`: its compiles through the cache, and
what is current), `ahead` (`AheadOfTime`: compiles a cell began before its
``compile_declared``), `variant_set` (`VariantSet`: a sweep's variants and
their results, `use`), `inspection` (`Inspection`: numba's ``inspect_*`` and
the last compile's artifacts) and `simulator` (`SimulatorLaunches`: launches
on numba's simulator); its public methods delegate to them.
Elsewhere: `compiled` (a variant as numba holds it, the image a GPU loads),
`tuning` (`tune`), `registry` (the live kernels, and `refresh_all`),
`arguments` (which arguments a launch takes).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from numba.cuda.dispatcher import CUDADispatcher

from ....launch import registry
from .arguments import check_specialized, launch_configuration, no_match_error, untypeable_refused
from ....pipeline.cache import CompileResult, KernelCache
from ....keys.config import CompileConfig
from .compiled import (CachedKernel, LaunchError, LaunchTypeError, LaunchValueError, choose_image, raised_as_numba,
                       runs_on)
from .device import device_cc, gpu_available
from ....errors import ConfigError
from .inspection import Inspection
from ..options import config_with_options
from ....launch.registry import compiled_by, live_kernels, refresh_all, stale_reasons
from ....pipeline.results import short_signature
from .simulated import SimulatorLaunches
from ....launch.spec import KernelSpec
from ....sources.functions import python_function
from ..signatures import normalize_signature
from ....launch.variants import VariantSet
from ....launch.batch import AheadOfTime
from ....launch.builds import Builds


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


def _delegated(part: str, part_method):
    """A `Kernel` method that calls `part_method` of its part `part` (named,
    documented and signed as `part_method`)."""
    name = part_method.__name__

    @functools.wraps(part_method, assigned=("__name__", "__doc__"))
    def delegate(self, *args, **kwargs):
        return getattr(getattr(self, part), name)(*args, **kwargs)

    delegate.__qualname__ = f"Kernel.{name}"
    return delegate


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
        config = config_with_options(spec.config, self.options)
        # several targets (a `Targets`): each signature compiles to a fatbin
        # (`KernelCache.compile_fatbin`), and the config's sm is the lowest target
        self.targets = spec.targets
        if self.targets is not None:
            config = config.replace(sm=self.targets.sms[0])
        super().__init__(py_func, _target_options(config, self.options))
        self._cache = _CacheSource(self)
        # one signature, launched without dispatch: numba's @jit("sig") (a list is dispatched)
        self._specialized = specialized
        self.simulate = spec.simulate
        self.force = spec.force
        self.audit = spec.audit
        self._lock = threading.RLock()
        self.ahead = AheadOfTime()
        # told of each compile with what made it ("at this launch", "as its variants were read")
        self.builds = Builds(self, cache if cache is not None else _default_cache(), py_func, targets=self.targets,
                             audit=self.audit, link=self.options.get("link") or (), ahead=self.ahead,
                             on_compile=on_compile)
        self.declared = tuple(normalize_signature(sig) for sig in signatures)
        # a raw pointer parameter (CPointer): a specialized launch takes an address for it
        self.takes_addresses = _takes_addresses(self.declared)
        # a sweep's variants (`gpucache_ext.sweeps`): the configs compiled
        # besides the bound one (`use` binds another), each with its results
        sweep = [config_with_options(v, self.options) for v in spec.variants] or [config]
        if self.targets is not None:
            sweep = [v.replace(sm=self.targets.sms[0]) for v in sweep]
        self.variant_set = VariantSet(self.__name__, tuple(dict.fromkeys([config, *sweep])), config,
                                      targets=self.targets, lock=self._lock, builds=self.builds,
                                      check_bound=self._check_bound, rebound=self._rebound)
        self.inspection = Inspection(self, self.builds.typed)
        self.blocks: Tuple[int, ...] = spec.blocks
        self.dynamic_shared = spec.dynamic_shared
        self._generation = -1  # refresh_all's count when the bound variant was last checked
        self._forced = set()
        self.simulator = SimulatorLaunches(self, self._lock)
        registry.add_kernel(self)

    # -- its parts' state, as attributes ---------------------------------------------
    cache = property(lambda self: self.builds.cache, doc="The `KernelCache` it compiles through.")
    on_compile = property(lambda self: self.builds.on_compile, doc="Told of each compile, with what made it.")
    config = property(lambda self: self.variant_set.bound, doc="The bound variant's config (launches use it).")
    results = property(lambda self: self.variant_set.results,
                       doc="The bound variant's compile results, by signature (argument types).")
    sweep = property(lambda self: self.variant_set.configs, doc="A sweep's configs, the bound one first.")

    def on_simulator(self) -> bool:
        """Whether launches run on numba's CUDA simulator (``simulate=True``, or no GPU)."""
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
                self.ahead.drop()  # (what was begun for it is taken, or never will be)

    def _compile_declared(self, force: bool):
        with self._lock:
            if not force:
                self._recheck()
            kernels = [self.compile(argtypes, force) for argtypes in self.declared]
            if self.declared:
                self.disable_compile()
            self.variant_set.compile_others(self.declared, force)  # (compiled, cached, not bound)
            return [kernel.result for kernel in kernels]

    def _rebound(self, chosen: CompileConfig) -> None:
        """`chosen` is bound now (`VariantSet.bind`): numba's table rebuilt for it."""
        self.targetoptions.update(_target_options(chosen, self.options))
        self._reset_overloads()
        self._generation = -1
        self.disable_compile(False)
        if self.declared:
            self.compile_declared()  # (the declared signatures: loaded, so compiled again where stale)
        self._reload_stale()  # (a lazy kernel's: compiled again now)

    def _check_bound(self) -> None:
        """The bound variant re-checked as a launch checks it, and what that dropped loaded again."""
        self._recheck()
        self._reload_stale()

    def _reload_stale(self) -> None:
        """Compile again, through the cache, the bound variant's results that
        are not loaded and whose inputs changed since they were built."""
        for argtypes, result in list(self.results.items()):
            if argtypes not in self.overloads and not self.builds.still_current(argtypes, self.config, result):
                self.add_overload(self._load(argtypes), argtypes)

    def _forced_now(self, argtypes) -> bool:
        """Whether loading `argtypes` now compiles it again (``compile(force=True)``, or ``force``)."""
        return argtypes in self._forced or (self.force and argtypes not in self.results)

    def _load(self, argtypes) -> CachedKernel:
        """numba asks its cache for a variant (`_CacheSource`): compile it
        through the `KernelCache`; on a GPU, bind it as numba binds what it
        compiles (load the image, module setup, the carveout)."""
        forced = self._forced_now(argtypes)
        self._forced.discard(argtypes)
        result = self.builds.result(argtypes, self.config, forced)
        if result.config.debug and result.call_helper is None and not self.on_simulator():
            # a debug launch reads numba's exception table, which lives only in
            # the process that lowered the kernel (a disk hit has none)
            result = self.builds.result(argtypes, self.config, force=True)
        kernel = CachedKernel(self, result)
        self.variant_set.keep(argtypes, kernel.result)
        self.builds.told(kernel.result)
        if not self.on_simulator():
            kernel.bind()
        return kernel

    def _recheck(self) -> None:
        """At the first launch since a cell ran: drop the variants whose inputs
        changed (numba compiles them again, through the cache, when they are
        next needed) and compile the declared signatures."""
        if self._generation == registry.generation:
            return
        with self._lock:
            # (an audit that found a mismatch gave the result a fresh cubin: load that)
            stale = {argtypes for argtypes, kernel in self.overloads.items()
                     if kernel.audit_mismatched or not self.builds.still_current(argtypes, self.config, kernel.result)}
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
            result = self.builds.result(result.signature, config)
        return choose_image(result, cc)

    # -- launching -------------------------------------------------------------
    def __getitem__(self, launch):
        if type(launch) is not tuple or not 2 <= len(launch) <= 4:
            launch = launch_configuration(self.__name__, launch)
        if self.on_simulator():
            return functools.partial(self.simulator.launch, griddim=launch[0], blockdim=launch[1],
                                     stream=launch[2] if len(launch) > 2 else 0,
                                     sharedmem=launch[3] if len(launch) > 3 else 0)
        return CUDADispatcher.configure(self, *launch)  # numba's launch configuration

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
        with raised_as_numba():
            with untypeable_refused(self, args):
                return CUDADispatcher.call(self, args, launch_config)

    def forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
        """A launcher over `ntasks` tasks, as numba's ``forall`` (the kernel maps
        ``cuda.grid(1)`` to tasks and ignores ids past `ntasks`): numba's own
        on a GPU; on the simulator, `ntasks` blocks of one thread, as numba's
        simulator does (one block for a kernel that synchronises its grid)."""
        if not self.on_simulator():
            return super().forall(ntasks, tpb=tpb, stream=stream, sharedmem=sharedmem)
        return self.simulator.forall(ntasks, stream=stream, sharedmem=sharedmem)

    def specialize(self, *args) -> "Kernel":
        """A kernel compiled for exactly these arguments' types, as numba's
        ``specialize`` (it never compiles for other types), through the cache."""
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        argtypes = tuple(self.typeof_pyval(a) for a in args)
        key = (None if self.on_simulator() else device_cc(), argtypes)
        special = self.specializations.get(key)
        if special is None:
            # (all of this kernel's spec: its sweep, blocks and flags, bound to the variant bound now)
            special = Kernel(self.py_func, [argtypes], None, self.cache, self.options,
                             spec=self.spec.replace(config=self.config), on_compile=self.on_compile,
                             specialized=True)
            special.compile_declared()
            self.specializations[key] = special
        return special

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

    # -- its declared signatures begun ahead (`gpucache_ext.launch.batch.Pipelined`) -----
    def declared_work(self) -> "list[Tuple[Tuple, CompileConfig, bool]]":
        """(argtypes, config, force) of each compile `compile_declared` is
        about to make (the bound variant's declared signatures not loaded
        yet, then the sweep's other variants'), as it would make it."""
        with self._lock:
            work = []
            if self._generation != registry.generation and self.declared:
                work += [(argtypes, self.config, self._forced_now(argtypes))
                         for argtypes in self.declared if argtypes not in self.overloads]
            return work + self.variant_set.unbuilt(self.declared)

    def begin_declared(self, submit: Callable[[Callable[[], None]], Any]) -> bool:
        """What `compile_declared` is about to compile, begun: typing and
        llvm now (the inputs as they are now, as numba's decorator reads
        them), ptx and cubin handed to `submit` (a thread pool's), to be taken
        by the next `compile_declared` (`gpucache_ext.launch.batch`); False
        where nothing was begun (nothing to compile, or several targets,
        whose ptx and cubin are built in threads of their own)."""
        if self.targets is not None:
            return False
        with self._lock:
            return self.ahead.begin(self.declared_work(), self.builds.begin, submit)

    begun = property(lambda self: self.ahead.begun,
                     doc="Whether compiles `begin_declared` began wait for `compile_declared`.")

    def drop_begun(self) -> None:
        """Forget what `begin_declared` began and nobody took (their entries stay cached)."""
        self.ahead.drop()

    # -- a sweep's variants (`VariantSet`) ------------------------------------------
    variants = property(lambda self: self.variant_set.listed(), doc=VariantSet.listed.__doc__)

    def use(self, **fields) -> "Kernel":
        self.variant_set.use(**fields)
        return self

    use.__doc__ = VariantSet.use.__doc__

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
        Returns a `gpucache_ext.backends.numba_cuda.launch.tuning.TuneResult`."""
        from .tuning import tune

        return tune(self, args, blocks=blocks, grid=grid, runs=runs, warmup=warmup, signature=signature,
                    force=force)

    changed_since = _delegated("variant_set", VariantSet.changed_since)
    typing_inputs = _delegated("variant_set", VariantSet.typing_inputs)

    # -- what it compiled (`Inspection`) -------------------------------------------
    definitions = property(lambda self: self.overloads)
    last = property(lambda self: self.inspection.last, doc=Inspection.last.__doc__)
    ptx = property(lambda self: self.inspection.last.ptx)
    llvm_ir = property(lambda self: self.inspection.last.llvm_ir)
    cubin = property(lambda self: self.inspection.last.cubin)
    resources = property(lambda self: self.inspection.last.resources)
    fatbin = property(lambda self: self.inspection.fatbin, doc=Inspection.fatbin.__doc__)
    inspect = _delegated("inspection", Inspection.inspect)
    inspect_llvm = _delegated("inspection", Inspection.inspect_llvm)
    inspect_asm = _delegated("inspection", Inspection.inspect_asm)
    inspect_lto_ptx = _delegated("inspection", Inspection.inspect_lto_ptx)
    inspect_types = _delegated("inspection", Inspection.inspect_types)
    get_annotation_info = _delegated("inspection", Inspection.get_annotation_info)
    inspect_sass = _delegated("inspection", Inspection.inspect_sass)
    inspect_sass_by_arch = _delegated("inspection", Inspection.inspect_sass_by_arch)

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
    from ....defaults import default_cache

    return default_cache()


__all__ = ["Kernel", "CachedKernel", "LaunchError", "refresh_all", "gpu_available", "device_cc", "choose_image",
           "compiled_by", "live_kernels", "stale_reasons"]
