"""Questions about what a `KernelCache` holds, one module per question.

Every query here only reads: it counts no lookup, fills no tier and records
no miss.  The miss explanations and `predict` are given the cache's
read-only `CacheIndex` (``cache.index``), the others its public API
(``entry``, ``entries``: `reading.CacheReader`, so that no query imports
the cache that imports them).  The cache itself, the inspector and the
``gpucache`` command ask them; none of them keeps a second copy.

- `gpucache_ext.queries.misses`: why an entry missed (`miss_reasons`,
  `explain_miss`, `nearest`, `predict`), what it was built from
  (`built_from`, `Sources`);
- `gpucache_ext.queries.resources`: what each cubin variant uses
  (`resource_rows`), its occupancy (`variant_occupancy`) and how the figures
  moved between variants (`resource_moves`);
- `gpucache_ext.queries.compare`: two entries' PTX or SASS side by side
  (`compare_entries`).
"""

from .compare import (COMPARED_STAGES, ComparedEntry, EntryComparison, comparable_entries, compare_artifacts,
                      compare_entries, find_entry)
from .misses import (Explanation, Sources, built_from, differing, explain_miss, miss_reasons, nearest,
                     nearest_entry, predict, reused_note, source_digest)
from .resources import (DEFAULT_BLOCKS, ResourceMove, ResourceRow, VariantOccupancy, describe_move, fatbin_rows,
                        resource_moves, resource_rows, variant_occupancy)

__all__ = [
    "COMPARED_STAGES", "ComparedEntry", "EntryComparison", "comparable_entries", "compare_artifacts",
    "compare_entries", "find_entry",
    "Explanation", "Sources", "built_from", "differing", "explain_miss", "miss_reasons", "nearest",
    "nearest_entry", "predict", "reused_note", "source_digest",
    "DEFAULT_BLOCKS", "ResourceMove", "ResourceRow", "VariantOccupancy", "describe_move", "fatbin_rows",
    "resource_moves", "resource_rows", "variant_occupancy",
]
