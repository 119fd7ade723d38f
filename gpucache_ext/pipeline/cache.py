"""`KernelCache`: one cache per stage, looked up by tokens computed from inputs.

A compile computes the typing and llvm tokens from the inputs (source
identity, signature, config, toolchain), looks llvm up (building typing and
llvm where it is missing), then looks up ptx under a token of the llvm
artifact's digest and cubin under one of the ptx artifact's digest, building
each one missing.  Digests are stored with the entries, so an exact repeat
is answered from the tiers without compiling or hashing anything, and a stage
rebuilt to the same bytes leaves the stages after it hits (early cutoff).

Typing and lowering may read the target (see `targets`).  Their tokens do
not include ``sm``: an entry built without asking about the target serves
every target; one that asked is filed under the token plus the questions and
answers (``cc>=(7, 5)``), and the generic token holds a marker listing those
variants.  A lookup picks the variant whose answers hold for the requested
target.  ptx and cubin read ``sm`` anyway, and their tokens hash the upstream
artifact's digest, so every token stays a pure function of what the stage is
built from.

Each miss is explained against the nearest earlier entry of the same kernel:
which token components differ.

`KernelCache` is the facade over the parts that do this: its `TieredStore`
(`store`: the tiers and their counters), its `CacheIndex` (`index`: what
they hold), its `Pipeline` (`pipeline`: the stages and the one driver every
compile goes through), and the observers of each compile's result, its
`CacheAudits` (`audits`) and `Provenance` (`provenance`, what `recompile`
rebuilds from).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import backends, queries
from .audit import Auditor, CacheAudits, Mismatch, NotAudited, parse_audit
from ..keys.config import CompileConfig, Targets
from ..keys.stagespec import ALL_STAGES, STAGE_SPECS
from ..store.index import CacheIndex
from .driver import CompilePlan, CompileRequest, Pipeline
from .provenance import Provenance
from .results import (CacheStats, CompileResult, EntryInfo, FatbinResult, Outcome,  # noqa: F401
                      StageResult, StageStats, TierInfo, TierStats, parse_resources, short_signature)
from ..sources.functions import python_function
from ..store import settings
from ..store.disk import DEFAULT_MAX_BYTES as DEFAULT_DISK_BYTES
from ..store.disk import OFF_VALUES, configured_directory
from ..store.registry import DEFAULT_TIERS, tier_names
from ..store.tiered import TieredStore
from ..store.tiers import Entry, Tier
from ..keys.tokens import Token

# numba-cuda's compiler, imported by the first compile: the cache opens, lists and reports
# without it (under numba's CUDA simulator numba-cuda's compiler cannot be imported at all)

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = {spec.name: spec.max_entries for spec in STAGE_SPECS}



class KernelCache:
    """A staged kernel cache: a memory tier per stage, then persistent tiers.

    ``max_entries`` bounds each stage's memory tier: an int for all stages or
    a dict ``{stage: int}``; ``max_bytes`` likewise bounds their sizes (None:
    no byte bound).

    Persistent tiers hold the llvm, ptx and cubin stages and are searched in
    order after memory; a hit in a lower tier fills the ones above it:
    ``directory`` adds a disk tier there (capped at ``max_disk_bytes``),
    ``redis_url`` a shared Redis tier (keys under ``redis_prefix``, expiring
    after ``redis_ttl``), ``tiers`` any others (tiers, or tier names:
    ``"module:Class"``, see `gpucache_ext.store.registry`).  `KernelCache.from_environment`
    builds one from the ``GPUCACHE_*`` variables.  Safe to use from several
    threads and, through the disk tier, from several processes.

    Signing (see `gpucache_ext.store.settings`): ``secret`` (a secret, or several,
    the first signing; None: ``GPUCACHE_SECRET`` and
    ``GPUCACHE_SECRET_PREVIOUS``) signs the disk and shared tiers' entries and
    is required of every entry they read.  Without a secret the shared tier is
    left out, with a `SecurityWarning`, unless ``allow_unsigned`` (None:
    ``GPUCACHE_SHARED_UNSIGNED``).  ``redis_prefix`` and ``redis_ttl``: None
    reads ``GPUCACHE_REDIS_PREFIX`` and ``GPUCACHE_REDIS_TTL``.

    ``audit`` checks the cache's own hits (see `gpucache_ext.pipeline.audit`): None
    (default) the first hit of each kernel served by the disk or shared tier,
    True every compile that hit a stage, a fraction (0.1) a sample of them
    besides, False none (or an `AuditPolicy`); ``audit_background`` runs the
    checks in a background thread (default) or before `compile` returns.

    ``wait``: the longest a compile waits for another process's build of an
    entry every tier misses (seconds; None: ``GPUCACHE_WAIT``, default 120;
    0: never wait).  Processes sharing a disk folder or a shared tier build
    each entry once: one claims its build, the others wait for the entry
    (`gpucache_ext.store.claims`).
    """

    def __init__(self, max_entries=None, max_bytes=None, *, directory=None,
                 max_disk_bytes: Optional[int] = DEFAULT_DISK_BYTES, redis_url: Optional[str] = None,
                 secret: settings.SecretArgument = None, allow_unsigned: Optional[bool] = None,
                 redis_prefix: Optional[str] = None, redis_ttl=None, tiers: Sequence[Union[Tier, str]] = (),
                 audit=None, audit_background: bool = True, wait=None):
        # guards the memory tiers, counters and records; never held while a
        # persistent tier is read or written, nor while a stage compiles
        self._lock = threading.RLock()
        self.store = TieredStore.configured(
            _per_stage(max_entries, DEFAULT_MAX_ENTRIES, "max_entries"),
            _per_stage(max_bytes, dict.fromkeys(ALL_STAGES), "max_bytes"), self._lock, directory=directory,
            max_disk_bytes=max_disk_bytes, redis_url=redis_url, keyring=settings.keyring(secret, allow_unsigned),
            redis_prefix=redis_prefix, redis_ttl=redis_ttl, tiers=tiers,
            wait_seconds=settings.wait_seconds(wait), claim_seconds=settings.claim_seconds(),
            listed=backends.always_listed())
        """The memory tiers, then the persistent ones, and what they answered."""
        self.tiers: List[Tier] = self.store.tiers  # (the persistent tiers, in order)
        self._memory = self.store.memory
        self._notes: Dict[str, dict] = {}  # (`note`, `file_note`)
        self._launch_checks = 0
        self.provenance = Provenance(self._lock)
        """The inputs each entry was built from, for `recompile`."""
        self.index = CacheIndex(self._memory, self.store.tiers_for, self._lock)
        """What the cache holds, read without changing it (`gpucache_ext.store.index`):
        what `explain` and the miss explanations read."""
        self.pipeline = Pipeline(self.store, self.index, self._lock,
                                 lambda backend: backend.device_proxies(
                                     self._lock, lambda: 4 * self._memory["typing"].max_entries),
                                 busy=lambda busy: self._auditor.busy(busy))
        """The stages and the one driver every compile goes through (`gpucache_ext.pipeline.driver`)."""
        self.audits = CacheAudits(Auditor(parse_audit(audit), audit_background), self._lock, _compile_fresh,
                                  self.pipeline.replace_chain, self.store.audited)
        """This cache's audits of its own hits, and what they found."""
        self._auditor = self.audits.auditor
        self._flights = self.pipeline.flights
        # what follows each compile observes its result: the audit of its hits, then its provenance
        self.pipeline.observers += [self._consider_audit, self.provenance.observe]

    @property
    def places(self):
        """Where this cache's kernels are defined (`gpucache_ext.pipeline.definitions.Places`):
        as set, else the current IPython session's (its cells and files), else
        files alone."""
        return self.pipeline.places

    @places.setter
    def places(self, places) -> None:
        self.pipeline.own_places = places

    @classmethod
    def from_environment(cls, directory=None, redis_url=None, **kwargs) -> "KernelCache":
        """A cache configured by the environment (the magic's default cache).

        ``GPUCACHE_DIR``: the disk tier's directory (default: the platform's
        user cache folder; ``off`` for none), overridden by `directory`.
        ``GPUCACHE_MAX_BYTES``: the disk tier's cap (default 1 GiB).
        ``GPUCACHE_REDIS_URL``: a shared Redis tier, overridden by
        `redis_url` (``"off"``: none).  ``GPUCACHE_TIERS``: the persistent
        tiers, by name (`gpucache_ext.store.registry`: ``disk``, ``shared``, a
        user's class as ``module:Class``; default ``disk,shared``; the
        built-in ones are asked first).  ``GPUCACHE_AUDIT``: audit hits ("all",
        or a fraction such as 0.1; see `gpucache_ext.pipeline.audit`).  Signing, the key
        prefix and expiry are read as the constructor reads them (``GPUCACHE_SECRET``...).
        """
        env = os.environ
        directory = configured_directory(directory)
        max_disk = env.get("GPUCACHE_MAX_BYTES")
        try:
            max_disk_bytes = int(max_disk) if max_disk else DEFAULT_DISK_BYTES
        except ValueError:
            raise ValueError(f"GPUCACHE_MAX_BYTES={max_disk!r} is invalid; use a number of bytes") from None
        if "audit" not in kwargs:
            try:
                kwargs["audit"] = parse_audit(env.get("GPUCACHE_AUDIT"))
            except ValueError:
                raise ValueError(f"GPUCACHE_AUDIT={env.get('GPUCACHE_AUDIT')!r} is invalid; use off, first "
                                 "(the default), all, or the fraction of hits to audit, e.g. 0.1") from None
        if redis_url is None:
            redis_url = env.get("GPUCACHE_REDIS_URL")
        if redis_url is not None and str(redis_url).strip().lower() in OFF_VALUES:
            redis_url = None  # "off" (or empty): no shared tier, whatever the environment says
        named = tier_names(env.get("GPUCACHE_TIERS"))  # (the built-in ones first, then the others named)
        kwargs["tiers"] = [name for name in named if name not in DEFAULT_TIERS] + list(kwargs.get("tiers", ()))
        return cls(directory=directory if "disk" in named else None, max_disk_bytes=max_disk_bytes,
                   redis_url=redis_url if "shared" in named else None, **kwargs)

    # -- public API --------------------------------------------------------
    def compile(self, func, sig, config: Optional[CompileConfig] = None, *,
                force: bool = False, audit: Optional[bool] = None, link=None,
                _why_forced: str = "forced recompile") -> CompileResult:
        """Compile `func` (a Python function or numba.cuda.jit dispatcher) for
        the argument types `sig` and `config`, reusing every cached stage.

        The dispatcher's compile options are not read: `config` decides.
        ``link``: code the cubin links besides the kernel's, as numba-cuda's
        ``@cuda.jit(link=[...])`` (file paths or numba ``LinkableCode``
        objects; by default a dispatcher's own ``link=``); it keys the cubin
        stage alone.  With ``force``, every stage is compiled again and its
        entry replaced.  ``audit``: True audits this compile before returning
        (if a stage hit), False never, None as the cache's ``audit`` setting says.
        """
        return self.pipeline.run(self._request(func, sig, _check_config(config), link, force=force, audit=audit,
                                               why_forced=_why_forced))

    def begin(self, func, sig, config: Optional[CompileConfig] = None, *, force: bool = False,
              audit: Optional[bool] = None, link=None):
        """`compile` in two halves, to pipeline several compiles: typing and
        llvm now (the inputs are read as they are now), ptx and cubin in the
        returned object's ``work()``, from any thread, and its ``result()``
        (the `CompileResult`, as `compile` returns it) in this thread."""
        return self.pipeline.begin(self._request(func, sig, _check_config(config), link, force=force,
                                                 audit=audit, why_forced="forced recompile"))

    def compile_fatbin(self, func, sig, config: Optional[CompileConfig] = None, *, sms, ptx=None,
                       force: bool = False, audit: Optional[bool] = None, link=None,
                       _why_forced: str = "forced recompile", _identity=None) -> FatbinResult:
        """Compile `func` for several targets and assemble a fatbin: a cubin
        for each of `sms` and the PTX of `ptx` (see `Targets`: by default the
        lowest target's; ``"none"`` for no PTX) for the GPUs none of them runs on.

        Each target goes through the four stages with `config` at that
        target (``config.sm`` is not read), so typing and llvm are shared
        wherever lowering did not read the target, there is one ptx per
        virtual and one cubin per real architecture, all cached as a single
        `compile` would cache them.  The fatbin stage is keyed by its
        members' bytes by architecture (their SHA-256), nvFatbin's options and
        version: adding a target builds that target's ptx and cubin and the
        fatbin, and the order of `sms` does not matter.  `sms` may also be a
        `Targets` (then `ptx` must be None).  A PTX the driver could not
        compile alone (the kernel links other code, or uses lto) is left out
        when it was not asked for (`FatbinResult.ptx_note` says why), and is
        a `ConfigError` when it was.  Other arguments as `compile`.
        """
        config = _check_config(config)
        if isinstance(sms, Targets):
            if ptx is not None:
                raise TypeError("give ptx= inside the Targets, not beside it")
            wanted = sms
        else:
            wanted = Targets(sms, ptx)
        request = self._request(func, sig, config, link, force=force, audit=audit, why_forced=_why_forced,
                                identity=_identity)
        return self.pipeline.run_fatbin(request, wanted)

    def tokens(self, func, sig, config: Optional[CompileConfig] = None, *, link=None) -> Dict[str, Token]:
        """Each stage's token for these inputs, computed without compiling:
        the tokens lookups start from.

        These are the generic tokens: where typing or lowering turn out to read
        the target, the entry is filed under the token plus ``sm``.  ptx and
        cubin entries are filed under a token of the digest of the artifact
        before them (early cutoff), known once that artifact is found or built;
        the ptx and cubin tokens here chain on the upstream token instead, which
        is what `still_current` compares."""
        return dict(self._plan(func, sig, config, link).tokens)

    def still_current(self, func, sig, config: Optional[CompileConfig], result: CompileResult, *,
                      link=None) -> bool:
        """True when compiling these inputs would give `result` again: every
        stage's token is the one `result` was built under (nothing it was built
        from changed).  Nothing is looked up; the check is counted in
        ``stats().launch_checks``, not as hits.  A kernel asks this at its first
        launch after a cell, instead of compiling again."""
        if not result.generic_tokens:
            return False
        if isinstance(result, FatbinResult):  # every target's stages (the fatbin is keyed on their bytes)
            config = config or result.config
            current = all(_generic_hexes(self._plan(func, sig, config.replace(sm=sm), link), each)
                          == each.generic_tokens for sm, each in result.per_target.items())
        else:
            current = _generic_hexes(self._plan(func, sig, config, link), result) == result.generic_tokens
        if current:
            with self._lock:
                self._launch_checks += 1
        return current

    def explain(self, func, sig, config: Optional[CompileConfig] = None, *,
                link=None) -> "queries.Explanation":
        """What compiling these inputs would do now, without compiling, counting
        or filling any tier: per stage the reasons it would compile
        (``explain(...)["ptx"]``, empty where it would not), and its outcome
        (``.outcomes[stage]``: hit, miss, or not needed)."""
        plan = self._plan(func, sig, config, link)
        return queries.predict(self.index, plan, plan.kernel)

    def typed(self, func, sig, config: Optional[CompileConfig] = None, *, link=None):
        """The typing stage's artifact for these inputs (numba-cuda's: a `TypedFunction`, its typed IR, type
        map and call types): from memory where the typing stage is still
        cached, else typed now and kept (typed IR lives in memory only, so
        after a restart a disk hit has none).  Counted as a typing lookup."""
        request = self._request(func, sig, CompileConfig() if config is None else config, link)
        self.pipeline.backend_of(request).check_can_compile()
        return self.pipeline.attempted(request, lambda plan: plan.typed().artifact)[1]

    def _plan(self, func, sig, config, link) -> "CompilePlan":
        """The plan (tokens) of these inputs, for the queries that compile nothing."""
        return self.pipeline.plan(self._request(func, sig, CompileConfig() if config is None else config, link))

    def _request(self, func, sig, config: CompileConfig, link, **options) -> CompileRequest:
        chosen = backends.backend_for(config.backend, func)
        if config.backend is None and chosen.name != backends.DEFAULT_BACKEND:
            # (a numba_cuda_mlir kernel, or any kernel where numba-cuda-mlir alone is installed: its entries say so)
            config = config.replace(backend=chosen.name)
        backend = self.pipeline.backend_named(config.backend)
        backend.check_config(config)
        backend.refuse(func)
        return CompileRequest(python_function(func), backend.signature(sig), config,
                              _link_items(func, link), **options)

    def stats(self) -> CacheStats:
        """Per stage (`StageStats`): hits, misses, not needed (typing, when a
        later stage hit and the typed IR was no longer cached), entries and
        bytes in memory, evictions (to make room in memory, or asked for with
        `evict`), compile seconds (spent on misses), saved seconds (what the
        hits' entries took to compile), audits and audit mismatches (see
        `gpucache_ext.pipeline.audit`), and per tier (`TierStats`, ``tiers[name]``):
        hits, saved seconds, entries, bytes (and ``corrupt``, ``rejected`` for
        persistent tiers).  Reading a shared tier's numbers asks its server."""
        stage_stats = self.store.stage_stats()
        with self._lock:
            launch_checks = self._launch_checks
        return CacheStats(stage_stats, launch_checks, tuple(self.tier_info()))

    def tier_info(self) -> List[TierInfo]:
        """Each persistent tier (and each configured one left out): where it
        is, whether its entries are signed, and what it refused, by reason.
        Asks no server anything."""
        return self.store.tier_info()

    def lookups(self) -> Dict[str, Tuple[int, int, int]]:
        """Per stage (hits, misses, not needed) so far: the counters alone,
        without asking any tier what it holds (cheap, for per-cell history)."""
        return self.store.lookups()

    def entries(self, stage: Optional[str] = None, kernel: Optional[str] = None) -> List[EntryInfo]:
        """What is cached: one `EntryInfo` per artifact (markers excluded), newest first:
        stage, token, kernel, signature, config (a summary), config_fields
        (every field), tiers (where it is), bytes, created, seconds (compile
        time), reasons (why it was built).
        Filter by `stage` and by `kernel` (a qualified name or its last part).
        """
        return self.store.entries(ALL_STAGES if stage is None else (_check_stage(stage),), kernel)

    def entry(self, stage: str, token: str) -> Optional[Entry]:
        """The entry (with its artifact and token components) for one token,
        from the first tier holding it (a query: nothing is filled or counted)."""
        return self.index.find(_check_stage(stage), token)[0]

    def evict(self, stage: str, token: str) -> bool:
        """Remove one entry from every tier; True if it was anywhere (and then
        it counts as an eviction in `stats`)."""
        return self.store.evict(_check_stage(stage), token)

    def recompile(self, token: str) -> CompileResult:
        """Compile again, from scratch, exactly the inputs that produced
        `token` (any stage's entry): the snapshot of the code, globals,
        closures and device functions its compile hashed, with the same
        signature, config and link, even where they have changed since.
        Its entries are replaced.  Raises KeyError (`recompile_problem` says
        the same beforehand) where this process does not hold those inputs."""
        origin, identity = self.provenance.inputs(token)
        why = "recompiled on request"
        if origin.targets is not None:  # a fatbin: every target again, then the fatbin
            return self.compile_fatbin(identity.pyfunc, origin.argtypes, origin.config, sms=origin.targets,
                                       force=True, link=origin.link, _why_forced=why, _identity=identity)
        return self.pipeline.run(CompileRequest(identity.pyfunc, origin.argtypes, origin.config, origin.link,
                                                force=True, why_forced=why, identity=identity))

    def note(self, key: str) -> Optional[dict]:
        """The note filed under `key` (`file_note`): this process's, else the
        first persistent tier's that holds one (a new process finds it)."""
        with self._lock:
            found = self._notes.get(key)
        if found is not None:
            return dict(found)
        for tier in self.tiers:
            found = tier.get_note(key)
            if found is not None:
                with self._lock:
                    self._notes[key] = found
                return dict(found)
        return None

    def file_note(self, key: str, note: dict) -> None:
        """File a small JSON-able record (a tuned choice: `Kernel.tune`) under
        `key` in memory and every persistent tier, signed as entries are."""
        with self._lock:
            self._notes[key] = dict(note)
        for tier in self.tiers:
            tier.put_note(key, note)

    def recompile_problem(self, token: str) -> Optional[str]:
        """Why `recompile(token)` cannot rebuild that entry's own inputs, or
        None where it can."""
        return self.provenance.problem(token)

    def tier_names(self, tiers=None) -> Tuple[str, ...]:
        """The names of this cache's tiers, "memory" first, in its order;
        with `tiers` (a name or names), those of them, or a ValueError naming
        the tiers it has."""
        return self.store.tier_names(tiers)

    def clear(self, stage: Optional[str] = None, *, tiers: Optional[Sequence[str]] = None) -> None:
        """Drop the entries of one stage, or of all stages, in every tier (counters are kept).

        ``tiers``: only in these tiers, by name (``"memory"``, ``"disk"``,
        ``"shared"``): ``tiers=("memory",)`` leaves the persistent tiers, which
        other processes share, as they are; None (default): every tier."""
        stages_to_clear = ALL_STAGES if stage is None else (_check_stage(stage),)
        if tiers is not None:
            tiers = self.tier_names(tiers)
        self.store.clear(stages_to_clear, tiers)
        if stage is None and (tiers is None or "memory" in tiers):
            self.pipeline.proxies.clear()

    # -- audit -------------------------------------------------------------
    def _consider_audit(self, request: CompileRequest, identity, result: CompileResult) -> None:
        """Audit a compile whose stages hit, where the policy or its ``audit=`` wants it."""
        if not isinstance(result, FatbinResult):  # (its targets were considered one by one)
            self.audits.consider(result, request.pyfunc, request.argtypes, request.config, request.link,
                                 identity, forced=request.force, asked=request.audit, kernel=result.kernel)

    def audit_wait(self) -> None:
        """Block until every audit submitted so far is done."""
        self._auditor.wait()

    def hold_audits(self, held: bool = True) -> None:
        """Hold background audits back while the user waits (the magic's
        session does from each cell's start to its end), or let them go."""
        self._auditor.hold(held)

    def audit_mismatches(self, since: int = 0) -> List[Mismatch]:
        """The latest audit mismatches (at most 256), newest last; with `since`
        (an earlier `audit_mismatch_count`), only those found after it."""
        return self.audits.mismatches(since)

    @property
    def audit_mismatch_count(self) -> int:
        """How many mismatches audits have found in this cache's life."""
        return self.audits.mismatch_count

    def audits_not_possible(self, since: int = 0) -> List[NotAudited]:
        """The latest stages of hits an audit could not compare like with like
        (at most 256), newest last, each with why ("helpers.py changed since
        the hit"); with `since` (an earlier `audit_not_possible_count`), only
        those recorded after it."""
        return self.audits.not_possible(since)

    @property
    def audit_not_possible_count(self) -> int:
        """How many stages of hits audits could not compare in this cache's life."""
        return self.audits.not_audited_count

    def recent_misses(self):
        """The latest misses, newest last: dicts with kernel, stage, token, reasons."""
        with self._lock:
            return list(self.pipeline.misses)

