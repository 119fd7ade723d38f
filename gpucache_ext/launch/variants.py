"""A sweep's variants of a `Kernel` (``--max-registers 32,64 --fastmath off,on``):
listing them (`Kernel.variants`, each result current), binding another
(`Kernel.use`), choosing one by timing (`Kernel.tune`), and telling whether a
result is still what the kernel's inputs compile to (`Kernel.changed_since`,
`Kernel.typing_inputs`).

`VariantSet` is a part a `Kernel` holds: it owns the variants' results and
is handed what it asks of the kernel (`VariantSet`'s own words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from . import registry
from ..pipeline.cache import CompileResult
from ..keys.config import CompileConfig, Targets
from ..errors import ConfigError
from ..pipeline.results import FatbinResult

if TYPE_CHECKING:
    from .builds import Builds


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


class VariantSet:
    """A kernel's sweep: its configs, the bound one, and each one's results
    (see the module).  It owns the results: the bound variant's (`results`,
    ``Kernel.results``) and the others'.  What it asks of its kernel is
    passed in: its `lock`, its `builds` (`Builds`: compiling and what is
    current), `check_bound` (re-check the bound variant as a launch does,
    and load again what the re-check dropped) and `rebound` (the kernel
    launches `config` now: its dispatch table rebuilt for it)."""

    def __init__(self, name: str, configs: Tuple[CompileConfig, ...], bound: CompileConfig, *,
                 targets: Optional[Targets], lock, builds: "Builds", check_bound: Callable[[], None],
                 rebound: Callable[[CompileConfig], None]):
        self.name = name
        self.configs = configs  # the bound one first
        self.bound = bound
        self.targets = targets
        self.results: Dict[Tuple, CompileResult] = {}
        self._others: Dict[CompileConfig, Dict[Tuple, CompileResult]] = {}
        self._lock = lock
        self._builds = builds
        self._check_bound = check_bound
        self._rebound = rebound
        # refresh_all's count when `listed` last checked every variant (results made in this cell are of its state)
        self._checked = registry.generation

    def listed(self) -> "list[Variant]":
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
            self._refresh()
            return [Variant(config, dict(self.results) if config == self.bound
                            else dict(self._others.get(config, {})), config == self.bound, self.targets)
                    for config in sorted(self.configs, key=lambda c: c != self.bound)]

    def _refresh(self) -> None:
        """Once per cell: re-check every variant's results, compiling the stale ones again."""
        if self._checked == registry.generation:
            return
        with self._builds.occasion("as its variants were read"):
            self._check_bound()
            for config, results in self._others.items():
                for argtypes, result in list(results.items()):
                    if not self._builds.still_current(argtypes, config, result):
                        results[argtypes] = self._builds.result(argtypes, config)
                        self._builds.told(results[argtypes])
            self._checked = registry.generation

    def keep(self, argtypes: Tuple, result: CompileResult) -> None:
        """The bound variant compiled `result` for `argtypes` (the kernel loaded it)."""
        with self._lock:
            self.results[argtypes] = result

    def unbuilt(self, declared: Sequence[Tuple]) -> "list[Tuple[Tuple, CompileConfig, bool]]":
        """(argtypes, config, force) of each declared signature the other variants have not compiled."""
        return [(argtypes, config, False) for config in self.configs if config != self.bound
                for argtypes in declared if argtypes not in self._others.get(config, {})]

    def compile_others(self, declared: Sequence[Tuple], force: bool) -> None:
        """Compile (or find cached) the declared signatures of every variant but the bound one."""
        for config in self.configs:
            if config == self.bound:
                continue
            built = self._others.setdefault(config, {})
            for argtypes in declared:
                if force or argtypes not in built:
                    built[argtypes] = self._builds.result(argtypes, config, force)
                    self._builds.told(built[argtypes])

    def every_result(self) -> "list[CompileResult]":
        """The results of every variant, the bound one's first."""
        with self._lock:
            return [*self.results.values(), *(r for found in self._others.values() for r in found.values())]

    def launchable(self, config: CompileConfig) -> bool:
        """Whether launches can use `config`'s variant: one its kernel's own
        compiler built (the first variant's; a sweep --backend
        numba-cuda,mlir also builds numba-cuda-mlir's, to compare)."""
        return config.backend == self.configs[0].backend

    def bind(self, chosen: CompileConfig) -> None:
        """Make `chosen` (one of `configs`) the variant launches use, with current results."""
        if not self.launchable(chosen):
            own = self.configs[0].backend
            raise ConfigError(
                f"{self.name}'s variant {chosen.summary()} is built to compare, not to launch: {self.name} is "
                f"{own}'s kernel, whose launches run {own}'s build (kernel.variants lists both); to launch "
                f"numba-cuda-mlir's, define the kernel with from numba_cuda_mlir import cuda", field="backend")
        with self._lock:
            if chosen == self.bound:
                return
            self._others[self.bound] = dict(self.results)
            self.bound = chosen
            self.results = dict(self._others.pop(chosen, {}))
            self._checked = -1  # (the next `listed` checks every variant again)
            self._rebound(chosen)

    def use(self, **fields) -> None:
        """Bind the variant whose config is the bound one's with `fields`
        changed (``kernel.use(max_registers=64, fastmath=True)``): its entries
        are in the cache, so nothing compiles where nothing changed.  Binding
        never keeps a stale result: each of the variant's results is re-checked
        against the kernel's inputs now (as a launch checks them), and one whose
        inputs changed since it was compiled (a global, a device function) is
        compiled again through the cache, only the stages that changed.  A
        config no variant has is a `ConfigError` listing the variants."""
        wanted = self.bound.replace(**fields)
        chosen = next((config for config in self.configs if config.normalised() == wanted.normalised()), None)
        if chosen is None:
            def described(config):
                return config.summary() if self.targets is None else self.targets.describe(config)

            listed = "; ".join(described(config) for config in self.configs)
            raise ConfigError(f"{self.name} has no variant {described(wanted)}; its variants: {listed} "
                              "(compile more by listing values in the cell's flags, e.g. --max-registers 32,64)")
        with self._builds.occasion(f"at use({', '.join(f'{k}={v!r}' for k, v in fields.items())})"):
            self.bind(chosen)

    def changed_since(self, result: CompileResult) -> Tuple[str, ...]:
        """What changed in this kernel's inputs since `result` (one of its
        compiles) was built, as the cache explains a miss ("global K 2.5 ->
        3.25", "device function scale: code changed"); () where compiling
        again would give `result` (the check a launch makes, whatever cells
        ran).  Compiles nothing."""
        if self._builds.still_current(result.signature, result.config, result):
            return ()
        from ..queries import miss_reasons

        reasons = []
        for each in (result.per_target.values() if isinstance(result, FatbinResult) else (result,)):
            tokens = self._builds.tokens(each.signature, each.config)
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
        found = {}
        for result in self.every_result():
            key = (result.kernel, result.place, result.signature_text)
            if key not in found and (definitions is None or key[:2] in definitions):
                found[key] = dict(self._builds.tokens(result.signature, self.bound)["typing"].components)
        return found


__all__ = ["Variant", "VariantSet"]
