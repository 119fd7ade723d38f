"""The one pipeline every compile goes through: stages, requests, and the driver.

A compile is asked for as one `CompileRequest`.  `Pipeline.run` makes a
`CompilePlan` of it (every stage's token, from the kernel's snapshot, its
`SourceIdentity`), which walks its backend's `Chain` of stages: it looks the
chain's entry stage up first (numba-cuda: llvm) and works back to typing only
where that missed, then looks each later stage (ptx, cubin) up by the content
digest of the artifact before it (early cutoff).  `Pipeline.run_fatbin` does
so for each target and assembles the fatbin stage from their cubins and PTX.

Every stage, typing to fatbin, is a `Stage` (the table `STAGE_TABLE`: its
name, the config fields its token reads, whether its entries persist, how it
builds), and every one is looked up, built and
filed by one driver, `Pipeline.obtain`: lookup -> single flight (`Flights`)
-> the toolchain check -> build -> digest -> filing, with the miss explained.
What follows a compile (the audit of its hits, the provenance `recompile`
needs) observes its results (`Pipeline.observers`) rather than living here.
The tokens of the stages after typing are memoised: an exact repeat computes none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

from .. import backends, queries, sessions, toolchain
from . import definitions
from ..keys import targets
from .audit import source_files_component
from ..keys.config import FIELD_STAGES, CompileConfig, Targets
from ..keys.stagespec import ALL_STAGES, STAGE_SPEC, TARGET_STAGES, Chain
from ..errors import ConfigError, SnapshotChanged, UnsupportedKernelError
from ..store.index import CacheIndex, variant_token
from ..keys.reasons import Reason
from .results import CompileResult, FatbinResult, Outcome, StageResult, short_signature
from ..sources.describe import signature_component
from ..sources.library import library_reads_changed
from ..sources.walk import identify
from ..store.codec import content_digest
from ..store.disk import DiskTier
from ..store.claims import Claim
from ..store.tiered import TieredStore
from ..store.tiers import Entry
from ..units import format_seconds
from ..keys.tokens import Component, Token, component, make_token, short_token
from ..toolchain import fatbin, toolchain_component
from .. import memos


_ATTEMPTS = 3  # compiles of one kernel before what it reads is declared too unsteady to cache


@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """One compile, as it was asked for: passed on whole."""

    pyfunc: Callable
    argtypes: tuple
    config: CompileConfig
    link: tuple = ()  # code the cubin links besides the kernel's (see `KernelCache.compile`)
    force: bool = False  # every stage built again, its entry replaced
    audit: Optional[bool] = None  # True: audit before returning; False: never; None: as the cache says
    why_forced: str = "forced recompile"  # what a forced compile's entries say of why they were built
    identity: Any = None  # a `SourceIdentity`: compile this snapshot, not `pyfunc` as it is now
    until: str = "cubin"  # "ptx": stop after ptx (a fatbin's PTX-only target)

    def at(self, sm: int, until: str = "cubin", audit: Optional[bool] = None) -> "CompileRequest":
        """The same request for one target."""
        return dataclasses.replace(self, config=self.config.replace(sm=sm), until=until,
                                   audit=self.audit if audit is None else audit)


class Stage(NamedTuple):
    """One stage, as the driver sees it.

    ``build(job, upstream)`` makes its artifact from the artifact of the
    stage before it in the job's chain (`upstream`; None for typing and
    fatbin, which build from what their job holds); the artifact declares
    what it persists (`state()`/`rebuild()`, see `gpucache_ext.pipeline.artifacts`)."""

    name: str
    fields: Tuple[str, ...]  # the config fields its token reads (`FIELD_STAGES`)
    persisted: bool  # held by the persistent tiers (typing's typed IR lives in memory only)
    keyed_on_bytes: bool  # its token hashes the upstream artifact's digest, not its token (early cutoff)
    build: Callable[[Any, Any], Any]

    def digest(self, artifact) -> Optional[str]:
        """The digest of the artifact's canonical bytes (None where it does not persist)."""
        return content_digest(self.name, artifact) if self.persisted else None

    def toolchain(self, memo=None, chain: Optional[Chain] = None) -> Component:
        """What its token hashes of the tools it runs in `chain` (`toolchain_component`)."""
        return toolchain_component(self.name, memo, chain)


def _built_by_backend(name: str, plan: "CompilePlan", upstream):
    return plan.backend.build(name, plan, upstream)


def _stage(name: str, build: Callable[[Any, Any], Any]) -> Stage:
    """The driver's view of stage `name`, as `stagespec` declares it, with its build."""
    spec = STAGE_SPEC[name]
    return Stage(name, tuple(field for field, read in FIELD_STAGES.items() if name in read),
                 spec.persisted, spec.keyed_on_bytes, build)


