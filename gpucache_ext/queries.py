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
- `predict`: what compiling would do now, stage by stage (`KernelCache.explain`);
- `compare_entries`: two ptx entries' PTX, or two cubin entries' SASS, side
  by side (`find_entry` reads a token from its first digits,
  `comparable_entries` lists what an entry can be compared with).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from .config import STAGES, CompileConfig
from .results import EntryInfo, Outcome, parse_resources
from .sass import DiffRow, SassUnavailable, SideBySide, disassembly, side_by_side, side_by_side_text
from .tokens import Component, explain_difference, find_token, make_token, short_token

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
    resources their link logs report.  A ptx or cubin entry names the bytes it
    was built from by their digest, so this follows digests: an entry rebuilt
    to the same bytes as another leads to the same downstream entries.  A
    typing entry leads to the llvm entries that name its token."""
    entry = cache.entry(stage, token)
    if entry is None:
        return []
    keys = {token} if stage == "typing" else {entry.digest}
    tokens = {token}
    for downstream in STAGES[STAGES.index(stage) + 1:]:
        upstream = STAGES[STAGES.index(downstream) - 1]
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


def predict(cache: "KernelCache", plan, kernel: str) -> Explanation:
    """What compiling `plan` (a `cache._Plan`) would do, read without changing
    the cache.  As `KernelCache.compile` runs: llvm is looked up by its token,
    and typing is needed only where llvm is missing; ptx and cubin are looked
    up by the digest of the artifact before them.  Where that artifact would
    be rebuilt, the stage after it is a miss unless the rebuild gives the same
    bytes as before (early cutoff), which only the rebuild can tell."""
    outcomes: Dict[str, Outcome] = {}
    reasons: Dict[str, Tuple[str, ...]] = {}
    config = plan.config
    entry, token, _ = cache._lookup("llvm", plan.tokens["llvm"], config.cc, fill=False)
    digest = entry.digest if entry is not None else None
    outcomes["llvm"] = Outcome.HIT if entry is not None else Outcome.MISS
    reasons["llvm"] = () if entry is not None else explain_miss(cache, "llvm", kernel, token.components)
    typed, token, _ = cache._lookup("typing", plan.tokens["typing"], config.cc, fill=False)
    if typed is not None:
        outcomes["typing"], reasons["typing"] = Outcome.HIT, ()
    elif entry is not None:
        outcomes["typing"], reasons["typing"] = Outcome.NOT_NEEDED, ()
    else:
        outcomes["typing"] = Outcome.MISS
        reasons["typing"] = explain_miss(cache, "typing", kernel, token.components)
    for stage in ("ptx", "cubin"):
        upstream = STAGES[STAGES.index(stage) - 1]
        if digest is None:  # its own inputs, against the nearest entry's; the upstream bytes are unknown
            outcomes[stage] = Outcome.MISS
            parts = {name: part for name, part in plan._parts[stage].items() if name != upstream}
            found = explain_miss(cache, stage, kernel, make_token(stage, parts).components)
            if found == (f"{upstream} input changed",):
                found += (f"reused if {upstream} rebuilds to the same bytes",)
            reasons[stage] = found
            continue
        entry, token, _ = cache._lookup(stage, plan.content_token(stage, digest), config.cc, fill=False)
        digest = entry.digest if entry is not None else None
        outcomes[stage] = Outcome.HIT if entry is not None else Outcome.MISS
        reasons[stage] = () if entry is not None else explain_miss(cache, stage, kernel, token.components)
    return Explanation({s: reasons[s] for s in STAGES}, {s: outcomes[s] for s in STAGES})


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
                return self._remember(path, _source_digest(entry.components), self.found)
            upstream = STAGES[STAGES.index(stage) - 1]
            if stage == "llvm":  # llvm entries name typing's token; ptx and cubin the entry they came from
                part = entry.components.get(upstream)
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


def _source_digest(components) -> str:
    digest = hashlib.sha256()
    for name in sorted(components):
        if name not in _NOT_SOURCE:
            digest.update(f"{name}\0{components[name].digest}\0".encode())
    return digest.hexdigest()


# Two entries' code side by side (PTX, or a cubin's SASS)

COMPARED_STAGES = ("ptx", "cubin")
_PTX_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)", re.M)


def find_entry(cache: "KernelCache", given: str, stage: Optional[str] = None) -> Tuple[str, str]:
    """(stage, token) of the one entry whose token is `given` or starts with
    it (6 hex digits at least), of `stage` or any; ValueError naming the
    problem (not a token, no such entry, more than one) otherwise."""
    rows = cache.entries(stage=stage)
    return find_token(given, ((row.stage, row.token, row.token) for row in rows),
                      f" among the cached {stage} entries" if stage else " in the cache")


def comparable_entries(cache: "KernelCache", stage: str, token: str) -> List[EntryInfo]:
    """The other entries of the same kernel at `stage`, newest first: what
    entry `token` can be compared with (`compare_entries`)."""
    rows = cache.entries(stage=stage)
    kernel = next((row.kernel for row in rows if row.token == token), None)
    return [row for row in rows if row.kernel == kernel and row.token != token]


@dataclass(frozen=True)
class ComparedEntry:
    """One side of an `EntryComparison`: which entry, and which listing of it."""

    stage: str
    token: str
    kernel: str
    signature: str
    config: str  # the config's summary
    arch: Optional[int]  # the SM its code is for
    listing: str  # "PTX sm_86", "SASS sm_86 (nvdisasm 13.5)"

    @property
    def label(self) -> str:
        """"axpy [sm_86 fastmath=True] 3f2a1c0b9e (SASS sm_86 (nvdisasm 13.5))"."""
        return f"{self.kernel.rsplit('.', 1)[-1]} [{self.config}] {short_token(self.token)} ({self.listing})"


@dataclass(frozen=True)
class EntryComparison:
    """Two ptx entries' PTX, or two cubin entries' SASS, side by side."""

    stage: str
    left: ComparedEntry
    right: ComparedEntry
    diff: SideBySide  # the rows, by instruction (`gpucache_ext.sass.side_by_side`)

    @property
    def rows(self) -> Tuple[DiffRow, ...]:
        return self.diff.rows

    def summary(self) -> str:
        return self.diff.summary()

    def text(self, width: int = 160) -> str:
        return side_by_side_text(self.diff, width)

    def as_dict(self) -> Dict[str, object]:
        """Plain dicts and lists (for JSON)."""
        return {**dataclasses.asdict(self), "summary": self.summary()}


def _check_compared(stage: str) -> None:
    if stage not in COMPARED_STAGES:
        raise ValueError(f"{stage!r} entries cannot be compared: compare ptx entries (PTX) or cubin entries (SASS)")


def _listing(stage: str, entry: "Entry") -> Tuple[ComparedEntry, str]:
    artifact, short = entry.artifact, short_token(entry.token)
    if artifact is None:
        raise ValueError(f"the {stage} entry {short} has no artifact loaded (it is a marker or a header only)")
    if stage == "ptx":
        if artifact.ltoir is not None:
            raise ValueError(f"the ptx entry {short} holds LTO-IR (binary), not PTX: compare the cubin "
                             "entries built from it")
        text = "\n".join(artifact.ptx)
        target = _PTX_TARGET.search(text)
        arch = int(target.group(1)) if target else (entry.config_fields or {}).get("sm")
        listing = f"PTX sm_{arch}"
    else:
        try:
            found = disassembly(artifact.cubin)
        except SassUnavailable as exc:
            raise ValueError(f"no SASS for the cubin entry {short}: {exc}") from None
        text, arch, listing = found.text, found.arch, found.label
    return ComparedEntry(stage, entry.token, entry.kernel, entry.signature, entry.config, arch, listing), text


def compare_artifacts(stage: str, left: "Entry", right: "Entry", context: int = 3) -> EntryComparison:
    """Two entries of `stage` ("ptx" or "cubin") side by side, by instruction
    (`gpucache_ext.sass.side_by_side`); ValueError says why they cannot be."""
    _check_compared(stage)
    (a, a_text), (b, b_text) = _listing(stage, left), _listing(stage, right)
    diff = side_by_side(a_text, b_text, a.label, b.label, context, kind="sass" if stage == "cubin" else "ptx")
    return EntryComparison(stage, a, b, diff)


def compare_entries(cache: "KernelCache", stage: str, token_a: str, token_b: str,
                    context: int = 3) -> EntryComparison:
    """Two cached entries of `stage` side by side: PTX for "ptx", SASS for
    "cubin".  Tokens may be given by their first 6 hex digits or more.
    ValueError names what is wrong: another stage, an unknown token or one
    that is on another stage, an artifact not loaded, SASS unavailable (and why)."""
    _check_compared(stage)
    entries = []
    for given in (token_a, token_b):
        found, token = find_entry(cache, given)
        if found != stage:
            raise ValueError(f"{short_token(token)} is a {found} entry, not a {stage} one: compare two {stage} "
                             "entries")
        entry = cache.entry(stage, token)
        if entry is None:
            raise ValueError(f"the {stage} entry {short_token(token)} is no longer cached")
        entries.append(entry)
    return compare_artifacts(stage, *entries, context=context)
