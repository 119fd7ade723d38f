"""Two entries' code side by side: two ptx entries' PTX, or two cubin entries' SASS.

`compare_entries` compares two cached entries, `find_entry` reads a token
from its first digits, `comparable_entries` lists what an entry can be
compared with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ..keys.stagespec import PERSISTENT_STAGES
from ..pipeline.artifacts import Compared, NoListing
from ..pipeline.results import EntryInfo
from ..toolchain.sass import DiffRow, SassUnavailable, SideBySide, side_by_side, side_by_side_text
from ..keys.tokens import find_token, short_name, short_token
from ..store.codec import artifact_class
from .reading import CacheReader

if TYPE_CHECKING:  # pragma: no cover
    from ..store.tiers import Entry


# Two entries' code side by side (PTX, or a cubin's SASS)

# the stages whose artifacts say how two of them are compared (`Artifact.compared`)
COMPARED_STAGES = tuple(stage for stage in PERSISTENT_STAGES if artifact_class(stage).compared is not None)


def find_entry(cache: CacheReader, given: str, stage: Optional[str] = None) -> Tuple[str, str]:
    """(stage, token) of the one entry whose token is `given` or starts with
    it (6 hex digits at least), of `stage` or any; ValueError naming the
    problem (not a token, no such entry, more than one) otherwise."""
    rows = cache.entries(stage=stage)
    return find_token(given, ((row.stage, row.token, row.token) for row in rows),
                      f" among the cached {stage} entries" if stage else " in the cache")


def comparable_entries(cache: CacheReader, stage: str, token: str) -> List[EntryInfo]:
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
        return f"{short_name(self.kernel)} [{self.config}] {short_token(self.token)} ({self.listing})"


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


def _compared(stage: str) -> Compared:
    """How entries of `stage` are compared (its artifact class says); ValueError where they are not."""
    cls = artifact_class(stage)
    if cls is None or cls.compared is None:
        comparable = [f"{name} entries ({artifact_class(name).compared.title})" for name in COMPARED_STAGES]
        raise ValueError(f"{stage!r} entries cannot be compared: compare {' or '.join(comparable)}")
    return cls.compared


def _listing(stage: str, entry: "Entry") -> Tuple[ComparedEntry, str]:
    artifact, short = entry.artifact, short_token(entry.token)
    if artifact is None:
        raise ValueError(f"the {stage} entry {short} has no artifact loaded (it is a marker or a header only)")
    try:
        text, arch, listing = artifact.listing((entry.config_fields or {}).get("sm"))
    except NoListing as exc:
        raise ValueError(f"the {stage} entry {short} {exc}") from None
    except SassUnavailable as exc:
        raise ValueError(f"no SASS for the {stage} entry {short}: {exc}") from None
    return ComparedEntry(stage, entry.token, entry.kernel, entry.signature, entry.config, arch, listing), text


def compare_artifacts(stage: str, left: "Entry", right: "Entry", context: int = 3) -> EntryComparison:
    """Two entries of `stage` (one of `COMPARED_STAGES`) side by side, by line or
    instruction as its artifact class says (`gpucache_ext.toolchain.sass.side_by_side`);
    ValueError says why they cannot be."""
    compared = _compared(stage)
    (a, a_text), (b, b_text) = _listing(stage, left), _listing(stage, right)
    diff = side_by_side(a_text, b_text, a.label, b.label, context, kind=compared.kind)
    return EntryComparison(stage, a, b, diff)


def compare_entries(cache: CacheReader, stage: str, token_a: str, token_b: str,
                    context: int = 3) -> EntryComparison:
    """Two cached entries of `stage` side by side: PTX for "ptx", SASS for
    "cubin".  Tokens may be given by their first 6 hex digits or more.
    ValueError names what is wrong: another stage, an unknown token or one
    that is on another stage, an artifact not loaded, SASS unavailable (and why)."""
    _compared(stage)
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
