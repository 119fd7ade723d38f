"""Self-audit: a cache hit is compiled again from nothing and compared.

Tokens are the cache's only defence against stale code; the audit checks
them.  A compile that hit a stage is compiled again in a brand-new pipeline
(a fresh memory-only cache, new device proxies, every stage forced) from the
same snapshot of what the kernel reads (so an edit made since is no
mismatch), and each stage that was served from the cache is compared with
the fresh artifact, byte for byte: NVVM IR modules, PTX (or LTO-IR), cubin,
nvJitLink's log and entry names.

Which hits (`AuditPolicy`, ``KernelCache(audit=...)``, ``GPUCACHE_AUDIT``,
``%%gpukernel --audit``): by default the first hit of each kernel that came
from the disk or shared tier, where another process, another version or
another person wrote the entry; ``"all"`` or a fraction (``0.1``) widens it
to a sample of every hit, ``"off"`` turns it off.  Background audits run in
a low-priority thread once the cache has been idle a moment, so the cell the
user waits for does not wait for them.  (numba captures warnings process-wide
while it types, and Python's warning filters are not per thread: a
``warnings.catch_warnings`` block running in another thread at that moment
may miss a warning; in a notebook, audits run between cells.)  The pipeline's outputs are canonical (see
`stages.canonical_modules`); the one normalisation drops the compile times
nvJitLink writes into its log (`artifact_parts`).

An audit compares like with like: the fresh compile reads the snapshot the
hit's lookup hashed, and what it cannot take from that snapshot (numba's
extension tables, the toolchain, numba's settings, the size and time of the
source files debug info names, which ptxas writes into a cubin; the
libraries a kernel reads through their modules) it reads as it is at audit
time.  Where that differs from what the hit's tokens hashed (a module edited
and reloaded, a file saved, a library reinstalled since the hit), the fresh
compile is of other inputs: the stages it affects are *not audited*, with
the reason (`AuditOutcome.not_audited`, ``"not audited: helpers.py changed
since the hit"``), quietly, and the entry is kept.

A mismatch is a soundness bug.  It is reported loudly (`AuditWarning`, with
the kernel, the stage, the token components and the first differing lines),
counted in the stats, the cached entry is evicted from every tier and
replaced by the fresh one, and the fresh artifacts are used: at once for a
synchronous audit, and from the kernel's next launch for one in the
background.

`recompile_entry` does the same for one stored entry without the kernel's
source: a PTX entry is compiled again from the NVVM IR entry it was built
from, a cubin from its PTX (``gpucache verify --recompile``).
"""

from __future__ import annotations

import difflib
import logging
import os
import queue
import re
import random
import threading
import time
import types
import warnings
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from .debuginfo import debug_source_files, source_file_stats
from ..errors import GpuCacheWarning, SnapshotChanged
from ..keys.stagespec import TARGET_PERSISTENT_STAGES
from ..keys.tokens import short_token
from .. import memos

if TYPE_CHECKING:
    from .results import CompileResult

AUDITED_STAGES = TARGET_PERSISTENT_STAGES  # (typed IR has no bytes to compare)


def audited_stages(result) -> Tuple[str, ...]:
    """The stages of `result` an audit compares: those its chain persists."""
    return tuple(stage for stage in AUDITED_STAGES if stage in result.stages)


def _chain(config):
    """The chain of the backend `config` names (numba-cuda's where none)."""
    from .. import backends

    return backends.backend_for(config.backend).chain
log = logging.getLogger(__name__)


class AuditWarning(GpuCacheWarning):
    """A cache hit differed from a fresh compile of the same inputs."""


@dataclass(frozen=True)
class Mismatch:
    """One stage whose cached artifact differed from a fresh compile."""

    kernel: str
    stage: str
    token: str
    components: Tuple[Tuple[str, str], ...]  # (name, shown) of the token's components
    difference: str  # the first differing lines

    def message(self) -> str:
        shown = "\n".join(f"    {name}: {value}" for name, value in self.components)
        return (f"gpucache_ext audit: the cached {self.stage} artifact of {self.kernel} "
                f"(token {short_token(self.token)}) differs from a fresh compile of the same inputs; "
                f"the entry was evicted and the fresh artifact is used.  This is a cache "
                f"soundness bug: please report it with these details.\n  token components:\n"
                f"{shown}\n  first difference:\n{self.difference}")


