"""Questions about what a `KernelCache` holds, one algorithm each.

Every query here only reads: it counts no lookup, fills no tier and records
no miss.  The cache itself, the inspector and the ``gpucache`` command ask
them; none of them keeps a second copy.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from .config import STAGES, CompileConfig
from .results import EntryInfo, Outcome, parse_resources
from .tokens import Component, explain_difference

if TYPE_CHECKING:  # pragma: no cover
    from .cache import KernelCache
    from .tiers import Entry


def differing(mine: Mapping[str, Component], theirs: Mapping[str, Component]) -> List[str]:
    """The names of the components whose digests differ (or that one side lacks)."""
    names = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a is None or b is None or a.digest != b.digest:
            names.append(name)
    return names


def miss_reasons(stage: str, wanted: Mapping[str, Component],
                 old: Mapping[str, Component]) -> Tuple[str, ...]:
    """Why `wanted` missed where `old` was cached: one reason per differing
    component; a changed upstream token reads "typing input changed"."""
    reasons = []
    for reason in explain_difference(wanted, old):
        name = reason.split(" ", 1)[0]
        if name in STAGES and name != stage:
            reasons.append(f"{name} input changed")
        else:
            reasons.append(reason)
    return tuple(reasons)


def _candidates(cache: "KernelCache", stage: str, kernel: str) -> Iterator[Tuple[str, Mapping[str, Component]]]:
    """(token, components) of the kernel's entries at `stage`: this process's
    history and memory first, then, only where those know none, every
    persistent tier's."""
    with cache._lock:
        history = [(token, components) for token, (name, components) in cache._history[stage].items()
                   if name == kernel]
        memory = [(entry.token, entry.components) for entry in cache._memory[stage].entries.values()
                  if entry.kernel == kernel and not entry.is_marker]
    yield from history
    yield from memory
    if history or memory:
        return
    yield from cache._persisted(stage).get(kernel, ())


def nearest(candidates: Iterable[Tuple[str, Mapping[str, Component]]], components: Mapping[str, Component],
            exclude: Optional[str] = None):
    """Of `candidates` ((token, components) pairs), the one whose components
    differ least from `components` (ties: the first): (token, its components,
    the names that differ), or None where there is none."""
    best = None
    for token, theirs in candidates:
        if token == exclude:
            continue
        names = differing(components, theirs)
        if best is None or len(names) < len(best[2]):
            best = (token, theirs, names)
            if not names:
                break
    return best


def explain_miss(cache: "KernelCache", stage: str, kernel: str,
                 components: Mapping[str, Component]) -> Tuple[str, ...]:
    """Why `stage` of `kernel` misses with these token components: how they
    differ from the nearest entry's (see `nearest`)."""
    short = kernel.rsplit(".", 1)[-1]
    found = nearest(_candidates(cache, stage, kernel), components)
    if found is None:
        if stage == "typing" and any(True for _ in _candidates(cache, "llvm", kernel)):
            # typed IR is kept in memory only; the persistent llvm entries know the kernel
            return (f"first typing of {short} in this process (typed IR is not kept on disk)",)
        return (f"first compile of {short}",)
    reasons = miss_reasons(stage, components, found[1])
    return reasons or ("entry was evicted or cleared",)


def nearest_entry(cache: "KernelCache", stage: str, token: str) -> Tuple[Optional["Entry"], List[str]]:
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


def built_from(cache: "KernelCache", stage: str, token: str,
               kernel: str) -> List[Tuple[EntryInfo, Dict[str, int]]]:
    """The cubin entries downstream of one entry (same kernel), with the
    resources their link logs report."""
    tokens = {token}
    for downstream in STAGES[STAGES.index(stage) + 1:]:
        upstream = STAGES[STAGES.index(downstream) - 1]
        found = set()
        for row in cache.entries(stage=downstream, kernel=kernel):
            entry = cache.entry(downstream, row.token)
            part = entry.components.get(upstream) if entry is not None else None
            if part is not None and part.digest in tokens:
                found.add(row.token)
        tokens = found
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
    (``explanation.outcomes["typing"]``: hit, miss or not needed)."""

    reasons: Mapping[str, Tuple[str, ...]]
    outcomes: Mapping[str, Outcome]

    def __getitem__(self, stage):
        return self.reasons[stage]

    def __iter__(self):
        return iter(self.reasons)

    def __len__(self) -> int:
        return len(self.reasons)

    @property
    def misses(self) -> Dict[str, Tuple[str, ...]]:
        """The stages that would compile, with why."""
        return {stage: self.reasons[stage] for stage in STAGES if self.outcomes[stage] is Outcome.MISS}


def predict(cache: "KernelCache", tokens, config, kernel: str) -> Explanation:
    """What compiling with these tokens would do, read without changing the
    cache.  As `KernelCache.compile` runs: llvm, ptx and cubin are each
    looked up, and each one missing is compiled; typing is needed only where
    llvm is."""
    outcomes: Dict[str, Outcome] = {}
    reasons: Dict[str, Tuple[str, ...]] = {}
    for stage in ("cubin", "ptx", "llvm", "typing"):
        entry, token, _ = cache._lookup(stage, tokens[stage], config.cc, fill=False)
        reasons[stage] = ()
        if entry is not None:
            outcomes[stage] = Outcome.HIT
        elif stage == "typing" and outcomes["llvm"] is Outcome.HIT:
            outcomes[stage] = Outcome.NOT_NEEDED
        else:
            outcomes[stage] = Outcome.MISS
            reasons[stage] = explain_miss(cache, stage, kernel, token.components)
    return Explanation({s: reasons[s] for s in STAGES}, {s: outcomes[s] for s in STAGES})


# What source each entry was built from (telling apart kernels of one name)

_NOT_SOURCE = frozenset({"signature"} | {f.name for f in dataclasses.fields(CompileConfig)})
_MAX_SOURCES = 8192


class Sources:
    """Which source each entry was built from, read from the cache.

    Every entry names its upstream entry's token among its components
    (cubin -> ptx -> llvm -> typing); the typing entry's components are the
    kernel's inputs.  The digest of those, signature and config aside (the
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
                return self._remember(path, _source_digest(entry.components), self.found)
            upstream = STAGES[STAGES.index(stage) - 1]
            part = entry.components.get(upstream)
            if part is None:
                return self._remember(path, token, self.guessed)
            stage, token = upstream, part.digest

    @staticmethod
    def _remember(path, value: str, memo) -> str:
        for key in path:
            memo[key] = value
        return value


def _source_digest(components) -> str:
    digest = hashlib.sha256()
    for name in sorted(components):
        if name not in _NOT_SOURCE:
            digest.update(f"{name}\0{components[name].digest}\0".encode())
    return digest.hexdigest()
