"""Cache tiers: where entries live.

An `Entry` is one stage's artifact under its token, with the token's
components (to explain later misses), the kernel and signature it belongs to,
and what compiling it took.  A marker entry holds no artifact: it says the
artifact is filed per target (see `targets`).

`MemoryTier` is a bounded LRU map per stage.  The persistent tiers (disk,
shared) share the `Tier` interface.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from ..errors import GpuCacheError
from ..keys import targets
from ..pipeline.definitions import Place
from .signing import PREVIOUS, Keyring, Rejected, key_id
from ..keys.tokens import Component

log = logging.getLogger(__name__)


@dataclass
class Entry:
    """One cached artifact (or a marker saying the artifact is per target)."""

    token: str
    kernel: str
    artifact: Any
    components: Dict[str, Component]
    nbytes: int
    seconds: float  # what compiling it took
    created: float = field(default_factory=time.time)
    signature: str = ""
    config: str = ""  # the config's summary
    reasons: tuple = ()  # why it was compiled (the miss explanation)
    config_fields: Optional[Dict[str, Any]] = None  # every field of the config it was built with
    # A marker: the artifact is filed per target, under these variants.
    variants: Optional[List[targets.TargetReads]] = None
    # The SHA-256 of the artifact's canonical bytes (`codec.content_digest`):
    # what the next stage's token hashes (early cutoff).  None for typing and markers.
    digest: Optional[str] = None
    # The token of the upstream entry it was first built from (for people and
    # tools that walk the chain; not part of any token)
    upstream: str = ""
    # Where the kernel was defined (`gpucache_ext.pipeline.definitions`: "cell:<id>",
    # "file:<path>"), None if unknown; with `kernel`, its definition (in no token)
    place: Optional[str] = None
    # An llvm entry's: what typing took for its build.  The typed IR lives in
    # memory alone, so a process that finds this entry on disk skips typing
    # too, and saves that time as well as lowering's (in no token)
    typing_seconds: float = 0.0
    # The number `place`'s cell ran as when the entry was built
    # (`definitions.Place.number`, which `place` carries too): stored, so that
    # a later process names the definition as the notebook shows the cell,
    # ``act@In[7]`` (in no token)
    place_number: Optional[int] = None
    # The tools its stage ran (`toolchain.stage_tools`: the stage's and its
    # backend's), whose versions its stored header names; () for its stage's
    # in numba-cuda's chain.  Read back from the header (in no token: the
    # token's "toolchain" component hashes their versions)
    tools: Tuple[str, ...] = ()

    def __post_init__(self):
        self.tools = tuple(sorted(self.tools))  # (as the header's keys read back)
        if self.place_number is None:
            self.place_number = getattr(self.place, "number", None)
        self.place = Place.of(self.place, self.place_number)
        self.place_number = getattr(self.place, "number", None)

    @property
    def is_marker(self) -> bool:
        return self.variants is not None


# What a stored entry's header holds of an `Entry`, each field under its own
# name (`codec`): the artifact travels as the payload, its size with it, the
# components and a marker's variants in their own encodings.  Fields added
# later may be missing in entries written before them: (name, default).
HEADER_FIELDS = (("token", None), ("kernel", None), ("signature", ""), ("config", ""), ("reasons", ()),
                 ("config_fields", None), ("created", None), ("seconds", 0.0), ("digest", None),
                 ("upstream", ""), ("place", None), ("typing_seconds", 0.0), ("place_number", None))


class Lookup(NamedTuple):
    """What a tier answered for one token: the entry (None: a miss) and, where
    it held an entry and refused it, why (``"unsigned"``, ``"bad signature"``...)."""

    entry: Optional[Entry]
    refused: Optional[str] = None


class MemoryTier:
    """A bounded LRU map from token to `Entry` for one stage."""

    name = "memory"

    def __init__(self, max_entries: int, max_bytes: Optional[int] = None):
        if max_entries < 1:
            raise ValueError(f"max_entries={max_entries!r} is invalid; use an int >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: "OrderedDict[str, Entry]" = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def get(self, token: str) -> Optional[Entry]:
        entry = self.entries.get(token)
        if entry is not None:
            self.entries.move_to_end(token)
        return entry

    def peek(self, token: str) -> Optional[Entry]:
        """The entry, leaving its place in the eviction order alone (a query)."""
        return self.entries.get(token)

    def put(self, entry: Entry) -> None:
        old = self.entries.pop(entry.token, None)
        if old is not None:
            self.bytes -= old.nbytes
        self.entries[entry.token] = entry
        self.bytes += entry.nbytes
        while len(self.entries) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self.entries) > 1
        ):
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= evicted.nbytes
            self.evictions += 1

    def delete(self, token: str) -> bool:
        entry = self.entries.pop(token, None)
        if entry is not None:
            self.bytes -= entry.nbytes
        return entry is not None

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def artifact_count(self) -> int:
        return sum(1 for e in self.entries.values() if not e.is_marker)


# why a tier dropped an entry, as the miss that follows says it
DROPPED = {"cleared": "cleared", "evicted": "evicted", "pruned": "pruned (over its size limit)",
           "damaged": "removed (damaged)"}


def seal_note(keyring, key: str, note: dict) -> bytes:
    """A note as a tier stores it: JSON naming its key, signed as an entry is."""
    return keyring.sign(json.dumps({"key": key, "note": note}, sort_keys=True).encode())


def open_note(keyring, key: str, data: Optional[bytes]) -> Optional[dict]:
    """The note in stored `data`, or None: absent, refused by the keyring, not
    JSON, or filed under another key (a note copied to another key says nothing)."""
    if data is None:
        return None
    try:
        body, _ = keyring.open(data)
        stored = json.loads(body)
    except Exception:  # (refused or damaged: as absent)
        log.info("a note under %s was refused or is damaged", key[:12], exc_info=True)
        return None
    if not isinstance(stored, dict) or stored.get("key") != key or not isinstance(stored.get("note"), dict):
        return None
    return stored["note"]


class TierRefused(GpuCacheError, ValueError):
    """A tier the settings configure that is not used, with why: `tier_info`
    shows it as refused (its `name`, `location` and `why`)."""

    def __init__(self, message: str, name: str, location: str, why: str):
        super().__init__(message)
        self.name, self.location, self.why = name, location, why


class Tier:
    """A persistent tier (disk, shared store): holds some stages' entries by token.

    Implementations never raise to the caller for a storage problem: a
    corrupt or unreadable entry is a miss, a failed write is dropped (with one
    warning), so compiling always goes on.
    """

    name: str = "tier"
    stages: Tuple[str, ...] = ()
    keyring = None  # a `gpucache_ext.store.signing.Keyring`: signs and checks entries

    # -- notes: small JSON records (a tuned choice), by key, signed as entries are
    def get_note(self, key: str) -> Optional[dict]:
        """The note filed under `key` (`put_note`), if this tier keeps notes and holds one it accepts."""
        return None

    def put_note(self, key: str, note: dict) -> None:
        """File `note` (JSON-able) under `key`; tiers that keep no notes drop it."""

    def dropped(self, stage: str, token: str) -> Optional[Tuple[str, float]]:
        """Why and when this tier dropped the entry `token` of `stage`
        (`DROPPED`: "cleared", "evicted", "pruned", "damaged"), if it keeps
        such a record and the entry was dropped; what explains the miss
        that follows, after a restart too."""
        return None

    # -- claims: single flight across processes (`gpucache_ext.store.claims`)
    keeps_claims = False

    def claim(self, stage: str, token: str, owner: str, seconds: float) -> Optional[bool]:
        """Claim the build of the entry `token` of `stage` for `owner`, for
        `seconds` unless renewed: True claimed, False another process holds
        it, None this tier keeps no claims now (none kept, or not answering)."""
        return None

    def renew_claim(self, stage: str, token: str, owner: str, seconds: float) -> bool:
        """Keep `owner`'s claim for `seconds` more; False where it is no longer its."""
        return False

    def release_claim(self, stage: str, token: str, owner: str) -> None:
        """Give up `owner`'s claim (nothing where it is no longer its)."""

    @property
    def claim_space(self) -> str:
        """What claims are kept under: the signing secret's id (or "unsigned"),
        so that jobs with different secrets never wait for each other."""
        if self.keyring is None or not self.keyring.signs:
            return "unsigned"
        return key_id(self.keyring.secrets[0]).hex()

    @property
    def signed(self) -> bool:
        """Entries are signed, and required to be."""
        return self.keyring is not None and self.keyring.signs

    # -- signing, for tiers that store bytes ---------------------------------
    def _sign_with(self, keyring: Keyring) -> None:
        """Sign and check this tier's entries with `keyring`, counting what it refuses."""
        self.keyring = keyring
        self.rejected: Dict[str, Counter] = {stage: Counter() for stage in self.stages}  # by reason
        self.previous: Counter = Counter()  # entries read that a retired secret signed

    def _unseal(self, stage: str, data: bytes, count: bool = True) -> Tuple[Optional[bytes], Optional[str]]:
        """(the entry inside stored `data`, None) or, where the keyring
        refuses it, (None, why): counted by reason unless `count` is False (a
        query); the caller leaves the stored bytes alone."""
        try:
            body, signed = self.keyring.open(data)
        except Rejected as refusal:
            if count:
                self.rejected[stage][refusal.reason] += 1
            return None, refusal.reason
        if signed == PREVIOUS and count:
            self.previous[stage] += 1
        return body, None

    def _signing_stats(self, stage: str) -> Dict[str, Any]:
        """What `stats` reports of the signatures met while reading `stage`."""
        return {"rejected": sum(self.rejected[stage].values()), "rejected_by": dict(self.rejected[stage]),
                "previous_secret": self.previous[stage]}

    def _classify(self, heads: Iterable[bytes]) -> Dict[str, int]:
        """How entries whose first bytes are `heads` are signed (see `Keyring.classify`)."""
        return dict(Counter(self.keyring.classify(head) for head in heads if head))

    @property
    def location(self) -> str:
        """Where the entries are, for people."""
        return self.name

    def get(self, stage: str, token: str) -> Optional[Entry]:
        raise NotImplementedError

    def lookup(self, stage: str, token: str, *, query: bool = False) -> Lookup:
        """`get`, saying why where the tier held an entry and refused it.
        With `query`, nothing changes: no eviction order is refreshed, no
        refusal counted (what `KernelCache.explain` and the inspector ask).
        Tiers that refuse nothing need not override it."""
        return Lookup(self.get(stage, token))

    def put(self, stage: str, entry: Entry) -> None:
        raise NotImplementedError

    def delete(self, stage: str, token: str) -> bool:
        raise NotImplementedError

    def clear(self, stage: str) -> None:
        raise NotImplementedError

    def entries(self, stage: str) -> Iterable[Entry]:
        """Every entry of `stage` (their artifacts may be left unloaded: None)."""
        raise NotImplementedError

    def stats(self, stage: str) -> Dict[str, int]:
        """{"entries": int, "bytes": int} for `stage`."""
        raise NotImplementedError