@dataclass
class AuditOutcome:
    """The audit of one compile result: ``state`` is "pending", "passed"
    (every stage compared matched), "mismatch", "failed" (the fresh compile
    itself raised), "skipped" (an array it read changed while it was copied)
    or "not audited" (no stage could be compared like with like).
    `not_audited` holds, per stage left uncompared, why (its inputs changed
    since the hit); with "passed", the other stages were compared."""

    state: str = "pending"
    mismatches: List[Mismatch] = field(default_factory=list)
    error: str = ""
    not_audited: Dict[str, str] = field(default_factory=dict)  # stage -> why it was not compared
    since: float = field(default_factory=time.time)  # when the hit was served
    stages: Tuple[str, ...] = AUDITED_STAGES  # those of its compile's chain an audit compares
    done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def mismatched(self) -> bool:
        return self.state == "mismatch"

    @property
    def audited(self) -> Tuple[str, ...]:
        """The stages compared with a fresh compile (once done)."""
        if self.state not in ("passed", "mismatch"):
            return ()
        return tuple(stage for stage in self.stages if stage not in self.not_audited)

    def summary(self) -> str:
        """One line: what the audit found, and what it could not audit and why."""
        if self.state == "not audited":
            first = [why for why in self.not_audited.values() if not why.startswith("built from ")]
            return "not audited: " + _reasons(first or self.not_audited.values())
        text = self.state + (f" ({self.error})" if self.error else "")
        if self.not_audited:
            text += "; " + "; ".join(f"{stage} not audited: {why}" for stage, why in self.not_audited.items())
        return text

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the audit is done; False on timeout."""
        return self.done.wait(timeout)


@dataclass(frozen=True)
class NotAudited:
    """A stage of a hit that an audit could not compare like with like."""

    kernel: str
    stage: str
    token: str
    reason: str


def _reasons(reasons) -> str:
    return "; ".join(dict.fromkeys(reasons))  # (each once, in order)


@dataclass(frozen=True)
class AuditPolicy:
    """Which hits a cache audits: a `fraction` of every hit (sampled), and,
    with `first_persisted`, the first hit of each kernel served by a
    persistent tier (disk or shared)."""

    fraction: float = 0.0
    first_persisted: bool = True

    @property
    def enabled(self) -> bool:
        return self.fraction > 0 or self.first_persisted

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        if self.fraction >= 1:
            return "all"
        if self.fraction > 0:
            return f"{self.fraction:g} of hits, and the first disk or shared hit of each kernel"
        return "the first disk or shared hit of each kernel"


DEFAULT_AUDIT = AuditPolicy()
_OFF = AuditPolicy(0.0, False)
_INVALID = "use off, first (the default: the first disk or shared hit of each kernel), all, or a fraction such as 0.1"


def parse_audit(value) -> AuditPolicy:
    """The audit policy from an `AuditPolicy`, None (the default), True/False,
    a fraction in [0, 1], or text ("off", "first", "all", "0.1"), as given to
    KernelCache or GPUCACHE_AUDIT.  A fraction audits that share of every hit
    besides the default's first persistent hits; 0 and False turn auditing off."""
    if isinstance(value, AuditPolicy):
        return value
    if value is None:
        return DEFAULT_AUDIT
    if value is False:
        return _OFF
    if value is True:
        return AuditPolicy(1.0)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "first", "default", "persisted"):
            return DEFAULT_AUDIT
        if text in ("0", "off", "no", "false", "none"):
            return _OFF
        if text in ("1", "on", "yes", "true", "all"):
            return AuditPolicy(1.0)
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"audit={value!r} is invalid; {_INVALID}") from None
    if isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0:
        return AuditPolicy(float(value)) if value else _OFF
    raise ValueError(f"audit={value!r} is invalid; {_INVALID}")


_TIMING = re.compile(rb"^.*Compile time = .*$\n?", re.MULTILINE)


