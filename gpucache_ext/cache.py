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
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .toolchain import fatbin
from . import queries, targets, toolchain
from .importing import lazy_module
from .store import settings
from .store.codec import PERSISTENT_STAGES, content_digest
from .audit import (Auditor, CacheAudits, Mismatch, NotAudited, parse_audit)
from .config import LAYERS, STAGES, CompileConfig, Targets
from .errors import ConfigError, SecurityWarning, UnsupportedKernelError
from .results import (CacheStats, CompileResult, EntryInfo, FatbinResult, LayerResult, Outcome,  # noqa: F401
                      StageResult, StageStats, TierInfo, TierStats, parse_resources, short_signature)
from .store.disk import DEFAULT_MAX_BYTES as DEFAULT_DISK_BYTES
from .store.disk import OFF_VALUES, DiskTier, configured_directory, default_directory
from .store.shared import RedisTier, UnsignedSharedTier, display_url
from .store.signing import Keyring
from .index import CacheIndex, variant_token
from .pipeline import Built, CompilePlan, Filing, Flights
from .provenance import Origin, Provenance
from .store.tiered import TieredStore
from .store.tiers import Entry, MemoryTier, Tier
from .extensions import derived_during
from .sources import SnapshotChanged, python_function, rebind
from .tokens import Component, Token, component, make_token, short_token
from .toolchain import toolchain_component

# numba-cuda's compiler, imported by the first compile: the cache opens, lists and reports
# without it (under numba's CUDA simulator numba-cuda's compiler cannot be imported at all)
stages = lazy_module("gpucache_ext.stages")

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = {"typing": 256, "llvm": 512, "ptx": 1024, "cubin": 1024, "fatbin": 256}



