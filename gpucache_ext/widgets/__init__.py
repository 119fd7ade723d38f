"""The cache inspector: the live widget (`inspector`, the controller) that
reads the cache and shows it through the pure renderers of `gpucache_ext.views`;
its "Clear stage" action is `clearing`.

``gpucache_ext.inspector()`` (what ``%gpucache`` shows) returns the widget;
``%gpucache stats`` shows `StatsView`.
"""

from .inspector import Inspector, sass_cache, entry_detail, inspector, sass_of, snapshot, stats_view  # noqa: F401
from ..views.entry import EntryDetail  # noqa: F401
from ..views.snapshot import CacheSnapshot, StatsView  # noqa: F401

__all__ = ["inspector", "Inspector", "CacheSnapshot", "StatsView", "EntryDetail", "entry_detail", "snapshot",
           "stats_view"]