def artifact_parts(stage: str, artifact) -> list:
    """What an artifact consists of, as comparable values (metadata and bytes).

    The one normalisation: nvJitLink's info log (kept with the cubin, for its
    resource figures) reports how long ptxas took, which differs run to run;
    those lines are left out of the comparison.
    """
    from ..store.codec import entry_parts

    meta, parts = entry_parts(stage, artifact)
    if stage == "cubin":
        parts = [parts[0], _TIMING.sub(b"", parts[1]), *parts[2:]]
    return [meta, parts]


def first_difference(stage: str, cached, fresh, context: int = 3) -> Optional[str]:
    """The first lines where two artifacts differ (None when equal)."""
    (cached_meta, cached_parts), (fresh_meta, fresh_parts) = (
        artifact_parts(stage, cached), artifact_parts(stage, fresh))
    if cached_meta == fresh_meta and cached_parts == fresh_parts:
        return None
    for index, (old, new) in enumerate(zip(cached_parts, fresh_parts)):
        if old == new:
            continue
        try:
            old_lines, new_lines = old.decode().splitlines(), new.decode().splitlines()
        except UnicodeDecodeError:
            where = next(i for i, (a, b) in enumerate(zip(old + b"\0", new + b"\1")) if a != b)
            return (f"    part {index}: binary, {len(old)} vs {len(new)} bytes, "
                    f"first differing byte at offset {where}")
        diff = list(difflib.unified_diff(old_lines, new_lines, "cached", "fresh", lineterm="", n=context))
        return "\n".join(f"    {line}" for line in diff[:2 + 4 * context])
    if len(cached_parts) != len(fresh_parts):
        return f"    {len(cached_parts)} parts cached, {len(fresh_parts)} fresh"
    return f"    metadata: cached {cached_meta} != fresh {fresh_meta}"


class Auditor:
    """Picks a cache's hits to audit (by its `AuditPolicy`) and audits them, in
    a low-priority background thread once the cache is idle, or at once."""

    IDLE_SECONDS = 0.2  # how long no compile may run before a background audit starts

    def __init__(self, policy: AuditPolicy, background: bool, seed: Optional[int] = None):
        self.policy = policy
        self.background = background
        self._random = random.Random(seed)
        self._queue: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._first_seen: set = set()  # kernels whose first persistent hit was picked
        self._busy = 0  # compiles running now
        self._last_busy = 0.0
        self._held = False  # a cell is running (the magic's session holds audits back meanwhile)
        _auditors.add(self)

    @property
    def fraction(self) -> float:
        return self.policy.fraction

    def wants(self, forced: bool = False, kernel: Optional[str] = None, persisted: bool = False) -> bool:
        """Whether to audit this hit: always when `forced`; the first hit of
        `kernel` served by a persistent tier; else a sample of `fraction`."""
        if forced:
            return True
        with self._lock:
            if self.policy.first_persisted and persisted and kernel not in self._first_seen:
                self._first_seen.add(kernel)
                return True
            return self.policy.fraction > 0 and self._random.random() < self.policy.fraction

    def busy(self, entering: bool) -> None:
        """A compile starts (`entering`) or ends: background audits wait for quiet."""
        with self._lock:
            self._busy += 1 if entering else -1
            self._last_busy = time.monotonic()

    def hold(self, held: bool) -> None:
        """Hold background audits back (a cell runs), or let them go."""
        with self._lock:
            self._held = held
            self._last_busy = time.monotonic()

    def _wait_for_quiet(self) -> None:
        while True:
            with self._lock:
                wait = 0.05 if self._busy or self._held else \
                    self.IDLE_SECONDS - (time.monotonic() - self._last_busy)
            if wait <= 0:
                return
            time.sleep(wait)

    def submit(self, job: Callable[[], None], background: Optional[bool] = None) -> None:
        if not (self.background if background is None else background):
            job()
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="gpucache-audit", daemon=True)
                self._thread.start()
        self._queue.put(job)

    def _work(self):
        _lower_priority()
        while True:
            job = self._queue.get()
            try:
                self._wait_for_quiet()
                job()
            except Exception as exc:  # an audit must never take the process down
                warnings.warn(f"gpucache_ext audit failed: {type(exc).__name__}: {exc}",
                              AuditWarning, stacklevel=1)
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        """Block until every submitted audit is done."""
        self._queue.join()


