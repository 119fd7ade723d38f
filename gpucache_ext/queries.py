"""Questions about what a `KernelCache` holds, one algorithm each.

Every query here only reads: it counts no lookup, fills no tier and records
no miss.  The miss explanations and `predict` are given the cache's
read-only `CacheIndex` (``cache.index``), the others its public API
(``entry``, ``entries``).  The cache itself, the inspector and the
``gpucache`` command ask them; none of them keeps a second copy.

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
- `resource_rows` / `resource_moves`: what each cubin variant of a kernel
  uses (per target, per config), and how the figures moved between variants
  whose configs differ in one field ("registers 40 -> 64 when max_registers
  was lifted (32 -> none)").
- `compare_entries`: two ptx entries' PTX, or two cubin entries' SASS, side
  by side (`find_entry` reads a token from its first digits,
  `comparable_entries` lists what an entry can be compared with).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from .config import FOLLOW_FASTMATH, STAGES, CompileConfig
from .results import EntryInfo, Outcome, parse_resources, short_signature
from .toolchain.sass import DiffRow, SassUnavailable, SideBySide, disassembly, side_by_side, side_by_side_text
from .tokens import Component, explain_difference, find_token, make_token, short_name, short_token
from .store.tiers import DROPPED
from .units import format_age, format_bytes

if TYPE_CHECKING:  # pragma: no cover
    from .cache import KernelCache
    from .index import CacheIndex
    from .store.tiers import Entry


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
                 ) -> Tuple[str, ...]:
    """Why `wanted` missed where `old` was cached: one reason per differing
    component; a changed upstream token reads "typing input changed".
    `members` (a fatbin's): member ("cubin sm_86", "PTX compute_80") -> why
    this compile rebuilt it, None where it reused an entry."""
    if stage == "fatbin":
        return _fatbin_reasons(wanted, old, members or {})
    reasons = []
    for reason in explain_difference(wanted, old):
        name = reason.split(" ", 1)[0]
        if name in STAGES and name != stage:
            reasons.append(f"{name} input changed")
        else:
            reasons.append(reason)
    return tuple(reasons)


def _fatbin_reasons(wanted: Mapping[str, Component], old: Mapping[str, Component],
                    whys: Mapping[str, Optional[str]]) -> Tuple[str, ...]:
    """Why a fatbin missed, by member, naming only the members that changed:
    "sm_75 added", "PTX compute_80 -> compute_75", "cubin sm_86 rebuilt:
    global ALPHA 1.5 -> 3.0 (read by activate)" (`whys`: why each member was
    rebuilt, None where it was an entry built before); then its other inputs."""
    def changed(member):
        why = whys.get(member, "")
        if why is None:
            return f"{member} changed (an entry built earlier, reused)"
        return f"{member} rebuilt: {why}" if why else f"{member} rebuilt to other bytes"

    def members(parts, kind):
        return {name.split(" ", 1)[1]: part for name, part in parts.items() if name.startswith(kind + " ")}

    reasons = []
    new, before = members(wanted, "cubin"), members(old, "cubin")
    added, removed = [a for a in new if a not in before], [a for a in before if a not in new]
    if added:
        reasons.append(f"{', '.join(added)} added")
    if removed:
        reasons.append(f"{', '.join(removed)} removed")
    reasons += [changed(f"cubin {arch}") for arch in new
                if arch in before and new[arch].digest != before[arch].digest]
    new_ptx, old_ptx = members(wanted, "ptx"), members(old, "ptx")
    if set(new_ptx) != set(old_ptx):
        reasons.append(f"PTX {', '.join(old_ptx) or 'none'} -> {', '.join(new_ptx) or 'none'}")
    else:
        reasons += [changed(f"PTX {arch}") for arch in new_ptx
                    if new_ptx[arch].digest != old_ptx[arch].digest]
    rest = {name: part for name, part in wanted.items() if not name.startswith(("cubin ", "ptx "))}
    rest_old = {name: part for name, part in old.items() if not name.startswith(("cubin ", "ptx "))}
    return tuple(reasons) + explain_difference(rest, rest_old)


def _candidates(index: "CacheIndex", stage: str, kernel: str) -> Iterator[Tuple[str, Mapping[str, Component]]]:
    """(token, components) of the kernel's entries at `stage`: this process's
    history and memory first, then, only where those know none, every
    persistent tier's."""
    history = index.history(stage, kernel)
    memory = index.in_memory(stage, kernel)
    yield from history
    yield from memory
    if history or memory:
        return
    yield from index.persisted(stage, kernel)


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
                 members: Optional[Mapping[str, Optional[str]]] = None) -> Tuple[str, ...]:
    """Why `stage` of `kernel` misses with these token components: how they
    differ from the nearest entry's (see `nearest`) in `index` (a cache's
    `KernelCache.index`); `members` as `miss_reasons`."""
    short = short_name(kernel)
    dropped = index.dropped(stage, make_token(stage, {k: v for k, v in components.items() if k != "stage"}).hex)
    if dropped is not None:  # this very entry was dropped: that is why (also after a restart)
        tier, why, when = dropped
        return (f"entry was {DROPPED[why]} from the {tier} tier {format_age(max(0.0, time.time() - when))} ago",)
    found = nearest(_candidates(index, stage, kernel), components)
    if found is None:
        if stage == "typing" and any(True for _ in _candidates(index, "llvm", kernel)):
            # typed IR is kept in memory only; the persistent llvm entries
            # know the kernel, and what their typing was made of
            found = nearest(((token, dict(parts["typing"].parts))
                             for token, parts in _candidates(index, "llvm", kernel)
                             if "typing" in parts and parts["typing"].parts), components)
            reasons = miss_reasons(stage, components, found[1]) if found is not None else ()
            return reasons or (f"first typing of {short} in this process (typed IR is not kept on disk)",)
        return (f"first compile of {short}",)
    reasons = miss_reasons(stage, components, found[1], members)
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
        return {stage: self.reasons[stage] for stage in STAGES if self.outcomes[stage] is Outcome.MISS}


