"""The views put together: ``%gpucache stats`` (`StatsView`) and the
inspector's static snapshot (`CacheSnapshot`, also the widget's fallback),
each as text and HTML."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .chart import chart_svg, chart_text
from .entries import entries_html, entries_text, kernel_labels
from .security import tier_security_html, tier_security_text
from .style import STYLE
from .summary import saved_seconds, summary_html, summary_text


def _tiers_of(stats) -> Tuple[Any, ...]:
    """The `TierInfo`s of a `CacheStats` (none for stats from elsewhere)."""
    return tuple(getattr(stats, "tiers", ()) or ())


class StatsView:
    """`%gpucache stats`: the inspector's per-stage and per-tier summary, with
    its units (KiB, ms) and labels, then the persistent tiers' security
    (`tier_security_text`), as text and as HTML."""

    def __init__(self, stats):
        self.stats = stats
        self.saved = saved_seconds(stats)

    def __repr__(self) -> str:
        tiers = tier_security_text(_tiers_of(self.stats))
        return summary_text(self.stats, self.saved) + (f"\n\n{tiers}" if tiers else "")

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        return STYLE + summary_html(self.stats, self.saved) + tier_security_html(_tiers_of(self.stats))

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        return {"text/plain": repr(self), "text/html": self._repr_html_()}


class CacheSnapshot:
    """The inspector's numbers at one moment, as plain text and static HTML."""

    def __init__(self, stats, points, entries, now: float,
                 labels: Optional[Dict[Tuple[str, str], str]] = None):
        self.stats = stats
        self.saved = saved_seconds(stats)
        self.points = list(points)
        self.entries = list(entries)
        self.time = now
        self.labels = labels if labels is not None else kernel_labels(self.entries)

    def text(self) -> str:
        tiers = tier_security_text(_tiers_of(self.stats))
        return "\n".join([
            "gpucache inspector",
            summary_text(self.stats, self.saved),
            *(["", tiers] if tiers else []),
            "",
            chart_text(self.points),
            "",
            entries_text(self.entries, self.time, labels=self.labels),
        ])

    def html(self) -> str:
        return "".join([
            STYLE,
            '<div class="gpucache-static">',
            "<h3>gpucache inspector</h3>",
            summary_html(self.stats, self.saved),
            tier_security_html(_tiers_of(self.stats)),
            "<h4>Hits and misses per cell</h4>",
            chart_svg(self.points),
            "<h4>Entries</h4>",
            entries_html(self.entries, self.time, labels=self.labels),
            '<p class="gpucache-muted">A static snapshot: in JupyterLab with ipywidgets this is a '
            "live inspector with entry details and actions.</p>",
            "</div>",
        ])

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.text())

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        return {"text/plain": self.text(), "text/html": self.html()}