def _compile_fresh(pyfunc, argtypes, config, link, identity) -> CompileResult:
    """An audit's compile: `identity`'s snapshot, every stage built afresh in a new cache without audits."""
    return KernelCache(audit=False).pipeline.run(CompileRequest(pyfunc, argtypes, config, link, force=True,
                                                                audit=False, why_forced="audit",
                                                                identity=identity))


def _generic_hexes(plan: "CompilePlan", result: CompileResult) -> Dict[str, str]:
    """`plan`'s generic tokens of the stages `result` went through (a PTX-only target: up to ptx)."""
    return {stage: token.hex for stage, token in plan.tokens.items() if stage in result.stages}


def _check_config(config) -> CompileConfig:
    config = CompileConfig() if config is None else config
    if not isinstance(config, CompileConfig):
        raise TypeError(f"config must be a CompileConfig, got {type(config).__name__}")
    return config


def _link_items(func, link) -> tuple:
    """The ``link=`` items of a compile: as given, else a dispatcher's own."""
    if link is None:
        link = (getattr(func, "targetoptions", None) or {}).get("link") or ()
    if isinstance(link, (str, bytes)) or not isinstance(link, (list, tuple, set, frozenset)):
        link = (link,)
    return tuple(link)


def _per_stage(value, default, name):
    if value is None:
        return dict(default)
    if isinstance(value, int) and not isinstance(value, bool):
        return dict.fromkeys(ALL_STAGES, value)
    if isinstance(value, Mapping):
        unknown = set(value) - set(ALL_STAGES)
        if unknown:
            raise ValueError(f"{name} has unknown stages {sorted(unknown)}; use {list(ALL_STAGES)}")
        merged = dict(default)
        merged.update(value)
        return merged
    raise TypeError(f"{name} must be None, an int or a dict {{stage: int}}, got {value!r}")


def _check_stage(stage):
    if stage not in ALL_STAGES:
        raise ValueError(f"unknown stage {stage!r}; use one of {list(ALL_STAGES)}")
    return stage