def predict(index: "CacheIndex", plan, kernel: str) -> Explanation:
    """What compiling `plan` (a `cache.Plan`) would do, read from `index`
    without changing the cache.  As `KernelCache.compile` runs: llvm is looked up by its token,
    and typing is needed only where llvm is missing; ptx and cubin are looked
    up by the digest of the artifact before them.  Where that artifact would
    be rebuilt, the stage after it is a miss unless the rebuild gives the same
    bytes as before (early cutoff), which only the rebuild can tell."""
    outcomes: Dict[str, Outcome] = {}
    reasons: Dict[str, Tuple[str, ...]] = {}
    reused_if: Dict[str, str] = {}
    config = plan.config
    entry, token = index.peek("llvm", plan.tokens["llvm"], config.cc)
    digest = entry.digest if entry is not None else None
    outcomes["llvm"] = Outcome.HIT if entry is not None else Outcome.MISS
    reasons["llvm"] = () if entry is not None else explain_miss(index, "llvm", kernel, token.components)
    typed, token = index.peek("typing", plan.tokens["typing"], config.cc)
    if typed is not None:
        outcomes["typing"], reasons["typing"] = Outcome.HIT, ()
    elif entry is not None:
        outcomes["typing"], reasons["typing"] = Outcome.NOT_NEEDED, ()
    else:
        outcomes["typing"] = Outcome.MISS
        reasons["typing"] = explain_miss(index, "typing", kernel, token.components)
    for stage in ("ptx", "cubin"):
        upstream = STAGES[STAGES.index(stage) - 1]
        if digest is None:  # its own inputs, against the nearest entry's; the upstream bytes are unknown
            outcomes[stage] = Outcome.MISS
            parts = {name: part for name, part in plan.parts[stage].items() if name != upstream}
            found = explain_miss(index, stage, kernel, make_token(stage, parts).components)
            if found == (f"{upstream} input changed",):
                reused_if[stage] = upstream
                found += (reused_note(upstream),)
            reasons[stage] = found
            continue
        entry, token = index.peek(stage, plan.content_token(stage, digest), config.cc)
        digest = entry.digest if entry is not None else None
        outcomes[stage] = Outcome.HIT if entry is not None else Outcome.MISS
        reasons[stage] = () if entry is not None else explain_miss(index, stage, kernel, token.components)
    return Explanation({s: reasons[s] for s in STAGES}, {s: outcomes[s] for s in STAGES}, reused_if)


