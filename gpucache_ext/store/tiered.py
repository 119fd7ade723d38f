"""The tiers of one cache, in order, and what they answered.

A `TieredStore` owns a memory tier per stage, then the persistent tiers
(disk, shared, any others) searched after it, and the counters of what was
looked up: hits per stage and per tier, misses, cutoffs, what compiling the
misses took, and the entries a tier held and refused (its signature), which
the compile that follows reports first.  A hit in a lower tier fills the
tiers above it.  The cache (`gpucache_ext.pipeline.cache.KernelCache`) builds and
files entries; this is where they are kept and found.

Its lock is the cache's: it guards the memory tiers and the counters, and is
never held while a persistent tier is read or written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..keys.stagespec import ALL_STAGES, STAGES
from .index import find_for_target
from ..pipeline.results import EntryInfo, StageStats, TierInfo, TierStats
from ..keys.tokens import Token, short_name
from .claims import CLAIM_SECONDS, WAIT_SECONDS, Claim, Renewal, new_owner
from .registry import DEFAULT_TIERS, TierSettings, build_tiers
from .tiers import Entry, MemoryTier, Tier


# how often a waiter looks for the entry another process builds, at most: the
# entry is read this long after it is filed, at worst (a look is one read of
# a file, or one request to the server)
_POLL_MAX = 0.02


class StageCounters:
    """What one stage's lookups and builds came to so far."""

    __slots__ = ("hits", "misses", "not_needed", "cutoffs", "compile_seconds", "saved_seconds", "audits",
                 "audit_mismatches")

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.not_needed = 0  # a later stage hit and this one's entry was gone: nothing looked up
        self.cutoffs = 0  # hits right after the stage before rebuilt to the same bytes
        self.compile_seconds = 0.0
        self.saved_seconds = 0.0  # what the entries that hit took to compile
        self.audits = 0  # artifacts compared with a fresh compile
        self.audit_mismatches = 0


