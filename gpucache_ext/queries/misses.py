"""Why an entry missed, and what it was built from.

- `differing` / `miss_reasons`: which token components two entries differ in,
  and how a miss says so;
- `nearest`: the entry of the same kernel and stage whose inputs differ least
  from some wanted inputs: what a miss is explained against, in this
  process's history and in the persistent tiers (so that a miss after a
  restart is explained against the entries on disk);
- `nearest_entry`: the same, for an entry already cached (the inspector);
- `built_from`: the cubins built from an entry, with their resources;
- `Sources`: the other way, what source (code, globals, toolchain) each entry
  was built from, which tells apart two kernels of one qualified name;
- `predict`: what compiling would do now, stage by stage (`KernelCache.explain`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..keys.config import CompileConfig
from ..backends import chain_of
from ..keys.stagespec import KEYED_ON_BYTES, TARGET_STAGES
from ..pipeline.results import EntryInfo, Outcome, parse_resources
from ..keys.reasons import ADDED, CHANGED, REMOVED, Reason
from ..keys.tokens import Component, explain_difference, make_token, short_name
from ..store.tiers import DROPPED
from ..units import format_age
from .reading import CacheReader

if TYPE_CHECKING:  # pragma: no cover
    from ..store.index import CacheIndex
    from ..store.tiers import Entry


def differing(mine: Mapping[str, Component], theirs: Mapping[str, Component]) -> List[str]:
    """The names of the components whose digests differ (or that one side lacks)."""
    names = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a is None or b is None or a.digest != b.digest:
            names.append(name)
    return names


def miss_reasons(stage: str, wanted: Mapping[str, Component],
                 old: Mapping[str, Component], members: Optional[Mapping[str, Optional[str]]] = None
                 ) -> Tuple[Reason, ...]:
    """Why `wanted` missed where `old` was cached: one reason per differing
    component; a changed upstream token reads "typing input changed".
    `members` (a fatbin's): member ("cubin sm_86", "PTX compute_80") -> why
    this compile rebuilt it, None where it reused an entry."""
    if stage == "fatbin":
        return _fatbin_reasons(wanted, old, members or {})
    reasons = []
    for reason in explain_difference(wanted, old):
        if reason.component in TARGET_STAGES and reason.component != stage:
            reasons.append(Reason.upstream(reason.component))
        else:
            reasons.append(reason)
    return tuple(reasons)


def _fatbin_reasons(wanted: Mapping[str, Component], old: Mapping[str, Component],
                    whys: Mapping[str, Optional[str]]) -> Tuple[Reason, ...]:
    """Why a fatbin missed, by member, naming only the members that changed:
    "sm_75 added", "PTX compute_80 -> compute_75", "cubin sm_86 rebuilt:
    global ALPHA 1.5 -> 3.0 (read by activate)" (`whys`: why each member was
    rebuilt, None where it was an entry built before); then its other inputs."""
    def changed(member):
        why = whys.get(member, "")
        if why is None:
            return Reason(f"{member} changed (an entry built earlier, reused)", CHANGED, member)
        return Reason(f"{member} rebuilt: {why}" if why else f"{member} rebuilt to other bytes", CHANGED, member)

    def members(parts, kind):
        return {name.split(" ", 1)[1]: part for name, part in parts.items() if name.startswith(kind + " ")}

    reasons = []
    new, before = members(wanted, "cubin"), members(old, "cubin")
    added, removed = [a for a in new if a not in before], [a for a in before if a not in new]
    if added:
        reasons.append(Reason(f"{', '.join(added)} added", ADDED, "cubin"))
    if removed:
        reasons.append(Reason(f"{', '.join(removed)} removed", REMOVED, "cubin"))
    reasons += [changed(f"cubin {arch}") for arch in new
                if arch in before and new[arch].digest != before[arch].digest]
    new_ptx, old_ptx = members(wanted, "ptx"), members(old, "ptx")
    if set(new_ptx) != set(old_ptx):
        reasons.append(Reason.changed("PTX", ", ".join(old_ptx) or "none", ", ".join(new_ptx) or "none"))
    else:
        reasons += [changed(f"PTX {arch}") for arch in new_ptx
                    if new_ptx[arch].digest != old_ptx[arch].digest]
    rest = {name: part for name, part in wanted.items() if not name.startswith(("cubin ", "ptx "))}
    rest_old = {name: part for name, part in old.items() if not name.startswith(("cubin ", "ptx "))}
    return tuple(reasons) + explain_difference(rest, rest_old)


def _candidates(index: "CacheIndex", stage: str, kernel: str,
                packages: Sequence[str] = ()) -> Iterator[Tuple[str, Mapping[str, Component]]]:
    """(token, components) of the kernel's entries at `stage`: this process's
    history and memory first, then, only where those know none, every
    persistent tier's; of those, the ones the compiler of `packages` built
    (`same_compiler`)."""
    history = [c for c in index.history(stage, kernel) if same_compiler(c[1], packages)]
    memory = [c for c in index.in_memory(stage, kernel) if same_compiler(c[1], packages)]
    yield from history
    yield from memory
    if history or memory:
        return
    yield from (c for c in index.persisted(stage, kernel) if same_compiler(c[1], packages))


# The stages built from typing (each chain's entry stage: llvm, mlir), whose entries carry typing's components
_BUILT_FROM_TYPING = tuple(stage for stage in TARGET_STAGES if stage != "typing" and stage not in KEYED_ON_BYTES)


def same_compiler(components: Mapping[str, Component], packages: Sequence[str]) -> bool:
    """Whether the entry of these token components was built by the
    compiler whose own packages (its chain's tools beyond the stage's:
    "numba-cuda", "numba-cuda-mlir") are `packages` (): any): its
    toolchain names each.  A kernel compiled by both (a sweep --backend
    numba-cuda,mlir) is explained against its own compiler's entries alone."""
    if not packages:
        return True
    toolchain = components.get("toolchain")
    words = set(toolchain.shown.split()) if toolchain is not None else set()
    return all(package in words for package in packages)