def reused_note(upstream: str) -> str:
    """How a stage found again if `upstream` rebuilds to the same bytes says so."""
    return f"reused if {upstream} rebuilds to the same bytes"


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
            upstream = "cubin" if stage == "fatbin" else STAGES[STAGES.index(stage) - 1]
            if stage == "llvm":  # llvm entries name typing's token; ptx and cubin the entry they came from
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


# How resources move across a kernel's cubin variants

# The figures a move reports, in the order moves of equal weight are listed: a
# row's field names each (spills: stores and loads together), what a sentence
# calls them, and whether more of them is a regression.
# (in the order they matter: spills cost memory traffic, registers and local
# memory cost occupancy and traffic; more of the others costs nothing to speak of)
_RESOURCES = (
    ("spills", ("spill_stores", "spill_loads"), "spills", True),
    ("registers", ("registers",), "registers", True),
    ("local_bytes", ("local_bytes",), "local memory", True),
    ("shared_bytes", ("shared_bytes",), "shared memory", False),
    ("constant_bytes", ("constant_bytes",), "constant memory", False),
    ("cubin_bytes", ("cubin_bytes",), "cubin", False),
)
_PLURAL = frozenset({"spills", "registers"})


@dataclass(frozen=True)
class ResourceRow:
    """What one cubin variant of a kernel uses, from nvJitLink's log: per
    thread registers and spills, per block shared memory, and the sizes of
    local and constant memory and of the cubin itself.  `resource_rows` reads
    them from a cache; `ResourceRow.from_result` from a compile."""

    arch: str  # "sm_86"
    token: str  # the cubin entry's
    config: str  # the config's summary
    config_fields: Mapping[str, Any]  # every field of the config (lists read back as tuples)
    signature: str
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    shared_bytes: int
    local_bytes: int
    constant_bytes: int
    cubin_bytes: int
    kernel: str = ""  # qualified name
    created: float = 0.0  # when the entry was built: the earlier of two variants is the one moved from
    source: Optional[str] = None  # what it was built from (`Sources`); variants of other code are not compared
    place: Optional[str] = None  # where the kernel was defined (`gpucache_ext.definitions`)

    def __post_init__(self):
        object.__setattr__(self, "config_fields", _tuples(dict(self.config_fields or {})))

    @classmethod
    def from_link_log(cls, info_log: str, cubin_bytes: int, *, arch: str, token: str = "", config: str = "",
                      config_fields: Optional[Mapping[str, Any]] = None, signature: str = "",
                      kernel: str = "", created: float = 0.0, source: Optional[str] = None,
                      place: Optional[str] = None) -> "ResourceRow":
        """A row from a link log (`parse_resources`) and the cubin's size."""
        found = parse_resources(info_log or "")
        return cls(arch, token, config, dict(config_fields or {}), signature,
                   **{name: found[name] for name in ("registers", "spill_stores", "spill_loads", "shared_bytes",
                                                     "local_bytes", "constant_bytes")},
                   cubin_bytes=int(cubin_bytes), kernel=kernel, created=created, source=source, place=place)

    @classmethod
    def from_result(cls, result) -> "ResourceRow":
        """The row of a `CompileResult` (a cell's compile for one target)."""
        return cls.from_link_log(result.link_log, len(result.cubin), arch=result.config.sm_name,
                                 token=result.stages["cubin"].token, config=result.config.summary(),
                                 config_fields=result.config.fields(), signature=result.signature_text,
                                 kernel=result.kernel, place=result.place)

    @property
    def variant(self) -> str:
        """The config's summary without the target ("max_registers=32"), "" for the defaults."""
        words = self.config.split()
        return " ".join(words[1:] if words and words[0] == self.arch else words)


