"""Where entries live beyond one process, and how they are kept safe.

`tiers` (the `Entry`, the memory tier and the persistent tiers' interface),
`codec` (entries as bytes: no pickle, nothing executable), `disk` (a folder,
across processes), `shared` (a Redis server, across machines), `signing`
(HMAC-SHA256 over every stored entry), `settings` (the ``GPUCACHE_*``
variables they read), `fsutil` (atomic file writes) and `tiered` (one
cache's tiers in order, and the counters of what they answered).  Imports nothing of
the compile pipeline above it (`cache`, `stages`) nor of launching.
"""