STAGE_TABLE: Dict[str, Stage] = {stage.name: stage for stage in (
    # a target's stages: built by the plan's backend (`backends.Backend.build`)
    *(_stage(name, functools.partial(_built_by_backend, name)) for name in TARGET_STAGES),
    _stage("fatbin", lambda job, _: fatbin.assemble(job.cubins, job.ptx_member, job.entry_name, job.kernel)),
)}
assert tuple(STAGE_TABLE) == ALL_STAGES  # (a stage declared without its build, or built undeclared)


class Filing(NamedTuple):
    """What filing a stage's fresh entry records besides the artifact: what
    it was built for, and why (a `CompilePlan`'s, or a fatbin's)."""

    kernel: str
    signature_text: str
    config: Any  # a CompileConfig, or a fatbin's `FatbinConfig`
    place: Optional[str]  # where the kernel was defined
    forced: bool
    why_forced: str
    # (a fatbin) member ("cubin sm_86", "PTX compute_80") -> why this compile rebuilt it (None: reused)
    members: Optional[Mapping[str, Optional[str]]] = None
    typing_seconds: float = 0.0  # what typing took in this compile (an llvm entry records it)
    tools: Tuple[str, ...] = ()  # the tools the stage ran (`toolchain.stage_tools`), which its entry names


class Found(NamedTuple):
    """A stage's artifact in one compile, found or built: what the next stage needs."""

    stage: str
    artifact: Any
    digest: Optional[str]  # of its canonical bytes (None for typing)
    token: str  # the token it is filed under
    typing_seconds: float = 0.0  # an llvm entry found: what typing took when it was built (`Entry`)