# the block sizes a variants table gives occupancy at where none are named (--block)
DEFAULT_BLOCKS = (128, 256, 512, 1024)


@dataclass(frozen=True)
class VariantOccupancy:
    """Theoretical occupancy of each variant (`ResourceRow`) at each block
    size (`gpucache_ext.occupancy`), and the best variant per architecture."""

    blocks: Tuple[int, ...]
    by_row: Mapping[str, Tuple[Any, ...]]  # cubin token -> an `Occupancy` per block (None: no such launch)
    best: frozenset  # the cubin tokens marked best: per architecture and signature
    dynamic_shared: int = 0  # bytes of dynamic shared memory a block is launched with


def variant_occupancy(rows: Iterable[ResourceRow], blocks: Sequence[int] = DEFAULT_BLOCKS,
                      dynamic_shared: int = 0) -> VariantOccupancy:
    """Each row's occupancy at each of `blocks` (static shared memory as its
    link log says, plus `dynamic_shared` a block; none above a launch bound
    the variant was built with),
    and per architecture and signature the best: no spills before spills,
    then the highest occupancy at any of the block sizes, then the fewest
    registers, then the smallest cubin.  Occupancy is not speed
    (docs/occupancy.md): this ranks what can be known without a GPU."""
    from .occupancy import OccupancyError, occupancy

    rows = list(rows)
    blocks = tuple(blocks) or DEFAULT_BLOCKS
    by_row: Dict[str, Tuple[Any, ...]] = {}
    for row in rows:
        bounds = row.config_fields.get("launch_bounds")
        found = []
        for block in blocks:
            try:
                found.append(None if bounds and block > bounds[0] else
                             occupancy(_sm_number(row.arch), block, row.registers, row.shared_bytes,
                                       dynamic_shared))
            except OccupancyError:
                found.append(None)  # (an architecture the calculator does not know)
        by_row[row.token] = tuple(found)

    def rank(row):
        shares = [found.occupancy for found in by_row[row.token] if found is not None]
        return (bool(row.spill_stores or row.spill_loads), -max(shares, default=0.0), row.registers,
                row.cubin_bytes)

    best = set()
    groups: Dict[tuple, List[ResourceRow]] = {}
    for row in rows:
        groups.setdefault((row.arch, row.signature), []).append(row)
    for group in groups.values():
        if len(group) > 1:
            best.add(min(group, key=rank).token)
    return VariantOccupancy(blocks, by_row, frozenset(best), dynamic_shared)


def _tuples(value):
    """Lists (as JSON reads tuples back) as tuples, so that fields compare alike in every tier."""
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(item) for item in value)
    return value


def _arch(info: EntryInfo) -> str:
    sm = (info.config_fields or {}).get("sm")
    if sm is not None:
        return f"sm_{sm}"
    words = (info.config or "").split()
    return words[0] if words and words[0].startswith("sm_") else "?"


def resource_rows(cache: "KernelCache", kernel: str, signature=None) -> List[ResourceRow]:
    """One `ResourceRow` per cached cubin entry of `kernel` (a qualified name
    or its last part), in every tier, of one `signature` (as entries show it,
    or argument types) if given; by signature, target, then age (oldest first).
    Each entry is loaded once."""
    if signature is not None and not isinstance(signature, str):
        signature = short_signature(signature)
    infos = [info for info in cache.entries(stage="cubin", kernel=kernel)
             if signature is None or info.signature == signature]
    loaded = []
    for info in infos:
        entry = cache.entry("cubin", info.token)
        if entry is not None and entry.artifact is not None:
            loaded.append((info, entry))
    # what each was built from: its ptx entry's source is its own (the cubin is not loaded again)
    sources = Sources().of(cache, [{"stage": "ptx", "token": entry.upstream}
                                   for _, entry in loaded if entry.upstream])
    rows = [ResourceRow.from_link_log(
        getattr(entry.artifact, "info_log", "") or "", len(getattr(entry.artifact, "cubin", b"") or b""),
        arch=_arch(info), token=info.token, config=info.config, config_fields=info.config_fields,
        signature=info.signature, kernel=info.kernel, created=info.created,
        source=sources.get(("ptx", entry.upstream)), place=info.place) for info, entry in loaded]
    return sorted(rows, key=lambda row: (row.kernel, row.signature, _sm_number(row.arch), row.created))