def nearest(candidates: Iterable[Tuple[str, Mapping[str, Component]]], components: Mapping[str, Component],
            exclude: Optional[str] = None):
    """Of `candidates` ((token, components) pairs, oldest first), the one
    whose components differ least from `components`, counting the changes
    inside a device function one by one (ties: the latest): (token, its
    components, the names that differ), or None where there is none."""
    best, least = None, None
    for token, theirs in candidates:
        if token == exclude:
            continue
        names = differing(components, theirs)
        distance = _distance(components, theirs, names)
        if best is None or distance <= least:
            best, least = (token, theirs, names), distance
            if not names:
                break
    return best


def _distance(mine: Mapping[str, Component], theirs: Mapping[str, Component], names: List[str]) -> int:
    """How many inputs differ, a device function's own inputs counted one by one."""
    total = 0
    for name in names:
        a, b = mine.get(name), theirs.get(name)
        if a is not None and b is not None and a.parts and b.parts:
            inner = dict(a.parts), dict(b.parts)
            total += max(1, _distance(*inner, differing(*inner)))
        else:
            total += 1
    return total


def explain_miss(index: "CacheIndex", stage: str, kernel: str, components: Mapping[str, Component],
                 members: Optional[Mapping[str, Optional[str]]] = None,
                 packages: Sequence[str] = ()) -> Tuple[Reason, ...]:
    """Why `stage` of `kernel` misses with these token components: how they
    differ from the nearest entry's (see `nearest`) in `index` (a cache's
    `KernelCache.index`) of those its compiler built (`packages`: its own
    packages, `same_compiler`); `members` as `miss_reasons`."""
    short = short_name(kernel)
    dropped = index.dropped(stage, make_token(stage, {k: v for k, v in components.items() if k != "stage"}).hex)
    if dropped is not None:  # this very entry was dropped: that is why (also after a restart)
        tier, why, when = dropped
        ago = format_age(max(0.0, time.time() - when))
        return (Reason(f"entry was {DROPPED[why]} from the {tier} tier {ago} ago"),)
    found = nearest(_candidates(index, stage, kernel, packages), components)
    if found is None:
        # typed IR is kept in memory only; the persistent entries built from it (llvm, mlir)
        # know the kernel, and what their typing was made of (its toolchain names its compiler)
        typed = [(token, dict(parts["typing"].parts)) for built_from_typing in _BUILT_FROM_TYPING
                 for token, parts in _candidates(index, built_from_typing, kernel)
                 if "typing" in parts and parts["typing"].parts] if stage == "typing" else []
        typed = [(token, parts) for token, parts in typed if same_compiler(parts, packages)]
        if typed:
            found = nearest(typed, components)
            reasons = miss_reasons(stage, components, found[1]) if found is not None else ()
            return reasons or (Reason(f"first typing of {short} in this process (typed IR is not kept on disk)"),)
        if packages and any(True for _ in _candidates(index, stage, kernel)):  # (another compiler's entries)
            return (Reason(f"first compile of {short} with {packages[-1]}"),)
        return (Reason(f"first compile of {short}"),)
    reasons = miss_reasons(stage, components, found[1], members)
    return reasons or (Reason("entry was evicted or cleared"),)


