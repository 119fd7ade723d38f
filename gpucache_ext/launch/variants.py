"""A sweep's variants of a `Kernel` (``--max-registers 32,64 --fastmath off,on``):
listing them (`Kernel.variants`, each result current), binding another
(`Kernel.use`), choosing one by timing (`Kernel.tune`), and telling whether a
result is still what the kernel's inputs compile to (`Kernel.changed_since`,
`Kernel.typing_inputs`).

`KernelVariants` is a part of `Kernel` (a mixin): it reads the kernel's
state (``sweep``, ``results``, ``_variant_results``) and binds through
``Kernel._bind``.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple, TypeVar

from . import registry
from ..cache import CompileResult
from ..config import CompileConfig, Targets
from ..errors import ConfigError
from ..results import FatbinResult, short_signature
from ..signatures import normalize_signature
from .compiled import LaunchError

_Kernel = TypeVar("_Kernel", bound="KernelVariants")  # the kernel this is a part of: `use` binds and returns it


class Variant(NamedTuple):
    """One variant of a sweep (`Kernel.variants`).  Its `results` are current:
    `Kernel.variants` re-checks each against the kernel's inputs as a launch
    does, and compiles again (through the cache) the ones whose inputs changed."""

    config: CompileConfig  # (a multi-target kernel's: its first target in `sm`; `summary` names them all)
    results: Dict[Tuple, CompileResult]  # by signature (argument types)
    bound: bool  # the one launches use
    targets: Optional[Targets] = None  # a kernel built for several targets (--sm 80,86,90)

    def summary(self) -> str:
        """The variant's config with every target it is built for:
        "sm_80,86,90 +ptx 80 max_registers=32" (``config.summary()`` names
        the first target alone)."""
        return self.config.summary() if self.targets is None else self.targets.describe(self.config)


class KernelVariants:
    """`Kernel`'s sweep: its variants, `use`, `tune`, and what changed since a result."""

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
                            else dict(self._variant_results.get(config, {})), config == self.config,
                            self.targets)
                    for config in sorted(self.sweep, key=lambda c: c != self.config)]

    def _refresh_variants(self) -> None:
        """Once per cell: re-check every variant's results, compiling the stale ones again."""
        if self._variants_generation == registry.generation:
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
        self._variants_generation = registry.generation

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

    def use(self: _Kernel, **fields) -> _Kernel:
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
            def described(config):
                return config.summary() if self.targets is None else self.targets.describe(config)

            listed = "; ".join(described(config) for config in self.sweep)
            raise ConfigError(f"{self.__name__} has no variant {described(wanted)}; its variants: {listed} "
                              "(compile more by listing values in the cell's flags, e.g. --max-registers 32,64)")
        with self._compiling(f"at use({', '.join(f'{k}={v!r}' for k, v in fields.items())})"):
            return self._bind(chosen)

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


__all__ = ["Variant", "KernelVariants"]