def fatbin_rows(cache: "KernelCache", entry) -> List[ResourceRow]:
    """One `ResourceRow` per cubin of a fatbin entry whose cubin entry is
    still cached (by architecture): the fatbin's resources side by side."""
    rows = []
    for member in getattr(entry.artifact, "members", ()):
        if member.kind != "cubin":
            continue
        cubin = cache.entry("cubin", member.token)
        if cubin is None or cubin.artifact is None:
            continue
        rows.append(ResourceRow.from_link_log(
            getattr(cubin.artifact, "info_log", "") or "", len(getattr(cubin.artifact, "cubin", b"") or b""),
            arch=member.name, token=member.token, config=cubin.config, config_fields=cubin.config_fields,
            signature=cubin.signature, kernel=cubin.kernel, created=cubin.created))
    return rows


def _sm_number(arch: str) -> int:
    digits = arch.rpartition("_")[2]
    return int(digits) if digits.isdigit() else 0


@dataclass(frozen=True)
class ResourceMove:
    """How one resource moved between two variants of a kernel (same
    signature, same code) whose configs differ in one field: from the
    variant built first (``before``) to the other (``after``)."""

    kernel: str
    signature: str
    field: str  # the config field that differs ("max_registers", "sm", ...)
    value_before: Any
    value_after: Any
    resource: str  # "registers", "spills", "local_bytes", "cubin_bytes", "shared_bytes", "constant_bytes"
    before: Mapping[str, int]  # the figures, by `ResourceRow` field ("spill_stores" and "spill_loads" for spills)
    after: Mapping[str, int]
    token_before: str
    token_after: str
    arch_before: str
    arch_after: str
    regression: bool  # more spills, registers or local memory (across targets: more spills)

    @property
    def magnitude(self) -> float:
        """The change relative to where it started (from nothing: the amount itself)."""
        start, end = sum(self.before.values()), sum(self.after.values())
        return abs(end - start) / max(start, 1)

    @property
    def text(self) -> str:
        """The move in words: "registers 40 -> 64 when max_registers was lifted (32 -> none)"."""
        return describe_move(self)

    def __str__(self) -> str:
        return self.text


def resource_moves(rows: Iterable[ResourceRow]) -> List[ResourceMove]:
    """How the figures moved between variants of a kernel (same signature and
    code) whose configs differ in exactly one field, ``sm`` included: each
    variant against the first built of those one field away from it (what it
    was tuned from; rows built at once, in the given order), one move per
    resource that changed, each said once (two variant pairs that moved
    alike give one move).  Ordered by what matters (spills, registers,
    local memory, then shared, constant memory and cubin size), regressions
    first within each, then the largest relative changes.  Variants whose
    configs are not recorded, and resources that did not move, say nothing."""
    groups: Dict[tuple, Dict[tuple, ResourceRow]] = {}
    for row in rows:
        if not row.config_fields:
            continue
        config = tuple(sorted(row.config_fields.items()))
        variants = groups.setdefault((row.kernel, row.place, row.signature, row.source), {})
        if config not in variants or row.created > variants[config].created:  # the newest of equal configs
            variants[config] = row
    moves = []
    for variants in groups.values():
        ordered = sorted(variants.values(), key=lambda row: row.created)  # (stable: ties keep the given order)
        for i, row in enumerate(ordered):
            for earlier in ordered[:i]:  # what it was tuned from: the first built one field away
                field = _one_difference(earlier.config_fields, row.config_fields)
                if field is not None:
                    moves += _moves(earlier, row, field)
                    break
    order = [resource for resource, *_ in _RESOURCES]
    ordered = sorted(moves, key=lambda move: (order.index(move.resource), not move.regression, -move.magnitude,
                                              move.field))
    said = set()
    return [move for move in ordered if not (move.text in said or said.add(move.text))]