def nearest_entry(cache: CacheReader, stage: str, token: str) -> Tuple[Optional["Entry"], List[str]]:
    """The other cached entry of the same kernel and stage whose token
    components differ least from this one's, in any tier: (entry, the names
    that differ), or (None, [])."""
    entry = cache.entry(stage, token)
    if entry is None:
        return None, []
    others = {}
    for row in cache.entries(stage=stage):
        if row.kernel == entry.kernel and row.token != token:
            other = cache.entry(stage, row.token)
            if other is not None:
                others[row.token] = other
    found = nearest(((t, other.components) for t, other in others.items()), entry.components)
    return (others[found[0]], found[2]) if found else (None, [])


def built_from(cache: CacheReader, stage: str, token: str,
               kernel: str) -> List[Tuple[EntryInfo, Dict[str, int]]]:
    """The cubin entries downstream of one entry (same kernel), with the
    resources their link logs report.  A ptx or cubin entry names the bytes it
    was built from by their digest, so this follows digests: an entry rebuilt
    to the same bytes as another leads to the same downstream entries.  A
    typing entry leads to the entries of the stage after it that name its token."""
    entry = cache.entry(stage, token)
    if entry is None:
        return []
    keys = {token} if stage == "typing" else {entry.digest}
    tokens = {token}
    chain = chain_of(entry.config_fields)  # (its backend's: typing, then llvm or mlir, ptx, cubin)
    stages = chain.stages
    for downstream in stages[stages.index(stage) + 1:]:
        upstream = chain.upstream(downstream)
        found, digests = set(), set()
        for row in cache.entries(stage=downstream, kernel=kernel):
            entry = cache.entry(downstream, row.token)
            part = entry.components.get(upstream) if entry is not None else None
            if part is not None and part.digest in keys:
                found.add(row.token)
                digests.add(entry.digest)
        tokens, keys = found, digests
        if not tokens:
            return []
    out = []
    for row in cache.entries(stage="cubin", kernel=kernel):
        if row.token in tokens:
            entry = cache.entry("cubin", row.token)
            if entry is not None and entry.artifact is not None:
                out.append((row, parse_resources(entry.artifact.info_log or "")))
    return out


@dataclass(frozen=True, eq=False)
class Explanation(Mapping):
    """What compiling would do now: per stage the reasons it would compile
    (``explanation["ptx"]``; empty where it would not) and its outcome
    (``explanation.outcomes["typing"]``: hit, miss or not needed).

    ``reused_if``: the stages that miss only because the stage before them
    would be rebuilt, and would be found after all if that rebuild gives the
    same bytes as before (early cutoff, which only the rebuild can tell):
    stage -> that stage before it (``{"ptx": "llvm", "cubin": "ptx"}``).
    Their reasons end with the same note in words."""

    reasons: Mapping[str, Tuple[str, ...]]
    outcomes: Mapping[str, Outcome]
    reused_if: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __getitem__(self, stage):
        return self.reasons[stage]

    def __iter__(self):
        return iter(self.reasons)

    def __len__(self) -> int:
        return len(self.reasons)

    @property
    def misses(self) -> Dict[str, Tuple[str, ...]]:
        """The stages that would compile, with why."""
        return {stage: why for stage, why in self.reasons.items() if self.outcomes[stage] is Outcome.MISS}


def predict(index: "CacheIndex", plan, kernel: str) -> Explanation:
    """What compiling `plan` (a `pipeline.CompilePlan`) would do, read from
    `index` without changing the cache: the driver's walk of the plan's
    chain, dry (`CompilePlan.front` and `back`).  The chain's entry stage
    (llvm) is looked up by its token, and the stages before it (typing) are
    needed only where it is missing; the stages after it (ptx, cubin) are
    looked up by the digest of the artifact before them.  Where that artifact
    would be rebuilt, the stage after it is a miss unless the rebuild gives
    the same bytes as before (early cutoff), which only the rebuild can tell."""
    outcomes: Dict[str, Outcome] = {}
    reasons: Dict[str, Tuple[str, ...]] = {}
    reused_if: Dict[str, str] = {}
    config, chain = plan.config, plan.chain

    def why(stage, components):  # (against its own compiler's entries)
        return explain_miss(index, stage, kernel, components, packages=dict(chain.tools).get(stage, ()))

    entry, token = index.peek(chain.entry, plan.tokens[chain.entry], config.cc)
    digest = entry.digest if entry is not None else None
    outcomes[chain.entry] = Outcome.HIT if entry is not None else Outcome.MISS
    reasons[chain.entry] = () if entry is not None else why(chain.entry, token.components)
    for stage in chain.front[:-1]:
        found, token = index.peek(stage, plan.tokens[stage], config.cc)
        if found is not None:
            outcomes[stage], reasons[stage] = Outcome.HIT, ()
        elif entry is not None:
            outcomes[stage], reasons[stage] = Outcome.NOT_NEEDED, ()
        else:
            outcomes[stage] = Outcome.MISS
            reasons[stage] = why(stage, token.components)
    for stage in chain.back:  # (the stages looked up by the bytes before them, in order)
        upstream = chain.upstream(stage)
        if digest is None:  # its own inputs, against the nearest entry's; the upstream bytes are unknown
            outcomes[stage] = Outcome.MISS
            parts = {name: part for name, part in plan.parts[stage].items() if name != upstream}
            found = why(stage, make_token(stage, parts).components)
            if len(found) == 1 and found[0].is_upstream and found[0].component == upstream:
                reused_if[stage] = upstream
                found += (reused_note(upstream),)
            reasons[stage] = found
            continue
        entry, token = index.peek(stage, plan.content_token(stage, digest), config.cc)
        digest = entry.digest if entry is not None else None
        outcomes[stage] = Outcome.HIT if entry is not None else Outcome.MISS
        reasons[stage] = () if entry is not None else why(stage, token.components)
    return Explanation({s: reasons[s] for s in chain.stages}, {s: outcomes[s] for s in chain.stages}, reused_if)