class TieredStore:
    """`memory` (stage -> `MemoryTier`), then `tiers` in order; `refused`:
    configured tiers left out, as `tier_info` shows them; `listed`: the
    stages statistics list even unused (`backends.always_listed`: the
    default backend's and the fatbin), others once used."""

    def __init__(self, memory: Mapping[str, MemoryTier], tiers: Sequence[Tier], refused: Sequence[TierInfo],
                 lock, wait_seconds: float = WAIT_SECONDS, claim_seconds: float = CLAIM_SECONDS,
                 listed: frozenset = frozenset(STAGES + ("fatbin",))):
        self.memory = dict(memory)
        self.listed = listed
        self.wait_seconds = wait_seconds  # the longest a build of another process is waited for
        self.claim_seconds = claim_seconds  # how long a claim lives unless renewed
        # stage -> tier -> (entries found after waiting for another process's build, seconds waited)
        self.waits: Dict[str, Dict[str, Tuple[int, float]]] = {s: {} for s in ALL_STAGES}
        self.tiers: List[Tier] = list(tiers)
        self.refused = list(refused)
        self.lock = lock
        self.counters = {s: StageCounters() for s in ALL_STAGES}
        self.tier_hits: Dict[str, Dict[str, Tuple[int, float]]] = {s: {} for s in ALL_STAGES}
        # (stage, token) -> why a tier refused its entry, until the stage is compiled again
        self._refusals: "OrderedDict[Tuple[str, str], str]" = OrderedDict()

    @classmethod
    def configured(cls, max_entries: Mapping[str, int], max_bytes: Mapping[str, Optional[int]], lock, *,
                   directory=None, max_disk_bytes: Optional[int], redis_url: Optional[str], keyring,
                   redis_prefix: Optional[str], redis_ttl, tiers: Sequence[Any] = (),
                   wait_seconds: float = WAIT_SECONDS, claim_seconds: float = CLAIM_SECONDS,
                   listed: frozenset = frozenset(STAGES + ("fatbin",))) -> "TieredStore":
        """The tiers `KernelCache`'s arguments ask for: a memory tier per stage
        (bounded per stage), a disk tier in `directory`, a shared Redis tier at
        `redis_url` (left out, with a `SecurityWarning`, where `keyring` lets
        it be unsigned), then `tiers` (tiers, or their names: `store.registry`)."""
        memory = {stage: MemoryTier(max_entries[stage], max_bytes[stage]) for stage in ALL_STAGES}
        built = TierSettings(keyring=keyring, directory=directory, max_disk_bytes=max_disk_bytes,
                             redis_url=redis_url or None, redis_prefix=redis_prefix, redis_ttl=redis_ttl)
        persistent, refused = build_tiers(DEFAULT_TIERS + tuple(tiers), built)
        return cls(memory, persistent, refused, lock, wait_seconds, claim_seconds, listed)

    # -- finding and filing ---------------------------------------------------
    def tiers_for(self, stage: str) -> List[Tier]:
        return [tier for tier in self.tiers if stage in tier.stages]

    def find(self, stage: str, token_hex: str, memory_only: bool = False, again: bool = False
             ) -> Tuple[Optional[Entry], Optional[str]]:
        """Search memory, then (unless `memory_only`) each persistent tier; a
        lower hit fills the tiers above.  A tier that held the entry and
        refused it (its signature) says why (`take_refusal`); `again`: a look
        after one that missed (waiting for another process's build), which
        counts no refusal a second time."""
        with self.lock:
            entry = self.memory[stage].get(token_hex)
        if entry is not None or memory_only:
            return entry, "memory" if entry is not None else None
        above = []
        for tier in self.tiers_for(stage):  # (no lock held: a tier may be a server)
            found = tier.lookup(stage, token_hex, query=again)
            if found.refused is not None and not again:
                with self.lock:
                    self._refusals[(stage, token_hex)] = f"{tier.name} entry refused: {found.refused}"
                    while len(self._refusals) > 256:
                        self._refusals.popitem(last=False)
            if found.entry is not None:
                with self.lock:
                    self.memory[stage].put(found.entry)
                for upper in above:
                    upper.put(stage, found.entry)
                return found.entry, tier.name
            above.append(tier)
        return None, None

    def lookup(self, stage: str, token: Token, cc, memory_only: bool = False, again: bool = False
               ) -> Tuple[Optional[Entry], Token, Optional[str]]:
        """Find `token`, or the variant of it that holds for target `cc`
        (`index.find_for_target`).  `memory_only`: what another thread of
        this process just built is there.  Returns (entry or None, effective
        token, tier it came from)."""
        return find_for_target(lambda token_hex: self.find(stage, token_hex, memory_only, again), token, cc)

    # -- single flight across processes (`gpucache_ext.store.claims`) ---------
    def claim_tier(self, stage: str) -> Optional[Tier]:
        """Where builds of `stage` are claimed: the widest persistent tier that
        keeps claims (the shared tier after the disk), None where none does."""
        keeping = [tier for tier in self.tiers_for(stage) if tier.keeps_claims]
        return keeping[-1] if keeping else None

    @contextlib.contextmanager
    def claimed(self, stage: str, token: Token, cc):
        """Claim the build of an entry every tier missed (see `claim`); the
        claim, if one is held, is released when the block ends: after the
        entry is filed, or when the build failed."""
        claim = self.claim(stage, token, cc)
        try:
            yield claim
        finally:
            if claim.renewal is not None:
                claim.renewal.release()

    def claim(self, stage: str, token: Token, cc) -> Claim:
        """Build here under a claim, or wait for the process that holds it
        and return the entry it files (a `Claim` with its entry), or build
        here without one (no tier keeps claims, waiting is off, the tier
        stopped answering, or the wait of `wait_seconds` ran out)."""
        tier = self.claim_tier(stage)
        if tier is None or self.wait_seconds <= 0:
            return Claim()
        owner, start, delay = new_owner(), time.monotonic(), 0.001
        while True:
            got = tier.claim(stage, token.hex, owner, self.claim_seconds)
            waited = time.monotonic() - start
            if got is None:  # (the tier keeps no claims now: build alone)
                return Claim(waited=waited)
            entry, effective, where = self.lookup(stage, token, cc, again=True)  # (filed meanwhile?)
            if entry is not None:
                if got:
                    tier.release_claim(stage, token.hex, owner)
                return self._waited(stage, Claim(entry, effective, where, time.monotonic() - start))
            if got:
                return Claim(renewal=Renewal(tier, stage, token.hex, owner, self.claim_seconds),
                             claimed_in=tier.name, waited=waited)
            if waited >= self.wait_seconds:
                return Claim(waited=waited, gave_up=True)
            time.sleep(min(delay, max(0.0, self.wait_seconds - waited)))
            delay = min(delay * 1.5, _POLL_MAX)

    def _waited(self, stage: str, claim: Claim) -> Claim:
        if claim.waited > 0 and claim.tier is not None:
            with self.lock:
                count, total = self.waits[stage].get(claim.tier, (0, 0.0))
                self.waits[stage][claim.tier] = (count + 1, total + claim.waited)
        return claim

    def put(self, stage: str, entry: Entry) -> None:
        with self.lock:
            self.memory[stage].put(entry)
        for tier in self.tiers_for(stage):
            tier.put(stage, entry)

    def take_refusal(self, stage: str, token_hex: str) -> Optional[str]:
        """Why a tier refused the entry under this token (once), or None."""
        with self.lock:
            return self._refusals.pop((stage, token_hex), None)

    def evict(self, stage: str, token: str) -> bool:
        """Remove one entry from every tier; True if it was anywhere (then it
        counts as an eviction)."""
        with self.lock:
            found = self.memory[stage].delete(token)
        for tier in self.tiers_for(stage):
            found = tier.delete(stage, token) or found
        if found:
            with self.lock:
                self.memory[stage].evictions += 1
        return found

    def clear(self, stages: Sequence[str], tiers: Optional[Sequence[str]] = None) -> None:
        """Drop the entries of `stages` in every tier, or in those named `tiers`."""
        for stage in stages:
            if tiers is None or "memory" in tiers:
                with self.lock:
                    self.memory[stage].clear()
            for tier in self.tiers_for(stage):
                if tiers is None or tier.name in tiers:
                    tier.clear(stage)

    # -- counting -------------------------------------------------------------
    def count(self, stage: str, hit: bool, tier: Optional[str] = None, saved: float = 0.0,
              cutoff: bool = False) -> None:
        with self.lock:
            counters = self.counters[stage]
            if hit:
                counters.hits += 1
                counters.cutoffs += cutoff
                counters.saved_seconds += saved
                if tier is not None:
                    count, total = self.tier_hits[stage].get(tier, (0, 0.0))
                    self.tier_hits[stage][tier] = (count + 1, total + saved)
            else:
                counters.misses += 1

    def not_needed(self, stage: str, saved: float = 0.0) -> None:
        """`stage` was skipped (typing, where llvm hit and the typed IR is
        not in memory): `saved`, what it took when the hit entry was built."""
        with self.lock:
            self.counters[stage].not_needed += 1
            self.counters[stage].saved_seconds += saved

    def compiled(self, stage: str, seconds: float) -> None:
        with self.lock:
            self.counters[stage].compile_seconds += seconds

    def audited(self, stage: str, mismatch: bool) -> None:
        with self.lock:
            self.counters[stage].audits += 1
            if mismatch:
                self.counters[stage].audit_mismatches += 1

    # -- what it holds ----------------------------------------------------------
    def stage_stats(self) -> Dict[str, StageStats]:
        """Per stage: its counters and, per tier, hits, saved seconds, entries
        and bytes (reading a shared tier's numbers asks its server)."""
        with self.lock:  # the counters and memory figures at one moment
            waited_for = {stage: dict(found) for stage, found in self.waits.items()}
            counted = {}
            for stage in ALL_STAGES:
                memory, counters = self.memory[stage], self.counters[stage]
                counted[stage] = (dict(self.tier_hits[stage]), StageStats(
                    hits=counters.hits, misses=counters.misses, not_needed=counters.not_needed,
                    cutoffs=counters.cutoffs,
                    entries=memory.artifact_count(), bytes=memory.bytes, evictions=memory.evictions,
                    compile_seconds=round(counters.compile_seconds, 6),
                    saved_seconds=round(counters.saved_seconds, 6), audits=counters.audits,
                    audit_mismatches=counters.audit_mismatches, tiers={}))
        result = {}
        for stage, (hits, stage_stats) in counted.items():
            tiers = {"memory": TierStats(hits.get("memory", (0, 0.0))[0],
                                         round(hits.get("memory", (0, 0.0))[1], 6), stage_stats.entries,
                                         stage_stats.bytes)}
            for tier in self.tiers_for(stage):
                count, saved = hits.get(tier.name, (0, 0.0))
                waits, waited = waited_for[stage].get(tier.name, (0, 0.0))
                held = tier.stats(stage)
                tiers[tier.name] = TierStats(count, round(saved, 6), int(held["entries"]),
                                             int(held["bytes"]), held.get("corrupt"), held.get("rejected"),
                                             held.get("rejected_by"), held.get("previous_secret"),
                                             held.get("unwritable"), waits or None,
                                             round(waited, 6) if waits else None)
            stats = result[stage] = dataclasses.replace(stage_stats, tiers=tiers)
            if stage not in self.listed and not (stats.hits or stats.misses or stats.not_needed or any(
                    each.entries for each in tiers.values())):
                del result[stage]  # (a stage of another backend's chain, never used here: numba-cuda-mlir's mlir)
        return result

    def lookups(self) -> Dict[str, Tuple[int, int, int]]:
        listed = self.listed
        with self.lock:
            return {stage: (c.hits, c.misses, c.not_needed) for stage, c in self.counters.items()
                    if stage in listed or c.hits or c.misses or c.not_needed}

    def tier_info(self) -> List[TierInfo]:
        """Each persistent tier (and each configured one left out): where it
        is, whether its entries are signed, and what it refused, by reason.
        Asks no server anything."""
        found = []
        for tier in self.tiers:
            signed = tier.signed
            rejected: Dict[str, int] = {}
            for counter in getattr(tier, "rejected", {}).values():
                for reason, count in counter.items():
                    rejected[reason] = rejected.get(reason, 0) + count
            notes = []
            if tier.name == "shared" and not signed:
                notes.append("whoever can write to the server can change these kernels "
                             "(GPUCACHE_SHARED_UNSIGNED); set GPUCACHE_SECRET (the same for everyone "
                             "who shares it) to sign its entries")
            if getattr(tier, "exposed", None):
                notes.append(f"other users can write here ({tier.exposed}); set GPUCACHE_SECRET to sign "
                             "its entries, or make the folder yours alone (chmod 700)")
            found.append(TierInfo(tier.name, tier.location, signed, True,
                                  "; ".join(notes), rejected,
                                  int(sum(getattr(tier, "previous", {}).values()))))
        return found + list(self.refused)

    def tier_names(self, tiers=None) -> Tuple[str, ...]:
        """The names of the tiers, "memory" first, in order; with `tiers` (a
        name or names), those of them, or a ValueError naming the tiers there are."""
        known = ("memory",) + tuple(dict.fromkeys(tier.name for tier in self.tiers))
        if tiers is None:
            return known
        given = (tiers,) if isinstance(tiers, str) else tuple(tiers)
        unknown = [name for name in given if name not in known]
        if unknown:
            raise ValueError(f"tiers={tiers!r} is invalid: this cache has no {', '.join(map(repr, unknown))} "
                             f"tier; its tiers are {', '.join(known)}")
        return tuple(name for name in known if name in given)

    def entries(self, stages: Sequence[str], kernel: Optional[str] = None) -> List[EntryInfo]:
        """One `EntryInfo` per artifact of `stages` (markers excluded), newest
        first, with the tiers holding it; of `kernel` alone where given (a
        qualified name or its last part)."""
        rows: Dict[Tuple[str, str], Dict[str, Any]] = {}
        for stage in stages:
            with self.lock:
                sources = [("memory", list(self.memory[stage].entries.values()))]
            sources += [(tier.name, tier.entries(stage)) for tier in self.tiers_for(stage)]
            for tier_name, entries in sources:
                for entry in entries:
                    if entry.is_marker or not _kernel_matches(entry.kernel, kernel):
                        continue
                    row = rows.setdefault((stage, entry.token), _entry_row(stage, entry))
                    if tier_name not in row["tiers"]:
                        row["tiers"].append(tier_name)
        infos = [EntryInfo(**{**row, "tiers": tuple(row["tiers"])}) for row in rows.values()]
        return sorted(infos, key=lambda info: info.created, reverse=True)


def _kernel_matches(qualname: str, wanted: Optional[str]) -> bool:
    return wanted is None or qualname == wanted or short_name(qualname) == wanted


def _entry_row(stage, entry: Entry) -> Dict[str, Any]:
    return {"stage": stage, "token": entry.token, "kernel": entry.kernel,
            "signature": entry.signature, "config": entry.config,
            "config_fields": dict(entry.config_fields or {}), "tiers": [],
            "bytes": entry.nbytes, "created": entry.created, "seconds": entry.seconds,
            "reasons": tuple(entry.reasons), "place": entry.place}