class Pipeline:
    """One cache's compiles: the plans it runs, and the one driver
    (`obtain`) every stage of every plan is found or built through.

    `store` holds the tiers, `index` what they hold, `proxies` (made by
    `make_proxies(backend)`) the device proxies typing calls through; `busy(True/False)` brackets each compile
    (the auditor waits meanwhile); `observers` are called with each
    finished compile (request, the snapshot it hashed, its result)."""

    def __init__(self, store: TieredStore, index: CacheIndex, lock, make_proxies: Callable[[Any], Any],
                 busy: Callable[[bool], None]):
        self.store = store
        self.index = index
        self._lock = lock
        self.backend = backends.backend()  # the compiler every plan of this pipeline compiles with
        self.proxies = make_proxies(self.backend)
        self._busy = busy
        self.flights = Flights()  # one build at a time per (stage, token)
        self.observers: List[Callable[[CompileRequest, Any, CompileResult], None]] = []
        self.misses: deque = deque(maxlen=256)  # the latest misses, why each compiled
        self.own_places: Optional[definitions.Places] = None  # (`places`)

    @property
    def places(self) -> "definitions.Places":
        """Where code is defined (`gpucache_ext.pipeline.definitions.Places`): the cache's
        own if it was given some, else the current session's, else files alone."""
        return self.own_places if self.own_places is not None else sessions.places()

    @property
    def memo(self):
        """Where the toolchain's fingerprint is remembered: the disk tier's folder, if any."""
        return next((tier.directory for tier in self.store.tiers if isinstance(tier, DiskTier)), None)

    # -- compiles -------------------------------------------------------------
    def plan(self, request: CompileRequest) -> "CompilePlan":
        """The tokens of `request`, computed from its snapshot, nothing looked up."""
        return CompilePlan(self, request)

    def backend_of(self, request: CompileRequest):
        """The backend `request` compiles with: the one its config names (None: this pipeline's)."""
        return self.backend_named(request.config.backend)

    def backend_named(self, name: Optional[str]):
        return self.backend if name is None else backends.backend(name)

    def run(self, request: CompileRequest) -> CompileResult:
        """One target's four stages (or up to ``request.until``)."""
        self.backend_of(request).check_can_compile()
        self._busy(True)
        try:
            plan, result = self.attempted(request, CompilePlan.run)
        finally:
            self._busy(False)
        return self._finish(request, plan, result)

    def attempted(self, request: CompileRequest, step: Callable[["CompilePlan"], Any]) -> Tuple["CompilePlan", Any]:
        """A new plan of `request` and `step(plan)`, made again from a new
        snapshot while what it reads changes under it (up to `_ATTEMPTS`)."""
        for attempt in range(_ATTEMPTS):
            plan = CompilePlan(self, request)  # (a plan reloads numba's settings)
            try:
                with plan.backend.compiling():
                    return plan, step(plan)
            # a library was replaced since its fingerprint was read, an array changed between
            # its hash and its copy, an environment variable was read for the first time: again
            except (toolchain.ToolchainChanged, SnapshotChanged) as exc:
                if request.identity is not None and isinstance(exc, SnapshotChanged):
                    raise
                _give_up_after(attempt, plan, exc)
        raise AssertionError("unreachable: the last attempt raises")

    def begin(self, request: CompileRequest) -> "Begun":
        """`run` in two halves: typing and llvm now, in this thread (they read
        the function's globals and numba's settings as they are now), ptx and
        cubin in `Begun.work`, from any thread (they read only the llvm
        artifact, the config and the toolchain), then `Begun.result` here.
        A front that has to start again (a library replaced, an array changed
        while it was hashed) runs whole now, as `run` runs it."""
        self.backend_of(request).check_can_compile()
        self._busy(True)
        try:
            plan = CompilePlan(self, request)
            with plan.backend.compiling():
                front = plan.front()
        except (toolchain.ToolchainChanged, SnapshotChanged):
            self._busy(False)
            return Begun(self, request, done=self.run(request))
        except BaseException:
            self._busy(False)
            raise
        return Begun(self, request, plan, front)

    def run_targets(self, request: CompileRequest, targets_until: Mapping[int, str]) -> Dict[int, CompileResult]:
        """`run` for several targets ({sm: "cubin" or "ptx"}): tokens, typing
        and llvm one target after another in this thread (they read numba's
        settings and the function's globals, and targets may share their
        entries), then ptx and cubin in threads where there are cores to
        spare (libNVVM and nvJitLink compile in parallel; every tier and
        counter is behind the cache's lock)."""
        self._busy(True)
        try:
            return self._run_each_target(request, targets_until)
        finally:
            self._busy(False)

    def _run_each_target(self, request: CompileRequest, targets_until: Mapping[int, str]):
        requests = {sm: request.at(sm, until, audit=False if until == "ptx" else None)
                    for sm, until in targets_until.items()}
        plans = {sm: CompilePlan(self, each) for sm, each in requests.items()}
        backend = self.backend_of(request)
        backend.check_can_compile()
        fronts = {}
        with backend.compiling():
            for sm, plan in plans.items():  # llvm one target after another: targets may share it
                try:
                    fronts[sm] = plan.front()
                except (toolchain.ToolchainChanged, SnapshotChanged):
                    pass  # (compiled again below, one at a time)
        workers = min(len(fronts), os.cpu_count() or 1)

        def back(sm):
            try:
                return plans[sm].back(fronts[sm])
            except (toolchain.ToolchainChanged, SnapshotChanged):
                return None

        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers, thread_name_prefix="gpucache-target") as pool:
                ran = dict(zip(fronts, pool.map(back, fronts)))
        else:
            ran = {sm: back(sm) for sm in fronts}
        ran.update({sm: None for sm in plans if sm not in fronts})
        return {sm: self.run(requests[sm]) if result is None else self._finish(requests[sm], plans[sm], result)
                for sm, result in ran.items()}

    def run_fatbin(self, request: CompileRequest, wanted: Targets) -> FatbinResult:
        """Every target of `wanted` (the lowest first: typing and llvm, which
        the others then find; then the others at once), then the fatbin
        stage, keyed by its members' bytes (see `KernelCache.compile_fatbin`)."""
        first = wanted.sms[0]
        per_target = {first: self.run(request.at(first))}
        per_target.update(self.run_targets(
            request, {sm: "cubin" if sm in wanted.sms else "ptx" for sm in wanted.builds if sm != first}))
        job = FatbinJob(self, request, wanted, dict(sorted(per_target.items())))
        result = job.run()
        for observe in self.observers:
            observe(request, request.identity, result)
        return result

    def _finish(self, request: CompileRequest, plan: "CompilePlan", result: CompileResult) -> CompileResult:
        """What follows a compile: what it keeps alive, then its observers (audit, provenance)."""
        result.referenced = plan.identity.referenced
        for observe in self.observers:
            observe(request, plan.identity, result)
        return result

    # -- the driver -----------------------------------------------------------
    def lookup(self, stage: str, job, token: Token, cutoff: bool = False, memory_only: bool = False
               ) -> Optional[Found]:
        """`stage`'s entry under `token` (or its variant for the job's target),
        counted as a hit and recorded in ``job.stages``; None where no tier has it."""
        start = time.perf_counter()
        entry, token, tier = self.store.lookup(stage, token, job.cc, memory_only)
        if entry is None:
            return None
        self.store.count(stage, True, tier, entry.seconds, cutoff=cutoff)
        job.stages[stage] = StageResult(stage, token.hex, Outcome.HIT, tier, time.perf_counter() - start,
                                        components=token.components, saved_seconds=entry.seconds,
                                        cutoff=cutoff)
        return Found(stage, entry.artifact, entry.digest, token.hex, entry.typing_seconds)

    def obtain(self, stage: str, job, token: Token, upstream: Optional[Found] = None, *, cutoff: bool = False,
               looked_up: bool = False, built_from: str = "", claim: Optional[Claim] = None) -> Found:
        """Every stage of every compile, fatbin included, found or built in
        one place: the lookup (unless forced, or `looked_up` already), then in
        the entry's single flight a second look (a thread that waited for
        another's build of it finds it, a hit), the toolchain check, the
        build from `upstream`'s artifact, its digest, and filing it, the miss
        explained.  `built_from`: the token of the entry it is built from,
        which its entry names.  Across processes, the build of a persisted
        stage is claimed first (`claiming`): where another process holds the
        claim, its entry is waited for and read; `claim`: one already held
        (llvm's, claimed before typing)."""
        forced = job.forced
        if not (forced or looked_up):
            found = self.lookup(stage, job, token, cutoff)
            if found is not None:
                return found
        definition = STAGE_TABLE[stage]
        with self.flights.hold(stage, token.hex):
            if not forced:
                found = self.lookup(stage, job, token, cutoff, memory_only=True)
                if found is not None:
                    return found
            # across processes: one builds, the others wait for its entry (`gpucache_ext.store.claims`)
            with (contextlib.nullcontext((None, claim)) if claim is not None
                  else self.claiming(stage, job, token, cutoff)) as (waited, claim):
                if waited is not None:
                    return waited
                toolchain.confirm(stage)  # the fingerprint in the tokens is that of the tools about to run
                self.store.count(stage, False)
                start = time.perf_counter()
                artifact = definition.build(job, upstream.artifact if upstream is not None else None)
                seconds = time.perf_counter() - start
                digest = definition.digest(artifact)
                token, reasons = self._file(stage, token, job.filing(stage), artifact, seconds,
                                            getattr(artifact, "target_reads", targets.NO_READS), digest, built_from)
        if claim.gave_up:
            reasons += (Reason(f"waited {format_seconds(claim.waited)} for another process's build "
                               "(GPUCACHE_WAIT), then built it here"),)
        job.stages[stage] = StageResult(stage, token.hex, Outcome.MISS, None, seconds, reasons,
                                        components=token.components, waited=claim.waited if claim.gave_up else 0.0)
        return Found(stage, artifact, digest, token.hex)

    @contextlib.contextmanager
    def claiming(self, stage: str, job, token: Token, cutoff: bool = False):
        """Claim the build of `stage`'s entry (`obtain` does, and `front` for
        llvm before typing: a process that waits types nothing): yields (the
        entry another process built, as a hit, or None; the `Claim`, to pass
        to `obtain`: an empty one for a forced compile or a stage kept in
        memory alone); the claim is released when the block ends."""
        if job.forced or not STAGE_TABLE[stage].persisted:
            yield None, Claim()
            return
        with self.store.claimed(stage, token, job.cc) as claim:
            yield (self._waited_for(stage, job, claim, cutoff) if claim.entry is not None else None), claim

    def _waited_for(self, stage: str, job, claim: Claim, cutoff: bool) -> Found:
        """The entry another process built while this one waited: a hit in the tier it was read from."""
        entry = claim.entry
        self.store.count(stage, True, claim.tier, entry.seconds, cutoff=cutoff)
        job.stages[stage] = StageResult(stage, claim.token.hex, Outcome.HIT, claim.tier, claim.waited,
                                        components=claim.token.components, saved_seconds=entry.seconds,
                                        cutoff=cutoff, waited=claim.waited)
        return Found(stage, entry.artifact, entry.digest, claim.token.hex)

    def _file(self, stage, token: Token, filing: Filing, artifact, seconds, reads, digest, upstream):
        """File a fresh artifact; returns (effective token, reasons it missed:
        for a forced compile, the filing's `why_forced`).  The caller holds the
        entry's flight: no other compile of this cache writes this token, or
        its marker, meanwhile."""
        kernel = filing.kernel
        refusals = [self.store.take_refusal(stage, token.hex)]
        if reads:
            marker, _ = self.index.find(stage, token.hex)
            variants = list(marker.variants) if marker is not None and marker.is_marker else []
            if reads not in variants:
                variants.append(reads)
            self.store.put(stage, Entry(token.hex, kernel, None, token.components, 0, 0.0, variants=variants,
                                        tools=filing.tools))
            token = variant_token(token, reads)
            refusals.append(self.store.take_refusal(stage, token.hex))
        packages = tuple(tool for tool in filing.tools if tool not in STAGE_SPEC[stage].tools)  # (its compiler's)
        reasons = (Reason(filing.why_forced),) if filing.forced else self._explain(stage, token, kernel,
                                                                                  filing.members, packages)
        # an entry a tier refused (its signature) is why this stage compiled, first of all
        reasons = tuple(dict.fromkeys(Reason(r) for r in refusals if r)) + reasons
        self.store.put(stage, artifact_entry(stage, token.hex, kernel, artifact, token.components, seconds,
                                             filing.signature_text, filing.config, reasons, upstream, filing.place,
                                             digest=digest, typing_seconds=filing.typing_seconds,
                                             tools=filing.tools))
        self.index.remember(stage, token, kernel)
        self.store.compiled(stage, seconds)
        return token, reasons

    def _explain(self, stage, token: Token, kernel, members=None, packages=()) -> Tuple[Reason, ...]:
        """Why `stage` missed (see `queries.explain_miss`); kept among the recent misses."""
        reasons = queries.explain_miss(self.index, stage, kernel, token.components, members, packages)
        with self._lock:
            self.misses.append({"kernel": kernel, "stage": stage, "token": token.hex,
                                "reasons": reasons, "time": time.time()})
        return reasons

    def replace_chain(self, result: CompileResult, fresh: CompileResult) -> None:
        """Evict every entry `result` was served from (a wrong one anywhere in
        the chain taints what follows) and file the fresh artifacts instead
        (an audit's answer to a mismatch)."""
        artifacts = fresh.artifacts()
        upstream = ""
        chain = self.backend_named(result.config.backend).chain
        for stage in _chain_of(result):
            self.store.evict(stage, result.stages[stage].token)
            built = fresh.stages[stage]  # (ptx and cubin: the fresh bytes' digests make their tokens)
            if stage in artifacts:
                self.store.put(stage, artifact_entry(
                    stage, built.token, result.kernel, artifacts[stage], built.components, built.seconds,
                    short_signature(result.signature), result.config, ("replaced after an audit mismatch",),
                    upstream, result.place, tools=toolchain.stage_tools(stage, chain)))
            upstream = built.token