def reused_note(upstream: str) -> Reason:
    """How a stage found again if `upstream` rebuilds to the same bytes says so."""
    return Reason(f"reused if {upstream} rebuilds to the same bytes")


# What source each entry was built from (telling apart kernels of one name)

_NOT_SOURCE = frozenset({"signature"} | {f.name for f in dataclasses.fields(CompileConfig)})
_MAX_SOURCES = 8192


class Sources:
    """Which source each entry was built from, read from the cache.

    Every entry names its upstream entry's token (cubin -> ptx -> llvm ->
    typing: llvm among its components, ptx and cubin as ``upstream``); the
    typing entry's components are the kernel's inputs.  The digest of those, signature and config aside (the
    code, the globals it reads, the toolchain), tells apart two kernels of one
    qualified name: ``axpy`` defined in two cells is ``__main__.axpy`` both
    times.  Where an upstream entry is gone (typed IR is kept in memory only),
    the missing entry's token stands in for it.  Tokens name their inputs, so
    what was found is remembered; what stood in is read again once new typing
    entries appear.
    """

    def __init__(self):
        self.found: Dict[Tuple[str, str], str] = {}
        self.guessed: Dict[Tuple[str, str], str] = {}
        self._typing = frozenset()

    def of(self, cache, rows) -> Dict[Tuple[str, str], Optional[str]]:
        typing = frozenset(r["token"] for r in rows if r["stage"] == "typing")
        if typing - self._typing:
            self.guessed.clear()
        self._typing = typing
        if len(self.found) > _MAX_SOURCES:
            self.found.clear()
        return {(r["stage"], r["token"]): self._source(cache, r["stage"], r["token"]) for r in rows}

    def _source(self, cache, stage: str, token: str) -> Optional[str]:
        path: List[Tuple[str, str]] = []
        while True:
            key = (stage, token)
            for memo in (self.found, self.guessed):
                if key in memo:
                    return self._remember(path, memo[key], memo)
            entry = cache.entry(stage, token)
            if entry is None:  # gone: the row itself (unknown), else its upstream (its token stands in)
                return self._remember(path, token, self.guessed) if path else None
            path.append(key)
            if stage == "typing":
                return self._remember(path, source_digest(entry.components), self.found)
            # (a fatbin names its first cubin: they all come from the same code)
            chain = chain_of(entry.config_fields)
            upstream = chain.upstream(stage)
            if stage == chain.entry:  # (llvm, mlir) names typing's token; ptx and cubin the entry they came from
                part = entry.components.get(upstream)
                if part is not None and part.parts:  # (and carry its components: typed IR is not stored)
                    return self._remember(path, source_digest(dict(part.parts)), self.found)
                before = part.digest if part is not None else ""
            else:
                before = entry.upstream
            if not before:
                return self._remember(path, token, self.guessed)
            stage, token = upstream, before

    @staticmethod
    def _remember(path, value: str, memo) -> str:
        for key in path:
            memo[key] = value
        return value


def source_digest(components) -> str:
    """The version of a definition's source that typing components give (its
    code and what it reads, the config left out): what `Sources` tells
    entries apart by."""
    digest = hashlib.sha256()
    for name in sorted(components):
        if name not in _NOT_SOURCE:
            digest.update(f"{name}\0{components[name].digest}\0".encode())
    return digest.hexdigest()