class KernelCache:
    """A staged kernel cache: a memory tier per stage, then persistent tiers.

    ``max_entries`` bounds each stage's memory tier: an int for all stages or
    a dict ``{stage: int}``; ``max_bytes`` likewise bounds their sizes (None:
    no byte bound).

    Persistent tiers hold the llvm, ptx and cubin stages and are searched in
    order after memory; a hit in a lower tier fills the ones above it:
    ``directory`` adds a disk tier there (capped at ``max_disk_bytes``),
    ``redis_url`` a shared Redis tier (keys under ``redis_prefix``, expiring
    after ``redis_ttl``), ``tiers`` any others.  `KernelCache.from_environment`
    builds one from the ``GPUCACHE_*`` variables.  Safe to use from several
    threads and, through the disk tier, from several processes.

    Signing (see `gpucache_ext.store.settings`): ``secret`` (a secret, or several,
    the first signing; None: ``GPUCACHE_SECRET`` and
    ``GPUCACHE_SECRET_PREVIOUS``) signs the disk and shared tiers' entries and
    is required of every entry they read.  Without a secret the shared tier is
    left out, with a `SecurityWarning`, unless ``allow_unsigned`` (None:
    ``GPUCACHE_SHARED_UNSIGNED``).  ``redis_prefix`` and ``redis_ttl``: None
    reads ``GPUCACHE_REDIS_PREFIX`` and ``GPUCACHE_REDIS_TTL``.

    ``audit`` checks the cache's own hits (see `gpucache_ext.audit`): None
    (default) the first hit of each kernel served by the disk or shared tier,
    True every compile that hit a stage, a fraction (0.1) a sample of them
    besides, False none (or an `AuditPolicy`); ``audit_background`` runs the
    checks in a background thread (default) or before `compile` returns.
    """

    def __init__(self, max_entries=None, max_bytes=None, *, directory=None,
                 max_disk_bytes: Optional[int] = DEFAULT_DISK_BYTES, redis_url: Optional[str] = None,
                 secret: settings.SecretArgument = None, allow_unsigned: Optional[bool] = None,
                 redis_prefix: Optional[str] = None, redis_ttl=None, tiers: Sequence[Tier] = (),
                 audit=None, audit_background: bool = True):
        limits = _per_stage(max_entries, DEFAULT_MAX_ENTRIES, "max_entries")
        byte_limits = _per_stage(max_bytes, dict.fromkeys(LAYERS), "max_bytes")
        memory = {s: MemoryTier(limits[s], byte_limits[s]) for s in LAYERS}
        keyring = settings.keyring(secret, allow_unsigned)
        persistent: List[Tier] = []
        refused: List[TierInfo] = []  # configured tiers left out, as `tier_info` shows them
        if directory is not None:
            directory = Path(directory).expanduser()
            persistent.append(DiskTier(directory, max_disk_bytes, keyring=Keyring(keyring.secrets, True),
                                       private=directory == default_directory()))
        if redis_url:
            try:
                persistent.append(RedisTier(redis_url, keyring, prefix=redis_prefix, ttl=redis_ttl))
            except UnsignedSharedTier as exc:
                warnings.warn(str(exc), SecurityWarning, stacklevel=2)
                refused.append(TierInfo(
                    "shared", display_url(redis_url), signed=False, used=False,
                    note="no secret (set GPUCACHE_SECRET, or GPUCACHE_SHARED_UNSIGNED=1 "
                         "to use it unsigned)"))
        # guards the memory tiers, counters and records; never held while a
        # persistent tier is read or written, nor while a stage compiles
        self._lock = threading.RLock()
        self.store = TieredStore(memory, persistent + list(tiers), refused, self._lock)
        """The memory tiers, then the persistent ones, and what they answered."""
        self.tiers: List[Tier] = self.store.tiers  # (the persistent tiers, in order)
        self._memory = self.store.memory
        self._notes: Dict[str, dict] = {}  # (`note`, `file_note`)
        self._proxies: "OrderedDict[str, stages.DeviceProxy]" = OrderedDict()
        self._misses = deque(maxlen=256)
        self._launch_checks = 0
        self._flights = Flights()  # one build at a time per (stage, token)
        self.provenance = Provenance(self._lock)
        """The inputs each entry was built from, for `recompile`."""
        self.index = CacheIndex(self._memory, self.store.tiers_for, self._lock)
        """What the cache holds, read without changing it (`gpucache_ext.index`):
        what `explain` and the miss explanations read."""
        self.audits = CacheAudits(Auditor(parse_audit(audit), audit_background), self._lock, _compile_fresh,
                                  self._replace_chain, self.store.audited)
        """This cache's audits of its own hits, and what they found."""
        self._auditor = self.audits.auditor

    @classmethod
    def from_environment(cls, directory=None, redis_url=None, **kwargs) -> "KernelCache":
        """A cache configured by the environment (the magic's default cache).

        ``GPUCACHE_DIR``: the disk tier's directory (default: the platform's
        user cache folder; ``off`` for none), overridden by `directory`.
        ``GPUCACHE_MAX_BYTES``: the disk tier's cap (default 1 GiB).
        ``GPUCACHE_REDIS_URL``: a shared Redis tier, overridden by
        `redis_url` (``"off"``: none).  ``GPUCACHE_AUDIT``: audit hits ("all",
        or a fraction such as 0.1; see `gpucache_ext.audit`).  Signing, the key
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
        return cls(directory=directory, max_disk_bytes=max_disk_bytes, redis_url=redis_url, **kwargs)

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
        config = _check_config(config)
        pyfunc = python_function(func)
        return self._compile_one(pyfunc, stages.normalize_signature(sig), config, _link_items(func, link),
                                 force, audit, _why_forced)

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
        `compile` would cache them.  The fatbin layer is keyed by its
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
        pyfunc = python_function(func)
        argtypes = stages.normalize_signature(sig)
        link = _link_items(func, link)
        # the lowest target first (typing and llvm, which the others then find), then the others at once
        first = wanted.sms[0]
        per_target = {first: self._compile_one(pyfunc, argtypes, config.replace(sm=first), link, force, audit,
                                               _why_forced, identity=_identity)}
        per_target.update(self._compile_targets(
            pyfunc, argtypes, config, link, force, audit, _why_forced,
            {sm: "cubin" if sm in wanted.sms else "ptx" for sm in wanted.builds if sm != first}, _identity))
        per_target = dict(sorted(per_target.items()))
        primary = per_target[wanted.sms[0]]
        ptx_member, note = None, ""
        if wanted.ptx is not None:
            source = per_target[wanted.ptx]
            problem = fatbin.ptx_problem(source._ptx, primary._cubin.links)
            if problem is None:
                layer = source.stages["ptx"]
                image = fatbin.image("ptx", source._ptx)
                ptx_member = (fatbin.member("ptx", wanted.ptx, layer.token, image), image.decode())
            elif wanted.explicit_ptx:
                raise ConfigError(f"ptx={wanted.ptx}: the PTX of {primary.kernel} cannot go into a fatbin "
                                  f"for the driver to compile alone: {problem}; leave it out (ptx='none')",
                                  field="ptx")
            else:
                note = problem
        cubins = [(fatbin.member("cubin", sm, per_target[sm].stages["cubin"].token, per_target[sm].cubin),
                   per_target[sm].cubin) for sm in wanted.sms]
        layer, artifact = self._fatbin_layer(primary, wanted, cubins, ptx_member, force, _why_forced,
                                             _member_whys(per_target, wanted))
        result = FatbinResult(primary.kernel, primary.signature, primary.config,
                              {**primary.stages, "fatbin": layer}, primary._llvm, primary._ptx, primary._cubin,
                              audit=primary.audit, referenced=primary.referenced,
                              generic_tokens=primary.generic_tokens, place=primary.place, targets=wanted,
                              per_target=per_target,
                              fatbin_stage=layer, _fatbin=artifact, ptx_note=note)
        first_origin = self.provenance.origin(primary.stages["cubin"].token)
        self.provenance.remember((layer.token,), Origin(first_origin.snapshot if first_origin else -1, argtypes,
                                                        config, tuple(link), wanted))
        return result

    def _fatbin_layer(self, primary: CompileResult, wanted: Targets, cubins, ptx_member, force, why_forced,
                      members):
        """The fatbin stage: look its token up, else assemble and store it
        (`members`: why this compile built each member, `_member_whys`)."""
        memo = next((tier.directory for tier in self.tiers if isinstance(tier, DiskTier)), None)
        # each member by the bytes nvFatbin is given (not its entry's digest, which
        # covers the link log too: its timings differ from one build to the next)
        parts = {f"{member.kind} {member.name}": Component(member.digest, f"bytes {short_token(member.digest)}")
                 for member, _ in cubins + ([ptx_member] if ptx_member is not None else [])}
        parts["kernel"] = component(primary.kernel)
        parts["options"] = component(list(fatbin.OPTIONS), " ".join(fatbin.OPTIONS) or "(defaults)")
        parts["toolchain"] = toolchain_component("fatbin", memo)
        token = make_token("fatbin", parts)
        start = time.perf_counter()

        def find():
            entry, _, tier = self.store.lookup("fatbin", token, primary.config.cc)
            if entry is None:
                return None
            self.store.count("fatbin", True, tier, entry.seconds)
            return StageResult("fatbin", token.hex, Outcome.HIT, tier, time.perf_counter() - start,
                               components=token.components, saved_seconds=entry.seconds), entry.artifact

        filing = Filing(primary.kernel, primary.signature_text, _FatbinConfig(primary.config, wanted),
                         primary.place, force, why_forced, members)
        # (its upstream: the first cubin, which leads back to the code it was built from)
        found, built = self._build("fatbin", token, filing,
                                   lambda: fatbin.assemble(cubins, ptx_member, primary.entry_name, primary.kernel),
                                   find, upstream=cubins[0][0].token)
        if found is not None:
            return found
        return StageResult("fatbin", built.token.hex, Outcome.MISS, None, built.seconds, built.reasons,
                           components=built.token.components), built.artifact

    def _compile_one(self, pyfunc, argtypes, config: CompileConfig, link, force, audit, why_forced,
                     until: str = "cubin", identity=None) -> CompileResult:
        """One target's four stages (`identity`: compile that snapshot, not
        `pyfunc` as it is now: an audit)."""
        stages.check_numba_runtime()
        self._auditor.busy(True)
        try:
            for attempt in range(_ATTEMPTS):
                # (a plan reloads numba's settings)
                plan = CompilePlan(self, pyfunc, argtypes, config, link, why_forced, identity)
                try:
                    with derived_during():  # (what numba registers meanwhile follows from what was hashed)
                        result = plan.run(force, until)
                    break
                # a library was replaced since its fingerprint was read, or an array
                # changed between its hash and its copy: hash and compile again
                except (toolchain.ToolchainChanged, SnapshotChanged) as exc:
                    if identity is not None and isinstance(exc, SnapshotChanged):
                        raise
                    _give_up_after(attempt, plan, exc)
        finally:
            self._auditor.busy(False)
        return self._finish(plan, result, force, audit)

    def _compile_targets(self, pyfunc, argtypes, config: CompileConfig, link, force, audit, why_forced,
                         targets_until, identity=None) -> Dict[int, CompileResult]:
        """`_compile_one` for several targets ({sm: "cubin" or "ptx"}): tokens,
        typing and llvm one target after another in this thread (they read
        numba's settings and the function's globals, and targets may share
        their entries), then ptx and cubin in threads where there are cores to
        spare (libNVVM and nvJitLink compile in parallel; every tier and
        counter is behind the cache's lock)."""
        self._auditor.busy(True)
        try:
            return self._compile_each_target(pyfunc, argtypes, config, link, force, audit, why_forced, targets_until,
                                             identity)
        finally:
            self._auditor.busy(False)

    def _compile_each_target(self, pyfunc, argtypes, config: CompileConfig, link, force, audit, why_forced,
                             targets_until, identity=None) -> Dict[int, CompileResult]:
        plans = {sm: CompilePlan(self, pyfunc, argtypes, config.replace(sm=sm), link, why_forced, identity)
                 for sm in targets_until}
        stages.check_numba_runtime()
        fronts = {}
        with derived_during():
            for sm, plan in plans.items():  # llvm one target after another: targets may share it
                try:
                    fronts[sm] = plan.front(force)
                except (toolchain.ToolchainChanged, SnapshotChanged):
                    pass  # (compiled again below, one at a time)
        workers = min(len(fronts), os.cpu_count() or 1)

        def run(sm):
            try:
                return plans[sm].back(fronts[sm], targets_until[sm])
            except (toolchain.ToolchainChanged, SnapshotChanged):
                return None

        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers, thread_name_prefix="gpucache-target") as pool:
                ran = dict(zip(fronts, pool.map(run, fronts)))
        else:
            ran = {sm: run(sm) for sm in fronts}
        ran.update({sm: None for sm in plans if sm not in fronts})
        found = {}
        for sm, result in ran.items():
            audited = False if targets_until[sm] == "ptx" else audit
            if result is None:
                found[sm] = self._compile_one(pyfunc, argtypes, config.replace(sm=sm), link, force, audited,
                                              why_forced, targets_until[sm], identity)
            else:
                found[sm] = self._finish(plans[sm], result, force, audited)
        return found

    def _finish(self, plan: "CompilePlan", result: CompileResult, force, audit) -> CompileResult:
        """What follows a compile: what it keeps alive, its audit, and where its tokens came from."""
        pyfunc, argtypes, config, link = plan.pyfunc, plan.argtypes, plan.config, plan.link
        result.referenced = plan.identity.referenced
        self.audits.consider(result, pyfunc, argtypes, config, link, plan.identity, forced=force, asked=audit,
                             kernel=plan.kernel)
        self.provenance.remember((layer.token for layer in result.stages.values()),
                                 Origin(self.provenance.hold(plan.identity), argtypes, config, tuple(link), None))
        return result

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

    def typed(self, func, sig, config: Optional[CompileConfig] = None, *, link=None) -> "stages.TypedFunction":
        """The typing stage's artifact for these inputs (numba's typed IR, type
        map and call types): from memory where the typing stage is still
        cached, else typed now and kept (typed IR lives in memory only, so
        after a restart a disk hit has none).  Counted as a typing lookup."""
        stages.check_numba_runtime()
        plan = self._plan(func, sig, config, link)
        with derived_during():
            return plan.typed().artifact

    def _plan(self, func, sig, config, link) -> "CompilePlan":
        """The plan (tokens) of these inputs, for the queries that compile nothing."""
        config = CompileConfig() if config is None else config
        return CompilePlan(self, python_function(func), stages.normalize_signature(sig), config,
                     _link_items(func, link))

    def stats(self) -> CacheStats:
        """Per stage (`StageStats`): hits, misses, not needed (typing, when a
        later stage hit and the typed IR was no longer cached), entries and
        bytes in memory, evictions (to make room in memory, or asked for with
        `evict`), compile seconds (spent on misses), saved seconds (what the
        hits' entries took to compile), audits and audit mismatches (see
        `gpucache_ext.audit`), and per tier (`TierStats`, ``tiers[name]``):
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
        return self.store.entries(LAYERS if stage is None else (_check_stage(stage),), kernel)

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
        return self._compile_one(identity.pyfunc, origin.argtypes, origin.config, origin.link, True,
                                 None, why, identity=identity)

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
        stages_to_clear = LAYERS if stage is None else (_check_stage(stage),)
        if tiers is not None:
            tiers = self.tier_names(tiers)
        self.store.clear(stages_to_clear, tiers)
        if stage is None and (tiers is None or "memory" in tiers):
            with self._lock:
                self._proxies.clear()

    # -- audit -------------------------------------------------------------
    def _replace_chain(self, result: CompileResult, fresh: CompileResult) -> None:
        """Evict every entry `result` was served from (a wrong one anywhere in
        the chain taints what follows) and file the fresh artifacts instead."""
        artifacts = fresh.artifacts()
        upstream = ""
        for stage in STAGES:
            self.evict(stage, result.stages[stage].token)
            layer = fresh.stages[stage]  # (ptx and cubin: the fresh bytes' digests make their tokens)
            if stage in artifacts:
                artifact = artifacts[stage]
                self.store.put(stage, _artifact_entry(stage, layer.token, result.kernel, artifact, layer.components,
                                                 layer.seconds, short_signature(result.signature), result.config,
                                                 ("replaced after an audit mismatch",), upstream, result.place))
            upstream = layer.token

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
            return list(self._misses)

    # -- internals used by CompilePlan --------------------------------------------
    def _build(self, stage: str, token: Token, filing: "Filing", make: Callable[[], Any],
               find: Callable[[], Any], upstream: str = "") -> Tuple[Any, Optional["Built"]]:
        """Every stage's build after a miss, fatbin included, in one place:
        in the entry's single flight, `find()` again unless forced (a thread
        that waited for another's build of it finds it: its answer is
        returned as (found, None)), then the toolchain check, the build, its
        digest, and filing it: (None, `Built`)."""
        with self._flights.hold(stage, token.hex):
            if not filing.forced:
                found = find()
                if found is not None:
                    return found, None
            toolchain.confirm(stage)  # the fingerprint in the tokens is that of the tools about to run
            self.store.count(stage, False)
            start = time.perf_counter()
            artifact = make()
            seconds = time.perf_counter() - start
            reads = getattr(artifact, "target_reads", targets.NO_READS)
            digest = content_digest(stage, artifact) if stage in PERSISTENT_STAGES else None
            token, reasons = self._store(stage, token, filing, artifact, seconds, reads, digest, upstream)
        return None, Built(artifact, digest, token, seconds, reasons)

    def _store(self, stage, token: Token, filing: "Filing", artifact, seconds, reads, digest=None, upstream=""):
        """File a fresh artifact; returns (effective token, reasons it missed:
        for a forced compile, the filing's `why_forced`).  The caller holds the
        entry's flight (`Flights`): no other compile of this cache writes
        this token, or its marker, meanwhile."""
        kernel = filing.kernel
        refusals = [self.store.take_refusal(stage, token.hex)]
        if reads:
            marker, _ = self.index.find(stage, token.hex)
            variants = list(marker.variants) if marker is not None and marker.is_marker else []
            if reads not in variants:
                variants.append(reads)
            self.store.put(stage, Entry(token.hex, kernel, None, token.components, 0, 0.0, variants=variants))
            token = variant_token(token, reads)
            refusals.append(self.store.take_refusal(stage, token.hex))
        reasons = (filing.why_forced,) if filing.forced else self._explain(stage, token, kernel, filing.members)
        # an entry a tier refused (its signature) is why this stage compiled, first of all
        reasons = tuple(dict.fromkeys(r for r in refusals if r)) + reasons
        self.store.put(stage, _artifact_entry(stage, token.hex, kernel, artifact, token.components, seconds,
                                         filing.signature_text, filing.config, reasons, upstream, filing.place,
                                         digest=digest))
        self.index.remember(stage, token, kernel)
        self.store.compiled(stage, seconds)
        return token, reasons

    def _explain(self, stage, token: Token, kernel, members=None) -> Tuple[str, ...]:
        """Why `stage` missed (see `queries.explain_miss`); kept among the recent misses."""
        reasons = queries.explain_miss(self.index, stage, kernel, token.components, members)
        with self._lock:
            self._misses.append({"kernel": kernel, "stage": stage, "token": token.hex,
                                 "reasons": reasons, "time": time.time()})
        return reasons

    def _proxy_for(self, dispatcher, identity):
        """The device proxy for this device function object and identity (made
        once, then reused).  A proxy belongs to one function object: two of
        one digest (module twins) never share what either typed from its own
        snapshot.  The proxy holds its dispatcher, so the id stays its own."""
        key = _proxy_key(dispatcher, identity)
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None or proxy.original is not dispatcher:
                proxy = self._new_proxy(dispatcher, identity, self._proxy_for)
            self._proxies.move_to_end(key)
            return proxy

    def _fresh_proxies(self):
        """A proxy factory that makes new proxies (once per device function), for
        forced compiles: nothing typed or lowered before is reused."""
        made = {}

        def proxy_for(dispatcher, identity):
            key = _proxy_key(dispatcher, identity)
            with self._lock:
                if key not in made:
                    made[key] = self._new_proxy(dispatcher, identity, proxy_for)
                return made[key]

        return proxy_for

    def _new_proxy(self, dispatcher, identity, proxy_for):
        proxy = stages.DeviceProxy(dispatcher, rebind(identity, proxy_for), identity.digest, identity.declared,
                                   options=identity.options, debug_filename=identity.debug_filename,
                                   def_line=identity.def_line)
        key = _proxy_key(dispatcher, identity)
        self._proxies[key] = proxy
        self._proxies.move_to_end(key)
        while len(self._proxies) > 4 * self._memory["typing"].max_entries:
            self._proxies.popitem(last=False)
        return proxy


def _compile_fresh(pyfunc, argtypes, config, link, identity) -> CompileResult:
    """An audit's compile: `identity`'s snapshot, every stage built afresh in a new cache without audits."""
    return KernelCache(audit=False)._compile_one(pyfunc, argtypes, config, link, True, False, "audit",
                                                  identity=identity)


_ATTEMPTS = 3  # compiles of one kernel before what it reads is declared too unsteady to cache


def _artifact_entry(stage: str, token: str, kernel: str, artifact, components, seconds: float, signature: str,
                    config: CompileConfig, reasons: tuple, upstream: str, place: Optional[str],
                    digest: Optional[str] = None) -> Entry:
    """The entry one stage's build is filed as: the artifact under its token,
    with what it was built for and why (the content digest computed where
    not given: typing has none)."""
    if digest is None and stage in PERSISTENT_STAGES:
        digest = content_digest(stage, artifact)
    return Entry(token, kernel, artifact, dict(components), artifact.nbytes, seconds, signature=signature,
                 config=config.summary(), reasons=reasons, config_fields=config.fields(), digest=digest,
                 upstream=upstream, place=place)


def _give_up_after(attempt: int, plan: "CompilePlan", exc: Exception) -> None:
    """Raise once the last attempt failed: what the kernel reads keeps changing."""
    if attempt + 1 < _ATTEMPTS:
        return
    if isinstance(exc, SnapshotChanged):
        raise UnsupportedKernelError(
            f"{plan.kernel}: {exc} ({_ATTEMPTS} times); stop writing to it while the cell compiles, or "
            "pass it to the kernel as an argument") from exc
    raise exc


def _proxy_key(dispatcher, identity) -> tuple:
    """A device proxy's key: the function object (held by the proxy, so its id
    stays its own while the proxy is kept) and the identity it was made from."""
    return id(dispatcher), identity.digest


def _generic_hexes(plan: "CompilePlan", result: CompileResult) -> Dict[str, str]:
    """`plan`'s generic tokens of the stages `result` went through (a PTX-only target: up to ptx)."""
    return {stage: token.hex for stage, token in plan.tokens.items() if stage in result.stages}


