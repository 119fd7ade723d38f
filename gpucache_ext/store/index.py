"""`CacheIndex`: what a `KernelCache` holds, read without changing it.

The queries (`gpucache_ext.queries`: why a stage would miss, what compiling
would do now) are given this index, never the cache: they read this
process's history of stored entries, the memory tiers, a listing of what the
persistent tiers held, and entries looked up without side effects (no
eviction order refreshed, no tier filled, no refusal counted, no hit or miss
recorded).  The cache is the only writer (`remember`, when it stores an entry).

Per-target variants: an entry whose build asked about the target is filed
under its token plus the questions and answers, and the token alone holds a
marker listing them (see `targets`); `variant_token` and `variants_for` name
them, for the cache, the index and the ``gpucache`` command alike.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..keys import targets
from ..keys.stagespec import ALL_STAGES
from .tiers import Entry, MemoryTier, Tier
from ..keys.tokens import Component, Token, component, extend_token

log = logging.getLogger(__name__)

HISTORY_LIMIT = 4096  # tokens remembered per stage

Candidate = Tuple[str, Mapping[str, Component]]  # (token, its components)


def variant_token(token: Token, reads: targets.TargetReads) -> Token:
    """The token an artifact is filed under when building it asked `reads` of the target."""
    return extend_token(token, {"target": component(targets.reads_key(reads), targets.describe(reads))})


def variants_for(marker: Entry, token: Token, cc) -> Iterator[Token]:
    """The tokens of `marker`'s per-target variants that hold for target `cc`, in order."""
    for reads in marker.variants:
        if targets.holds_for(reads, cc):
            yield variant_token(token, reads)


def find_for_target(find: Callable[[str], Tuple[Optional[Entry], Optional[str]]], token: Token,
                    cc) -> Tuple[Optional[Entry], Token, Optional[str]]:
    """The entry a lookup for target `cc` finds under `token`: the entry
    itself, or, where `token` holds a marker, its first variant that holds for
    `cc`.  `find(token_hex)` gives (entry or None, where it was).  Returns
    (entry or None, the token it is filed under, where)."""
    entry, where = find(token.hex)
    if entry is None or not entry.is_marker:
        return entry, token, where
    for variant in variants_for(entry, token, cc):
        found, where = find(variant.hex)
        if found is not None:
            return found, variant, where
    return None, token, None


class CacheIndex:
    """A read-only view of one cache's entries (see the module docstring).

    `memory`: the cache's memory tier per stage; `tiers_for(stage)`: its
    persistent tiers holding `stage`, in search order; `lock`: the lock the
    cache guards its memory tiers with (held for memory reads alone, never
    while a persistent tier is read)."""

    def __init__(self, memory: Mapping[str, MemoryTier], tiers_for: Callable[[str], Sequence[Tier]],
                 lock: threading.RLock):
        self._memory = memory
        self._tiers_for = tiers_for
        self._lock = lock
        self._history: Dict[str, "OrderedDict[str, Tuple[str, Mapping[str, Component]]]"] = {
            stage: OrderedDict() for stage in ALL_STAGES}
        # per stage, what the persistent tiers held when first asked: kernel -> [(token, components)]
        self._persisted: Dict[str, Dict[str, List[Candidate]]] = {}

    # -- the one write: the cache records what it stored ----------------------
    def remember(self, stage: str, token: Token, kernel: str) -> None:
        """Note that `kernel`'s entry `token` of `stage` was stored (the
        history later misses are explained against)."""
        with self._lock:
            history = self._history[stage]
            history[token.hex] = (kernel, token.components)
            history.move_to_end(token.hex)
            while len(history) > HISTORY_LIMIT:
                history.popitem(last=False)

    # -- reads ---------------------------------------------------------------
    def dropped(self, stage: str, token: str) -> Optional[Tuple[str, str, float]]:
        """(tier name, why, when) a persistent tier dropped the entry `token`
        of `stage` (see `Tier.dropped`), or None."""
        for tier in self._tiers_for(stage):
            try:
                found = tier.dropped(stage, token)
            except Exception:  # (an explanation: it must not fail a compile)
                log.debug("the %s tier could not say whether it dropped %s", tier.name, token[:12], exc_info=True)
                continue
            if found is not None:
                return (tier.name, *found)
        return None

    def history(self, stage: str, kernel: str) -> List[Candidate]:
        """The entries of `kernel` this process stored at `stage`, oldest first."""
        with self._lock:
            return [(token, components) for token, (name, components) in self._history[stage].items()
                    if name == kernel]

    def in_memory(self, stage: str, kernel: str) -> List[Candidate]:
        """The entries of `kernel` in the memory tier of `stage` (markers left out)."""
        with self._lock:
            return [(entry.token, entry.components) for entry in self._memory[stage].entries.values()
                    if entry.kernel == kernel and not entry.is_marker]

    def persisted(self, stage: str, kernel: str) -> List[Candidate]:
        """The entries of `kernel` the persistent tiers held at `stage` when
        first asked in this process (reading every header costs about 20 us
        an entry, so they are listed once; what this process stores later is
        in its history instead)."""
        with self._lock:
            listing = self._persisted.get(stage)
        if listing is None:
            found: Dict[str, list] = {}
            for tier in self._tiers_for(stage):  # (outside the lock: a listing may ask a server)
                try:
                    for entry in tier.entries(stage):
                        if not entry.is_marker:
                            found.setdefault(entry.kernel, []).append((entry.created, entry.token, entry.components))
                except Exception:  # a listing that fails (a server gone) explains nothing
                    log.debug("listing %s entries of the %s tier failed", stage, tier.name, exc_info=True)
            # oldest first, as `nearest` reads them (a tie goes to the latest), not in the order a
            # directory or a server lists them
            listing = {kernel: [(token, components) for _, token, components in
                                sorted(rows, key=lambda row: row[0] or 0.0)] for kernel, rows in found.items()}
            with self._lock:
                listing = self._persisted.setdefault(stage, listing)
        return list(listing.get(kernel, ()))

    def find(self, stage: str, token_hex: str) -> Tuple[Optional[Entry], Optional[str]]:
        """The entry under exactly this token, from the first tier holding it,
        and that tier's name; (None, None) where none does."""
        with self._lock:
            entry = self._memory[stage].peek(token_hex)
        if entry is not None:
            return entry, "memory"
        for tier in self._tiers_for(stage):
            found = tier.lookup(stage, token_hex, query=True)
            if found.entry is not None:
                return found.entry, tier.name
        return None, None

    def peek(self, stage: str, token: Token, cc) -> Tuple[Optional[Entry], Token]:
        """The entry a compile for target `cc` would find under `token` (or
        under the variant of it that holds for `cc`), and the token it is
        filed under; (None, token) where there is none."""
        entry, token, _ = find_for_target(lambda token_hex: self.find(stage, token_hex), token, cc)
        return entry, token