def _one_difference(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> Optional[str]:
    if set(mine) != set(theirs):
        return None
    names = [name for name in mine if mine[name] != theirs[name]]
    return names[0] if len(names) == 1 else None


def _moves(before: ResourceRow, after: ResourceRow, field: str) -> List[ResourceMove]:
    moves = []
    for resource, names, _, worse_when_more in _RESOURCES:
        old = {name: getattr(before, name) for name in names}
        new = {name: getattr(after, name) for name in names}
        if old == new:
            continue
        moves.append(ResourceMove(
            before.kernel, before.signature, field, before.config_fields[field], after.config_fields[field],
            resource, old, new, before.token, after.token, before.arch, after.arch,
            # across architectures only spills count as a regression: other
            # figures differ there by design (sm_90 sets aside more constant memory)
            worse_when_more and sum(new.values()) > sum(old.values())
            and (field != "sm" or resource == "spills")))
    return moves


def describe_move(move: ResourceMove) -> str:
    """`ResourceMove.text`: "registers 40 -> 64 when max_registers was lifted
    (32 -> none)", "cubin 6.0 KiB -> 6.4 KiB at sm_90 against sm_86"; from or
    to nothing, the figures in brackets: "spills appear at sm_75 (0 -> 24 B
    stored, 0 -> 24 B loaded) against sm_86", "local memory appears (0 -> 48 B)
    when opt went 3 -> 0"."""
    subject = next(words for resource, _, words, _ in _RESOURCES if resource == move.resource)
    start, end = sum(move.before.values()), sum(move.after.values())
    figures = ", ".join(_figure_move(name, move.before[name], move.after[name]) for name in move.before)
    verb = None
    if start == 0 or end == 0:
        verb = "appear" if start == 0 else "disappear"
        verb += "" if subject in _PLURAL else "s"
    if move.field == "sm":
        where, against = f"at {move.arch_after}", f"against {move.arch_before}"
        if verb:
            return f"{subject} {verb} {where} ({figures}) {against}"
        return f"{subject} {figures} {where} {against}"
    when = _field_change(move.field, move.value_before, move.value_after)
    if verb:
        return f"{subject} {verb} ({figures}) {when}"
    return f"{subject} {figures} {when}"


_STORED = {"spill_stores": " stored", "spill_loads": " loaded"}


def _figure_move(name: str, old: int, new: int) -> str:
    """"40 -> 64" registers; "0 -> 24 B", "6.0 KiB -> 6.4 KiB" bytes (exact where the rounding hides it)."""
    if name == "registers":
        return f"{old} -> {new}"
    first, second = format_bytes(old), format_bytes(new)
    if first == second or (first.endswith(" B") and second.endswith(" B")):
        return f"{old} -> {new} B{_STORED.get(name, '')}"
    return f"{first} -> {second}{_STORED.get(name, '')}"


def _field_change(field: str, old: Any, new: Any) -> str:
    """"when max_registers was lifted (32 -> none)", "when fastmath was turned on", "when opt went 3 -> 0"."""
    if isinstance(old, bool) and isinstance(new, bool):
        return f"when {field} was turned {'on' if new else 'off'}"
    change = f"{_config_value(field, old)} -> {_config_value(field, new)}"
    if field == "max_registers":
        if old is None:
            return f"when max_registers was set ({change})"
        lifted = new is None or new > old
        return f"when max_registers was {'lifted' if lifted else 'lowered'} ({change})"
    return f"when {field} went {change}"


def _config_value(field: str, value: Any) -> str:
    if value is None:
        return "as fastmath" if field in FOLLOW_FASTMATH else "default" if field == "fma" else "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return str(value[0]) if len(value) == 1 else "(" + ", ".join(map(str, value)) + ")"
    return str(value)
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
    diff: SideBySide  # the rows, by instruction (`gpucache_ext.toolchain.sass.side_by_side`)

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
    (`gpucache_ext.toolchain.sass.side_by_side`); ValueError says why they cannot be."""
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