def artifact_entry(stage: str, token: str, kernel: str, artifact, components, seconds: float, signature: str,
                   config, reasons: tuple, upstream: str, place: Optional[str],
                   digest: Optional[str] = None, typing_seconds: float = 0.0, tools: Tuple[str, ...] = ()) -> Entry:
    """The entry one stage's build is filed as: the artifact under its token,
    with what it was built for and why (the content digest computed where
    not given: typing has none; `typing_seconds`: what typing took, which
    the chain's entry stage records)."""
    if digest is None:
        digest = STAGE_TABLE[stage].digest(artifact)
    return Entry(token, kernel, artifact, dict(components), artifact.nbytes, seconds, signature=signature,
                 config=config.summary(), reasons=reasons, config_fields=config.fields(), digest=digest,
                 upstream=upstream, place=place, typing_seconds=typing_seconds, tools=tools)


def _give_up_after(attempt: int, plan: "CompilePlan", exc: Exception) -> None:
    """Raise once the last attempt failed: what the kernel reads keeps changing."""
    if attempt + 1 < _ATTEMPTS:
        return
    if isinstance(exc, SnapshotChanged):
        raise UnsupportedKernelError(
            f"{plan.kernel}: {exc} ({_ATTEMPTS} times); stop writing to it while the cell compiles, or "
            "pass it to the kernel as an argument") from exc
    raise exc