def _check_config(config) -> CompileConfig:
    config = CompileConfig() if config is None else config
    if not isinstance(config, CompileConfig):
        raise TypeError(f"config must be a CompileConfig, got {type(config).__name__}")
    return config


class _FatbinConfig(NamedTuple):
    """What a fatbin entry records of its config: the targets in place of ``sm``."""

    config: CompileConfig
    targets: Targets

    def summary(self) -> str:
        return self.targets.describe(self.config)

    def fields(self) -> dict:
        return {**self.config.fields(), "sm": list(self.targets.sms), "ptx": self.targets.ptx}


def _member_whys(per_target: Mapping[int, CompileResult], wanted: Targets) -> Dict[str, Optional[str]]:
    """Why each member of a fatbin was built by this compile, in the words
    of the first stage that missed for its target (where that stage only
    says its input changed, the first target's typing or llvm says why);
    None for a member whose entry was there already."""
    def own(result):
        for stage in STAGES:
            layer = result.stages.get(stage)
            if layer is not None and layer.outcome is Outcome.MISS:
                # (another target's entry was nearest: "sm 86 -> 80" says nothing of the member)
                told = [r for r in layer.reasons if not r.endswith(" input changed") and not r.startswith("sm ")]
                if told:
                    return "; ".join(told)
        return None

    first = own(per_target[wanted.sms[0]])
    whys: Dict[str, Optional[str]] = {}
    for sm in wanted.sms:
        built = per_target[sm].stages["cubin"].outcome is Outcome.MISS
        whys[f"cubin sm_{sm}"] = (own(per_target[sm]) or first or "") if built else None
    if wanted.ptx is not None:
        built = per_target[wanted.ptx].stages["ptx"].outcome is Outcome.MISS
        whys[f"PTX compute_{wanted.ptx}"] = (own(per_target[wanted.ptx]) or first or "") if built else None
    return whys


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
        return dict.fromkeys(LAYERS, value)
    if isinstance(value, Mapping):
        unknown = set(value) - set(LAYERS)
        if unknown:
            raise ValueError(f"{name} has unknown stages {sorted(unknown)}; use {list(LAYERS)}")
        merged = dict(default)
        merged.update(value)
        return merged
    raise TypeError(f"{name} must be None, an int or a dict {{stage: int}}, got {value!r}")


def _check_stage(stage):
    if stage not in LAYERS:
        raise ValueError(f"unknown stage {stage!r}; use one of {list(LAYERS)}")
    return stage