_auditors: "weakref.WeakSet[Auditor]" = memos.state("audit._auditors", weakref.WeakSet(), "the live auditors")


class CacheAudits:
    """A cache's audits of its own hits: when one is wanted (`Auditor`), the
    audit itself (a fresh compile of the snapshot the hit hashed, compared
    like with like), and what they found.  `compile_fresh(pyfunc, argtypes,
    config, link, identity)` compiles in a new cache without audits;
    `replace(result, fresh)` evicts the chain a mismatched hit came from and
    files the fresh artifacts; `audited(stage, mismatch)` counts one
    comparison.  `lock` is the cache's."""

    def __init__(self, auditor: Auditor, lock, compile_fresh, replace, audited):
        self.auditor = auditor
        self._lock = lock
        self._compile_fresh = compile_fresh
        self._replace = replace
        self._audited = audited
        self._mismatches: "deque[Mismatch]" = deque(maxlen=256)
        self.mismatch_count = 0
        self._not_audited: "deque[NotAudited]" = deque(maxlen=256)  # stages of hits it could not compare, and why
        self.not_audited_count = 0

    def consider(self, result, pyfunc, argtypes, config, link, identity, *, forced: bool, asked,
                 kernel: str) -> None:
        """Audit `result` (a compile whose stages hit) where the policy or
        `asked` (the compile's ``audit=``) wants it: before returning when
        asked, else as the auditor runs its jobs."""
        hits = [done for done in result.stages.values() if done.hit]
        persisted = any(done.tier not in (None, "memory") for done in hits)
        if not forced and asked is not False and hits \
                and self.auditor.wants(forced=bool(asked), kernel=kernel, persisted=persisted):
            result.audit = AuditOutcome(stages=audited_stages(result))
            self.auditor.submit(lambda: self.audit(pyfunc, argtypes, config, result, link, identity),
                                background=False if asked else None)

    def mismatches(self, since: int = 0) -> List[Mismatch]:
        with self._lock:
            return _latest(self._mismatches, self.mismatch_count, since)

    def not_possible(self, since: int = 0) -> List[NotAudited]:
        with self._lock:
            return _latest(self._not_audited, self.not_audited_count, since)

    def audit(self, pyfunc, argtypes, config, result: CompileResult, link=(), identity=None) -> None:
        """Compile `result`'s inputs again from nothing (from the snapshot
        `identity` its compile hashed, so later edits are no mismatch) and
        compare every artifact that the fresh compile built from the inputs
        the hit hashed (like with like: see `gpucache_ext.pipeline.audit`)."""
        from ..toolchain import linking

        outcome = result.audit

        def libraries_changed() -> bool:  # (then nothing compiles what the hit hashed: not audited)
            gone = library_changes(identity) if identity is not None else []
            if gone:
                self.not_audited(result, dict.fromkeys(audited_stages(result), "; ".join(gone)))
            return bool(gone)

        if libraries_changed():
            return
        try:
            fresh = self._compile_fresh(pyfunc, argtypes, config, tuple(link), identity)
        except linking.LinkedSourceChanged as exc:  # what NVRTC would read now is not what the hit hashed
            self.not_audited(result, dict.fromkeys(
                audited_stages(result), f"{exc.name}, or a header it includes, changed since the hit"))
            return
        except SnapshotChanged as exc:  # an array it read changed since: nothing left to compare with
            outcome.state, outcome.error = "skipped", str(exc)
            outcome.done.set()
            return
        except Exception as exc:
            outcome.state, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
            outcome.done.set()
            warnings.warn(f"gpucache_ext audit of {result.kernel}: the fresh compile failed "
                          f"({outcome.error}) although the cache served it", AuditWarning, stacklevel=2)
            return
        if libraries_changed():  # (reloaded meanwhile)
            return
        changed = input_changes(result, fresh, outcome.since)
        cached, fresh_artifacts = result.artifacts(), fresh.artifacts()
        skipped: Dict[str, str] = {}
        previous = None
        for stage in audited_stages(result):
            reasons = changed.get(stage, [])
            if not reasons and previous in skipped and \
                    first_difference(previous, cached[previous], fresh_artifacts[previous]) is not None:
                reasons = [f"built from {previous}, which could not be audited"]  # (other input bytes)
            previous = stage
            if reasons:
                skipped[stage] = "; ".join(reasons)
                continue
            difference = first_difference(stage, cached[stage], fresh_artifacts[stage])
            if difference is None and result.stages[stage].token != fresh.stages[stage].token:
                # the same bytes, reached through another chain of digests: a stored digest is wrong
                difference = (f"    filed under {short_token(result.stages[stage].token)}; a fresh compile "
                              f"files it under {short_token(fresh.stages[stage].token)} (the digests its "
                              "token is made of differ)")
            self._audited(stage, difference is not None)
            if difference is not None:
                done = result.stages[stage]
                outcome.mismatches.append(Mismatch(
                    result.kernel, stage, done.token,
                    tuple(sorted((name, part.shown) for name, part in done.components.items())),
                    difference))
        if len(skipped) == len(audited_stages(result)):
            self.not_audited(result, skipped)
            return
        if skipped:
            self.not_audited(result, skipped, done=False)
        if outcome.mismatches:
            self._replace(result, fresh)
            result.replace_artifacts(fresh)  # (under the result's lock: a kernel may be reading them)
            with self._lock:
                self._mismatches.extend(outcome.mismatches)
                self.mismatch_count += len(outcome.mismatches)
            for mismatch in outcome.mismatches:
                warnings.warn(mismatch.message(), AuditWarning, stacklevel=2)
        outcome.state = "mismatch" if outcome.mismatches else "passed"
        outcome.done.set()

    def not_audited(self, result: CompileResult, reasons: Dict[str, str], done: bool = True) -> None:
        """Record the stages of `result` an audit could not compare like with
        like, and why (quietly: no warning, the entries stay); with `done`,
        none could be: the audit ends "not audited"."""
        outcome = result.audit
        outcome.not_audited.update(reasons)
        with self._lock:
            self._not_audited.extend(NotAudited(result.kernel, stage, result.stages[stage].token, why)
                                          for stage, why in reasons.items())
            self.not_audited_count += len(reasons)
        log.info("gpucache_ext audit of %s: %s", result.kernel,
                 "; ".join(f"{stage} not audited: {why}" for stage, why in reasons.items()))
        if done:
            outcome.state = "not audited"
            outcome.done.set()