class Begun:
    """A compile `Pipeline.begin` started: its front done, its back to run
    (`work`, in any thread, once), then its result (`result`, in the thread
    that began it: what follows a compile, audit and provenance, runs there,
    as after `Pipeline.run`)."""

    def __init__(self, pipeline: Pipeline, request: CompileRequest, plan: Optional["CompilePlan"] = None,
                 front: Optional[Found] = None, done: Optional[CompileResult] = None):
        self.pipeline, self.request, self.plan, self.front = pipeline, request, plan, front
        self._done = done
        self._raw: Optional[CompileResult] = None
        self._error: Optional[BaseException] = None
        self._worked = done is not None
        self._lock = threading.Lock()  # (`result` waits for a `work` running in another thread)

    def work(self) -> None:
        """ptx and cubin from the front's llvm artifact (an error is kept for `result`)."""
        with self._lock:
            if not self._worked:
                self._worked = True
                self._back()

    def _back(self) -> None:
        try:
            self._raw = self.plan.back(self.front)
        except (toolchain.ToolchainChanged, SnapshotChanged):
            self._raw = None  # (compiled whole again in `result`)
        except BaseException as exc:
            self._error = exc
        finally:
            self.pipeline._busy(False)

    def result(self) -> CompileResult:
        """The compile's result, `work` done (here, if no thread ran it)."""
        if self._done is not None:
            return self._done
        self.work()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._raw is None:  # a library replaced, a source file changed while linked: once more, whole
            self._done = self.pipeline.run(self.request)
        else:
            self._done = self.pipeline._finish(self.request, self.plan, self._raw)
        return self._done


