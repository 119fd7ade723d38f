"""What each cubin variant of a kernel uses, and how it moved.

- `resource_rows` / `fatbin_rows`: what each cubin variant of a kernel uses
  (per target, per config), read from a cache;
- `variant_occupancy`: their occupancy at some block sizes, and the best;
- `resource_moves`: how the figures moved between variants whose configs
  differ in one field ("registers 40 -> 64 when max_registers was lifted
  (32 -> none)").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..keys.config import FOLLOW_FASTMATH, summary_fields
from ..pipeline.results import EntryInfo, applied_summary, parse_resources, short_signature
from ..units import format_bytes
from .misses import Sources
from .reading import CacheReader


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
    place: Optional[str] = None  # where the kernel was defined (`gpucache_ext.pipeline.definitions`)

    def __post_init__(self):
        object.__setattr__(self, "config_fields", _tuples(dict(self.config_fields or {})))

    @classmethod
    def from_link_log(cls, info_log: str, cubin_bytes: int, *, arch: str, token: str = "", config: str = "",
                      config_fields: Optional[Mapping[str, Any]] = None, signature: str = "",
                      kernel: str = "", created: float = 0.0, source: Optional[str] = None,
                      place: Optional[str] = None) -> "ResourceRow":
        """A row from a link log (`parse_resources`) and the cubin's size."""
        found = parse_resources(info_log or "")
        # the cap ptxas applied where it raised the one asked for to its floor
        config = applied_summary(config, info_log or "")
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
    def cap_raised(self) -> bool:
        """True where ptxas raised the register cap asked for to its floor
        for the target (the config then says "(raised to N by ptxas)")."""
        return "by ptxas)" in self.config

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
    registers, then a register cap applied as asked before one ptxas raised
    to its floor, then the smallest cubin, then the fewest fields set away
    from the defaults (a cap that changes nothing is no better), then the
    config and the token: the best does not follow the order of `rows`, so
    a sweep's report and the inspector, which list them in other orders,
    mark the same one.  Occupancy is not speed (docs/occupancy.md): this
    ranks what can be known without a GPU."""
    from ..occupancy import OccupancyError, occupancy

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
                # an architecture the calculator does not know, or a launch numba cannot make
                # (static + dynamic shared memory past the 48 KiB default limit)
                found.append(None)
        by_row[row.token] = tuple(found)

    def rank(row):
        shares = [found.occupancy for found in by_row[row.token] if found is not None]
        return (bool(row.spill_stores or row.spill_loads), -max(shares, default=0.0), row.registers,
                row.cap_raised, row.cubin_bytes, sum(1 for field in summary_fields(row.variant) if field), row.config,
                row.token)

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


def resource_rows(cache: CacheReader, kernel: str, signature=None) -> List[ResourceRow]:
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


def fatbin_rows(cache: CacheReader, entry) -> List[ResourceRow]:
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
        # (one version of the code is one source, in whichever cell each variant was built first; rows
        # of no known source go by their definition's place)
        version = (row.source,) if row.source is not None else (None, row.place)
        variants = groups.setdefault((row.kernel, row.signature, *version), {})
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
