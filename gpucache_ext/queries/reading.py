"""What the queries read of a cache: `CacheReader`, the two lookups of
`KernelCache`'s public API they ask (``entry``, ``entries``).

Declared here, below the cache, so that the queries are written against what
they read and not against `KernelCache`, which imports them (its miss
explanations and ``explain`` are theirs): a query can be given any object
that answers these two, and the cache's module can change without them.
"""

from __future__ import annotations

from typing import List, Optional, Protocol

from ..pipeline.results import EntryInfo
from ..store.tiers import Entry


class CacheReader(Protocol):
    def entries(self, stage: Optional[str] = None, kernel: Optional[str] = None) -> List[EntryInfo]:
        """One `EntryInfo` per artifact, newest first, filtered by `stage` and `kernel`."""

    def entry(self, stage: str, token: str) -> Optional[Entry]:
        """The entry for one token, from the first tier holding it, or None."""