class CompilePlan:
    """One compile of one target: the tokens, the lookups, and the stages that must run."""

    def __init__(self, pipeline: Pipeline, request: CompileRequest):
        self.pipeline = pipeline
        self.backend = pipeline.backend_of(request)
        self.chain: Chain = self.backend.chain  # the stages it runs, in order
        self.request = request
        self.pyfunc, self.argtypes, self.config = request.pyfunc, request.argtypes, request.config
        self.link = request.link
        self.forced = request.force
        identity = request.identity
        # what the kernel reads, read once (an audit gives the snapshot of the compile it checks)
        self.identity = identity if identity is not None else \
            identify(self.pyfunc, with_location=self.config.debug or self.config.lineinfo)
        if self.identity.unlinked and not self.link:
            raise UnsupportedKernelError(self.identity.unlinked[0])
        if self.link and identity is None:  # the kernel's own link= code joins what its external functions link
            from ..toolchain import linking

            origin = f"{self.identity.qualname} (link=): "
            self.identity.links = linking.canonical(
                list(self.identity.links) + [linking.read(item, origin) for item in self.link])
        self.kernel = self.identity.qualname
        self.place = pipeline.places.of(self.identity.code)  # (with kernel: its definition)
        self.signature_text = short_signature(self.argtypes)
        self.parts: Dict[str, Dict[str, Component]] = {}  # each stage's token components
        self.tokens = self._tokens()
        self.stages: Dict[str, StageResult] = {}

    @property
    def cc(self):
        return self.config.cc

    def filing(self, stage: str) -> Filing:
        typing = self.stages.get("typing") if stage == self.chain.entry else None
        typing_seconds = 0.0 if typing is None else typing.saved_seconds if typing.hit else typing.seconds
        return Filing(self.kernel, self.signature_text, self.config, self.place, self.forced,
                      self.request.why_forced, typing_seconds=typing_seconds,
                      tools=toolchain.stage_tools(stage, self.chain))

    def _tokens(self) -> Dict[str, Token]:
        config = self.config
        memo = self.pipeline.memo
        typing = make_token("typing", {
            **self.identity.components,
            **self.backend.typing_components(self),
            "signature": signature_component(self.argtypes, self.signature_text[1:-1]),
            "toolchain": STAGE_TABLE["typing"].toolchain(chain=self.chain),
        })
        settings = self.settings = self.backend.settings()
        chain = self.chain.stages
        toolchains = {stage: STAGE_TABLE[stage].toolchain(memo, self.chain) for stage in chain[1:]}
        links = tuple((link.digest, link.name) for link in self.identity.links)
        # what the later stages' tokens are made of besides typing's: the same
        # inputs give the same tokens (memoised: an exact repeat rebuilds none)
        key = (self.chain, typing.hex, config, tuple(settings.items()), links,
               tuple(part.digest for part in toolchains.values()))
        tokens, self.parts = _memoised(_DOWNSTREAM_TOKENS, key, lambda: _downstream_tokens(
            self.chain, typing, config, (self.backend.settings_name, settings), toolchains, links))
        return {"typing": typing, **tokens}

    def content_token(self, stage: str, upstream_digest: str, extra: Optional[Mapping[str, Component]] = None
                      ) -> Token:
        """The token a stage keyed on bytes (ptx, cubin) is filed under: its
        inputs, with the upstream artifact's digest in place of its token."""
        key = (stage, self.tokens[stage].hex, upstream_digest,
               tuple((name, part.digest) for name, part in (extra or {}).items()))

        def make():
            parts = dict(self.parts[stage])
            parts[self.chain.upstream(stage)] = Component(upstream_digest, f"output {short_token(upstream_digest)}")
            parts.update(extra or {})
            return make_token(stage, parts)

        return _memoised(_CONTENT_TOKENS, key, make)

    def run(self) -> CompileResult:
        """The chain's entry stage (llvm) is looked up by its token; the stages
        after it (ptx, cubin) by their content tokens, which need the digest
        of the artifact before them: found (stored with its entry) or built.
        A stage rebuilt to the same bytes as before thus leaves the stages
        after it hits (early cutoff).  ``until="ptx"`` stops after ptx (a
        fatbin's PTX-only target): the result has no cubin."""
        return self.back(self.front())

    def front(self) -> Found:
        """The chain's front, typing to its entry stage (numba-cuda: llvm):
        the entry stage's artifact, found, or built from the stages before it."""
        obtain, entry = self.pipeline.obtain, self.chain.entry
        found = None if self.forced else self.pipeline.lookup(entry, self, self.tokens[entry])
        if found is None:
            with self.pipeline.claiming(entry, self, self.tokens[entry]) as (waited, claim):
                if waited is None:
                    built = None
                    for stage in self.chain.front[:-1]:
                        built = obtain(stage, self, self.tokens[stage], built)
                    return obtain(entry, self, self.tokens[entry], built, looked_up=True, claim=claim)
            found = waited  # (another process built it while this one waited)
        self._peek_typing(found.typing_seconds)
        return found

    def typed(self) -> Found:
        """The typing stage alone: found, or built and stored."""
        return self.pipeline.obtain("typing", self, self.tokens["typing"])

    def back(self, front: Found) -> CompileResult:
        """The chain's back (ptx and cubin, or ptx alone) from `front`'s artifact."""
        built = self.chain.until(self.request.until)
        found = {front.stage: front}
        upstream = front
        for stage in self.chain.back:
            if stage not in built:
                break
            extra = None
            if STAGE_SPEC[stage].links:  # (the source files the debug info of the front's code names)
                self.sources = self.backend.debug_source_files(front.artifact)
                extra = self.sources_part = source_files_component(self.sources)
            upstream = found[stage] = self._downstream(stage, upstream, extra)
        artifact = {stage: each.artifact for stage, each in found.items()}
        return CompileResult(self.kernel, self.argtypes, self.config,
                             {s: self.stages[s] for s in built},
                             artifact.get(self.chain.entry), artifact["ptx"], artifact.get("cubin"),
                             generic_tokens={s: t.hex for s, t in self.tokens.items() if s in built},
                             place=self.place)

    def _downstream(self, stage, upstream: Found, extra=None) -> Found:
        """`stage`, looked up by the content token of `upstream`'s artifact (and
        `extra` components), else built."""
        token = self.content_token(stage, upstream.digest, extra)
        rebuilt = self.stages[upstream.stage].outcome is Outcome.MISS
        return self.pipeline.obtain(stage, self, token, upstream, cutoff=rebuilt, built_from=upstream.token)

    # -- what the builds ask of the plan (`backends.Backend.build`) -------------------
    def check_library_reads(self, doing: str) -> None:
        """numba reads a library module's attributes live as it types and
        lowers: one replaced since they were hashed (another thread, a
        reload) starts the compile again."""
        changed = library_reads_changed(self.identity)
        if changed is not None:
            raise SnapshotChanged(f"{changed} was replaced while {self.kernel} was being {doing}")

    def _peek_typing(self, saved_before: float = 0.0):
        """Report typing when a later stage hit: a hit if still cached, else
        not needed, saving what it took when the llvm entry was built
        (`saved_before`): skipping it is part of what the hit saved."""
        store = self.pipeline.store
        entry, token, tier = store.lookup("typing", self.tokens["typing"], self.config.cc)
        if entry is not None:
            outcome, saved = Outcome.HIT, entry.seconds
            store.count("typing", True, tier, saved)
        else:
            outcome, tier, saved = Outcome.NOT_NEEDED, None, saved_before
            store.not_needed("typing", saved)
        self.stages["typing"] = StageResult("typing", token.hex, outcome, tier, 0.0,
                                            components=token.components, saved_seconds=saved)


