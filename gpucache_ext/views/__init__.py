"""Renderers: the cache's state as HTML, SVG and text, for the inspector,
the per-cell report and ``%gpucache stats``.  They import no ipywidgets (the
text report and the command use them without it; `gpucache_ext.widgets` is
the widget layer on top).

Pure functions of what they are given (stats, per-cell points, entries, one
entry's detail, a kernel's resources per variant and how they moved): they
read no cache, run no tool and hold no state, so the live widget (`gpucache_ext.widgets.inspector`), its static fallback
(`CacheSnapshot`) and ``%gpucache stats`` (`StatsView`) show the same
numbers in the same units.

Styling uses JupyterLab's CSS variables (with fallbacks), so the views follow
the light and dark themes; there are no scripts anywhere in the output.

One module per view: `summary` (per stage and tier), `security` (the
persistent tiers' signing), `chart` (hits and misses per cell), `entries`
(the list), `entry` (one entry), `variants` (resources across a kernel's
variants), `compare` (two entries side by side), `snapshot` (`StatsView`,
`CacheSnapshot`); `style` and `markup` are what they share.  Every view's
public names import from here too.
"""

from .chart import chart_stages, chart_svg, chart_text
from .compare import compare_options, comparison_html, comparison_note_html
from .entries import (ENTRY_COLUMNS, MAX_LIST_ROWS, entries_html, entries_text, entry_cells, entry_line, entry_widths,
                      kernel_labels)
from .entry import EntryDetail, artifacts_html, entry_html
from .markup import esc, short_kernel
from .security import (REASON_HELP, ROTATION_HELP, entries_phrase, refusals_text, tier_rows, tier_security_html,
                       tier_security_text, unsigned_warning)
from .snapshot import CacheSnapshot, StatsView
from .style import STYLE
from .summary import stages_used, saved_seconds, storage_summary, summary_html, summary_rows, summary_text
from .variants import (EARLIER, resource_moves_html, resource_moves_text, resource_variants_html,
                       resources_table_html, resources_table_text, stale_note)

__all__ = [
    "STYLE", "esc", "short_kernel",
    "stages_used", "saved_seconds", "storage_summary", "summary_html", "summary_rows", "summary_text",
    "REASON_HELP", "ROTATION_HELP", "entries_phrase", "refusals_text", "tier_rows", "tier_security_html",
    "tier_security_text", "unsigned_warning",
    "chart_stages", "chart_svg", "chart_text",
    "ENTRY_COLUMNS", "MAX_LIST_ROWS", "entries_html", "entries_text", "entry_cells", "entry_line", "entry_widths",
    "kernel_labels",
    "EntryDetail", "artifacts_html", "entry_html",
    "EARLIER", "resource_moves_html", "resource_moves_text", "resource_variants_html", "resources_table_html",
    "resources_table_text", "stale_note",
    "compare_options", "comparison_html", "comparison_note_html",
    "CacheSnapshot", "StatsView",
]