def _latest(records, count: int, since: int) -> list:
    """Of a bounded record (a deque of the latest, `count` ever added), those
    added after an earlier count `since` (all that are kept for 0)."""
    found = list(records)
    return found[len(found) - min(len(found), count - since):] if since else found


def wait_for_all() -> None:
    """Block until every cache's submitted audits are done (tests: none runs
    on into the next one, where numba's process-wide warning capture in the
    audit's thread could swallow that test's warnings)."""
    for auditor in list(_auditors):
        auditor.wait()


def _lower_priority() -> None:
    """Give this thread the lowest scheduling priority (Linux, where a thread
    has its own): the compilers it runs release the GIL, and then yield the
    cores to the user's work."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: the default priority
        log.debug("audit thread keeps its priority", exc_info=True)


DEBUG_SOURCES = "debug source files"  # (the cubin's component: see `source_files_component`)


def source_files_component(paths) -> dict:
    """The cubin's extra input where debug info names source files (see
    `debuginfo.debug_source_files`): their sizes and modification times, which
    ptxas writes into the cubin ({DEBUG_SOURCES: component}, {} for none)."""
    if not paths:
        return {}
    from ..keys.tokens import component

    stats = source_file_stats(paths)
    shown = ", ".join(f"{os.path.basename(path)} {'absent' if rest == ['absent'] else f'{rest[0]} B'}"
                      for path, *rest in stats)
    return {DEBUG_SOURCES: component(stats, shown)}


# ---------------------------------------------------------------------------
# Like with like: what a fresh compile reads that the hit's snapshot does not hold


def library_changes(identity) -> List[str]:
    """Why a fresh compile from `identity` (a `sources.SourceIdentity`, the
    snapshot a hit hashed) would not compile what the hit did, from the
    libraries it reads: the snapshot binds a library module itself (numba
    knows its functions by the module object), keyed by its version; a
    library reinstalled (and reloaded) since has another version now.
    Empty when every library module it binds has the version it hashed."""
    from ..sources.libraries import library_version
    from ..sources.library import library_module_component

    found: List[str] = []
    seen = set()

    def visit(ident, label, plan):
        attrs = getattr(plan, "attrs", None)  # a user module's clone: what was read through it
        if isinstance(attrs, dict):
            for attr, inner in attrs.items():
                visit(ident, f"{label}.{attr}", inner)
            return
        module = getattr(plan, "value", None)  # a value bound as it was read
        recorded = ident.components.get(label)
        if not isinstance(module, types.ModuleType) or recorded is None:
            return
        version = library_version(module)
        if version is None or library_module_component(module.__name__, version).digest != recorded.digest:
            found.append(f"library {module.__name__} changed since the hit "
                         f"(now {version or 'not a library'})")

    def walk(ident):
        if id(ident) in seen:
            return
        seen.add(id(ident))
        for (kind, name), plan in ident.bindings.items():
            visit(ident, f"{kind} {name}", plan)
        for _, device in ident.devices:
            walk(device)

    walk(identity)
    return list(dict.fromkeys(found))


def input_changes(cached, fresh, since: float) -> Dict[str, List[str]]:
    """Per audited stage, the inputs a fresh compile (`fresh`, a CompileResult)
    read otherwise than the hit (`cached`) had hashed: the components of the
    stage's token (typing's count for llvm) that differ, apart from the
    upstream artifact's digest (the bytes, compared by the audit itself).
    A source file debug info names is named ("helpers.py changed since the
    hit"); `since` (when the hit was served) tells the files saved after it."""
    changes: Dict[str, List[str]] = {}
    chain = _chain(cached.config)
    for stage in audited_stages(cached):
        pairs = [(name, cached.stages[stage].components.get(name), fresh.stages[stage].components.get(name))
                 for name in sorted(set(cached.stages[stage].components) | set(fresh.stages[stage].components))
                 if name != chain.upstream(stage)]
        if stage == chain.entry and "typing" in cached.stages and "typing" in fresh.stages:
            old, new = cached.stages["typing"].components, fresh.stages["typing"].components
            pairs = [(name, old.get(name), new.get(name)) for name in sorted(set(old) | set(new))] + pairs
        reasons = []
        for name, old, new in pairs:
            if (old and old.digest) == (new and new.digest):
                continue
            if name == DEBUG_SOURCES:
                reasons.append(f"{_changed_files(fresh, since)} changed since the hit")
            else:
                reasons.append(f"{name} changed since the hit ({old.shown if old else 'none'} -> "
                               f"{new.shown if new else 'none'})")
        if reasons:
            changes[stage] = reasons
    return changes



def _changed_files(fresh, since: float) -> str:
    """The source files debug info names that were saved after `since` (all
    of them where none was: one deleted, or a time set back)."""
    paths = debug_source_files(fresh.artifacts()["llvm"])
    stats = source_file_stats(paths)
    present = [(path, rest[1]) for path, *rest in stats if rest != ["absent"]]
    # (a file's time comes from a coarser clock than `since`: a little slack)
    later = [path for path, mtime in present if mtime >= int((since - 2.0) * 1e9)]
    names = [os.path.basename(path) for path in (later or [path for path, _ in present] or paths)]
    return ", ".join(names) if names else "a source file debug info names"


def _reassemble(entry, find_upstream, tainted) -> Tuple[str, Optional[str]]:
    """A fatbin entry assembled again from its members' entries (each the
    bytes the fatbin's token names), compared byte for byte."""
    from ..toolchain import fatbin

    cubins, ptx = [], None
    for member in entry.artifact.members:
        if member.token in tainted:
            return "tainted", f"    built from {member.kind} entry {short_token(member.token)}, which was wrong"
        found = find_upstream(member.kind, member.token, divmod(member.arch, 10))
        image = None if found is None else fatbin.image(member.kind, found.artifact)
        if image is None or fatbin.member(member.kind, member.arch, member.token, image) != member:
            return "skipped", None  # gone, or holds other bytes now
        if member.kind == "cubin":
            cubins.append((member, image))
        else:
            ptx = (member, image.decode())
    try:
        fresh = fatbin.assemble(cubins, ptx, entry.artifact.entry_name, entry.kernel)
    except Exception as exc:
        return "failed", f"    {type(exc).__name__}: {exc}"
    return ("match", None) if fresh.fatbin == entry.artifact.fatbin else \
        ("mismatch", first_difference("fatbin", entry.artifact, fresh))


def _sources_since(entry, ptx, config, find_upstream) -> Optional[str]:
    """Why a cubin entry whose debug info names source files cannot be linked
    again like with like (None when it can): ptxas reads each file's size and
    time as it links, and they are not those the entry's token hashed (or the
    llvm entry naming the files is gone)."""
    llvm = find_upstream("llvm", ptx.upstream, config.cc) if ptx.upstream else None
    if llvm is None:
        return "    not audited: the llvm entry naming its source files is gone"
    paths = debug_source_files(llvm.artifact)
    now = source_files_component(paths).get(DEBUG_SOURCES)
    if now is not None and now.digest == entry.components[DEBUG_SOURCES].digest:
        return None
    names = ", ".join(os.path.basename(path) for path in paths)
    return f"    not audited: {names or 'a source file'} changed since the entry was built"


def recompile_entry(stage: str, entry, find_upstream, tainted=frozenset()) -> Tuple[str, Optional[str]]:
    """Compile a stored ptx or cubin entry again from its upstream entry.

    `find_upstream(stage, token_hex, cc)` returns the upstream stage's entry
    (resolving per-target variants) or None; the entry names the token of the
    one it was built from (``entry.upstream``), whose digest must be the one
    its own token hashes.  Returns (status, difference): status "match",
    "mismatch", "tainted" (its upstream token is in `tainted`: it was built
    from an entry found wrong), "skipped" (no upstream entry, one that holds
    other bytes now, an llvm entry, which needs the kernel's Python source,
    or a cubin whose debug info names source files changed since it was
    built: then with why) or "failed".
    """
    from .. import backends
    from ..keys.config import CompileConfig

    if stage == "fatbin" and not entry.is_marker:
        return _reassemble(entry, find_upstream, tainted)
    if entry.is_marker or not entry.config_fields:
        return "skipped", None
    config = CompileConfig(**entry.config_fields)
    chain = _chain(config)  # (the backend its config names: numba-cuda's where none)
    upstream_stage = chain.upstream(stage) if stage in chain.back else None
    if upstream_stage is None:
        return "skipped", None
    keyed_on = entry.components.get(upstream_stage)  # the digest of the bytes it was built from
    if keyed_on is None or not entry.upstream:
        return "skipped", None
    if entry.upstream in tainted:
        return "tainted", f"    built from {upstream_stage} entry {short_token(entry.upstream)}, which was wrong"
    upstream = find_upstream(upstream_stage, entry.upstream, config.cc)
    if upstream is None or upstream.digest != keyed_on.digest:  # gone, or holds other bytes now
        return "skipped", None
    if stage == "cubin" and DEBUG_SOURCES in entry.components:
        unlike = _sources_since(entry, upstream, config, find_upstream)
        if unlike is not None:  # ptxas would write other file sizes and times: not like with like
            return "skipped", unlike
    try:
        fresh = backends.backend_for(config.backend).rebuild(stage, upstream.artifact, config, entry.kernel,
                                           entry.artifact.links if stage == "cubin" else ())
    except Exception as exc:
        return "failed", f"    {type(exc).__name__}: {exc}"
    difference = first_difference(stage, entry.artifact, fresh)
    return ("match", None) if difference is None else ("mismatch", difference)