class FatbinConfig(NamedTuple):
    """What a fatbin entry records of its config: the targets in place of ``sm``."""

    config: CompileConfig
    targets: Targets

    def summary(self) -> str:
        return self.targets.describe(self.config)

    def fields(self) -> dict:
        return {**self.config.fields(), "sm": list(self.targets.sms), "ptx": self.targets.ptx}


class FatbinJob:
    """The fatbin stage of one compile: its members, from every target's
    result, and its token, of their bytes."""

    def __init__(self, pipeline: Pipeline, request: CompileRequest, wanted: Targets,
                 per_target: Dict[int, CompileResult]):
        self.pipeline, self.request, self.wanted, self.per_target = pipeline, request, wanted, per_target
        self.primary = primary = per_target[wanted.sms[0]]
        self.kernel, self.entry_name, self.cc = primary.kernel, primary.entry_name, primary.config.cc
        self.forced = request.force
        self.stages: Dict[str, StageResult] = {}
        self.ptx_member, self.ptx_note = None, ""
        if wanted.ptx is not None:
            source = per_target[wanted.ptx]
            problem = fatbin.ptx_problem(source._ptx, primary._cubin.links)
            if problem is None:
                image = fatbin.image("ptx", source._ptx)
                self.ptx_member = (fatbin.member("ptx", wanted.ptx, source.stages["ptx"].token, image),
                                   image.decode())
            elif wanted.explicit_ptx:
                raise ConfigError(f"ptx={wanted.ptx}: the PTX of {primary.kernel} cannot go into a fatbin "
                                  f"for the driver to compile alone: {problem}; leave it out (ptx='none')",
                                  field="ptx")
            else:
                self.ptx_note = problem
        self.cubins = [(fatbin.member("cubin", sm, per_target[sm].stages["cubin"].token, per_target[sm].cubin),
                        per_target[sm].cubin) for sm in wanted.sms]

    def filing(self, stage: str = "fatbin") -> Filing:
        primary = self.primary
        return Filing(self.kernel, primary.signature_text, FatbinConfig(primary.config, self.wanted),
                      primary.place, self.forced, self.request.why_forced, _member_whys(self.per_target, self.wanted),
                      tools=toolchain.stage_tools(stage))

    def token(self) -> Token:
        # each member by the bytes nvFatbin is given (not its entry's digest, which
        # covers the link log too: its timings differ from one build to the next)
        members = self.cubins + ([self.ptx_member] if self.ptx_member is not None else [])
        parts = {f"{member.kind} {member.name}": Component(member.digest, f"bytes {short_token(member.digest)}")
                 for member, _ in members}
        parts["kernel"] = component(self.kernel)
        parts["options"] = component(list(fatbin.OPTIONS), " ".join(fatbin.OPTIONS) or "(defaults)")
        parts["toolchain"] = STAGE_TABLE["fatbin"].toolchain(self.pipeline.memo)
        return make_token("fatbin", parts)

    def run(self) -> FatbinResult:
        """The fatbin stage, found or assembled (its entry names the first
        cubin's, which leads back to the code it was built from)."""
        found = self.pipeline.obtain("fatbin", self, self.token(), built_from=self.cubins[0][0].token)
        primary, stage = self.primary, self.stages["fatbin"]
        return FatbinResult(primary.kernel, primary.signature, primary.config,
                            {**primary.stages, "fatbin": stage}, primary._llvm, primary._ptx, primary._cubin,
                            audit=primary.audit, referenced=primary.referenced,
                            generic_tokens=primary.generic_tokens, place=primary.place, targets=self.wanted,
                            per_target=self.per_target, fatbin_stage=stage, _fatbin=found.artifact,
                            ptx_note=self.ptx_note)


def _member_whys(per_target: Mapping[int, CompileResult], wanted: Targets) -> Dict[str, Optional[str]]:
    """Why each member of a fatbin was built by this compile, in the words
    of the first stage that missed for its target (where that stage only
    says its input changed, the first target's typing or llvm says why);
    None for a member whose entry was there already."""
    def own(result):
        for stage in _chain_of(result):
            built = result.stages.get(stage)
            if built is not None and built.outcome is Outcome.MISS:
                # (another target's entry was nearest: "sm 86 -> 80" says nothing of the member)
                told = [r for r in map(Reason.of, built.reasons) if not r.is_upstream and r.component != "sm"]
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


def _chain_of(result: CompileResult) -> Tuple[str, ...]:
    """The per-target stages `result` went through, in its chain's order."""
    return tuple(stage for stage in result.stages if STAGE_SPEC[stage].per_target)


def _downstream_tokens(chain: Chain, typing: Token, config: CompileConfig, settings, toolchains, links):
    """The tokens of the stages after typing in `chain` (numba-cuda: llvm,
    ptx, cubin), each chained on the one before, and each one's components.
    `settings`: (the name its token gives them, the compiler's settings),
    which the stage built from typing reads."""
    tokens, all_parts = {}, {}
    upstream = typing
    for stage in chain.stages[1:]:
        parts = {name: component(value) for name, value in config.stage_fields(stage, chain).items()}
        lowering = upstream is typing  # (with typing's own components, which only its entries take to disk)
        parts[upstream.stage] = Component(upstream.hex, upstream.short,
                                          tuple(sorted(upstream.components.items())) if lowering else ())
        parts["toolchain"] = toolchains[stage]
        if lowering:
            parts[settings[0]] = component(dict(settings[1]))
        if STAGE_SPEC[stage].links and links:
            # what external functions link keys the cubin alone (see linking)
            parts["linked code"] = component([digest for digest, _ in links], ", ".join(name for _, name in links))
        all_parts[stage] = parts
        tokens[stage] = upstream = make_token(stage, parts)
    return tokens, all_parts


# (pure functions of their keys, shared by every cache: bounded, oldest dropped first)
_DOWNSTREAM_TOKENS: Dict[tuple, tuple] = memos.memo("pipeline._DOWNSTREAM_TOKENS", {})
_CONTENT_TOKENS: Dict[tuple, Token] = memos.memo("pipeline._CONTENT_TOKENS", {})


def _memoised(memo: dict, key, make, limit: int = 4096):
    """memo[key], made by `make()` when missing; the oldest entry goes when full."""
    found = memo.get(key)
    if found is None:
        if len(memo) >= limit:
            memo.pop(next(iter(memo)))
        found = memo[key] = make()
    return found


class Flights:
    """Single flight: one build at a time of each (stage, token) in a cache.

    Threads compiling overlapping kernels and configs at once build each
    entry once: the first to miss builds it, the others wait for that entry
    alone (not for the cache), then find it.  Locks exist only while some
    thread holds or waits for them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: Dict[Tuple[str, str], List] = {}  # key -> [lock, threads holding or waiting]

    @contextlib.contextmanager
    def hold(self, stage: str, token: str):
        key = (stage, token)
        with self._lock:
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = [threading.Lock(), 0]
            held[1] += 1
        try:
            with held[0]:
                yield
        finally:
            with self._lock:
                held[1] -= 1
                if not held[1]:
                    del self._held[key]

    def __len__(self) -> int:
        """Entries being built or waited for now."""
        with self._lock:
            return len(self._held)


