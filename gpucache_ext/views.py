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
"""

from __future__ import annotations

import dataclasses
import html
import io
import logging
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import definitions
from .config import FIELD_STAGES, FOLLOW_FASTMATH, KEYED_ON_BYTES, LAYERS, STAGES, CompileConfig
from .units import format_age, format_bytes, format_seconds
from .results import parse_resources, short_signature
from .store.signing import REASONS
from .tokens import short_name, short_token

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# Styles (JupyterLab variables with fallbacks for other frontends)

STYLE = """<style>
.gpucache-inspector, .gpucache-static {
  color: var(--jp-ui-font-color1, #1f1f1f);
  background: var(--jp-layout-color1, #ffffff);
  font-family: var(--jp-ui-font-family, system-ui, -apple-system, "Segoe UI", sans-serif);
  font-size: var(--jp-ui-font-size1, 13px);
  border: 1px solid var(--jp-border-color2, #e0e0e0);
  border-radius: 4px; padding: 8px; box-sizing: border-box; max-width: 100%;
}
.gpucache-inspector h3, .gpucache-static h3 {
  font-size: var(--jp-ui-font-size2, 15px); margin: 2px 0 6px; font-weight: 600;
  color: var(--jp-ui-font-color0, #000000);
}
.gpucache-inspector h4, .gpucache-static h4 {
  font-size: var(--jp-ui-font-size1, 13px); margin: 10px 0 4px; font-weight: 600;
  color: var(--jp-ui-font-color0, #000000);
}
.gpucache-inspector .widget-html-content { line-height: 1.45; }  /* ipywidgets sets 28px */
.gpucache-muted { color: var(--jp-ui-font-color2, #616161); }
.gpucache-table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 2px 0 6px; }
.gpucache-table caption {
  text-align: left; caption-side: top; padding-bottom: 2px;
  color: var(--jp-ui-font-color2, #616161); font-size: 0.92em;
}
.gpucache-table th, .gpucache-table td {
  padding: 2px 8px; text-align: right; vertical-align: top;
  border-bottom: 1px solid var(--jp-border-color2, #e0e0e0);
}
.gpucache-table th:first-child, .gpucache-table td:first-child, .gpucache-table .gpucache-text {
  text-align: left;
}
.gpucache-table thead th {
  font-weight: 600; color: var(--jp-ui-font-color1, #1f1f1f);
  border-bottom: 1px solid var(--jp-border-color1, #bdbdbd);
}
.gpucache-table tbody th { font-weight: 600; }
.gpucache-left th, .gpucache-left td { text-align: left; }
.gpucache-wrap { word-break: break-all; }
.gpucache-tier th, .gpucache-tier td { color: var(--jp-ui-font-color2, #616161); font-weight: normal; }
.gpucache-tier th { padding-left: 20px; font-weight: normal !important; }
.gpucache-total th, .gpucache-total td { border-top: 1px solid var(--jp-border-color1, #bdbdbd); }
.gpucache-hit { color: var(--jp-success-color1, #2e7d32); }
.gpucache-miss { color: var(--jp-error-color1, #c62828); font-weight: 600; }
.gpucache-warn { color: var(--jp-warn-color1, #e65100); font-weight: 600; }
.gpucache-code, .gpucache-entries select, .gpucache-entries-head {
  font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: var(--jp-code-font-size, 12px);
}
.gpucache-entries-head {
  white-space: pre; padding: 0 5px; font-weight: 600;
  color: var(--jp-ui-font-color1, #1f1f1f);
}
/* The entries: the header and the listbox as wide as their longest line (a listbox
   cannot scroll sideways), in one box that scrolls sideways where they are wider. */
.gpucache-entries-scroll { overflow-x: auto !important; overflow-y: hidden !important; max-width: 100%; }
.gpucache-entries-scroll > .gpucache-entries-head-box, .gpucache-entries-scroll > .gpucache-entries {
  width: max-content !important; min-width: 100%; flex: 0 0 auto; margin-left: 0; margin-right: 0;
}
.gpucache-entries-scroll > .gpucache-entries select { width: max-content; min-width: 100%; flex: 1 0 auto; }
.gpucache-summary { overflow-x: auto; max-width: 100%; }  /* a narrow view scrolls the table */
.gpucache-summary-table th, .gpucache-summary-table td { padding: 2px 4px; }  /* 12 columns fit 1200 px */
.gpucache-summary-table td, .gpucache-summary-table tbody th { white-space: nowrap; }
.gpucache-inspector pre, .gpucache-static pre {
  font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: var(--jp-code-font-size, 12px);
  background: var(--jp-layout-color2, #eeeeee); color: var(--jp-content-font-color1, #000000);
  border: 1px solid var(--jp-border-color2, #e0e0e0);
  max-height: 22em; overflow: auto; padding: 6px; margin: 4px 0; white-space: pre;
  max-width: 100%; box-sizing: border-box;
}
/* An HTML widget's content is a flex item, as wide as its longest line by default (min-width: auto):
   a listing's long lines (SASS, PTX, a link log) would widen the entry view, its sections and the
   inspector.  At min-width 0 the view keeps the inspector's width and each listing scrolls in its box. */
.gpucache-entry-view > .widget-html-content { min-width: 0; }
.gpucache-inspector details > summary { cursor: pointer; margin: 2px 0; }
.gpucache-chips { white-space: nowrap; }
.gpucache-chip {
  display: inline-block; padding: 0 4px; margin: 0 2px 0 0; border-radius: 3px;
  border: 1px solid var(--jp-border-color2, #e0e0e0); color: var(--jp-ui-font-color2, #616161);
}
.gpucache-chip-on {
  border-color: var(--jp-brand-color1, #1976d2); color: var(--jp-ui-font-color0, #000000);
  font-weight: 600;
}
.gpucache-chart { display: block; max-width: 100%; height: auto; }
.gpucache-chart .gpucache-bar-hit { fill: var(--jp-success-color1, #2e7d32); }
.gpucache-chart .gpucache-bar-miss { fill: var(--jp-error-color1, #c62828); }
.gpucache-chart text { fill: var(--jp-ui-font-color1, #1f1f1f); font-size: 10px; }
.gpucache-chart .gpucache-axis { stroke: var(--jp-border-color1, #9e9e9e); stroke-width: 1; }
.gpucache-entry-grid { display: flex; flex-wrap: wrap; gap: 0 28px; align-items: flex-start; }
.gpucache-entry-grid > section { flex: 1 1 420px; min-width: 0; max-width: 100%; }
.gpucache-entry-grid > section.gpucache-wide { flex-basis: 100%; }
.gpucache-status { min-height: 1.4em; }
.gpucache-status-error { color: var(--jp-error-color1, #c62828); font-weight: 600; }
.gpucache-status-ok { color: var(--jp-ui-font-color1, #1f1f1f); }
.gpucache-tiers { overflow-x: auto; max-width: 100%; }  /* a narrow view scrolls the table */
.gpucache-tiers-table .gpucache-muted { font-weight: normal; }
.gpucache-tiers-table .gpucache-where { white-space: nowrap; }
/* Two entries' code side by side (the "compare with" view) */
.gpucache-compare-view { overflow-x: auto; max-width: 100%; }
.gpucache-variants { overflow-x: auto; max-width: 100%; }  /* a narrow view scrolls the variants' table */
/* figures stay whole ("9.3 KiB", "100% warps"); a config breaks between its fields only */
.gpucache-resource-variants th, .gpucache-resource-variants td { white-space: nowrap; }
.gpucache-resource-variants td.gpucache-text { white-space: normal; }
.gpucache-table-scroll { overflow-x: auto; max-width: 100%; }  /* a wide table scrolls in a narrow view */
/* two halves of one width; a long line wraps in its half */
.gpucache-side-by-side { table-layout: fixed; width: 100%; min-width: 720px; }
.gpucache-side-by-side td { white-space: pre-wrap; overflow-wrap: anywhere; padding: 0 6px; border-bottom: none; }
.gpucache-side-by-side col.gpucache-lineno { width: 3.5em; }
.gpucache-side-by-side col.gpucache-mark { width: 1.5em; }
.gpucache-side-by-side .gpucache-lineno { color: var(--jp-ui-font-color2, #616161); text-align: right; }
.gpucache-side-by-side .gpucache-mark { color: var(--jp-ui-font-color2, #616161); text-align: center; }
.gpucache-line-changed td { background: var(--jp-warn-color3, #fff3e0); }
.gpucache-line-left-only td { background: var(--jp-error-color3, #ffebee); }
.gpucache-line-right-only td { background: var(--jp-success-color3, #e8f5e9); }
.gpucache-line-gap td { color: var(--jp-ui-font-color2, #616161); text-align: center; }
</style>"""

_TOKEN_SHORT = 8
MAX_LIST_ROWS = 500
_MAX_STATIC_ROWS = 40
_MAX_ARTIFACT_CHARS = 200_000
_MAX_DIFF_ROWS = 2000
_CHART_POINTS = 30
_CHART_LABEL_CHARS = 12  # a cell label under the chart (whole in the column's tooltip)
_CHART_CHAR_PX = 7.0  # a character of the chart's 10px text, at most (DejaVu Sans digits: 6.4)
_CHART_LABEL_GAP = 6


# ---------------------------------------------------------------------------
# Small formatters


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _rate(hits: int, misses: int) -> str:
    total = hits + misses
    return f"{100.0 * hits / total:.0f}%" if total else "-"




short_kernel = short_name


def _fit(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


def _text_width(text: str) -> float:
    """An upper bound on the width of `text` in the chart's 10px font, in px."""
    return len(str(text)) * _CHART_CHAR_PX


def layers_used(stats) -> Tuple[str, ...]:
    """The layers the summary shows: the four stages, and the fatbin layer
    once something looked it up or it holds entries (in any tier)."""
    fatbin = stats.get("fatbin", {})
    used = fatbin and (fatbin.get("hits", 0) or fatbin.get("misses", 0) or any(
        t.get("entries", 0) for t in fatbin.get("tiers", {}).values()))
    return LAYERS if used else STAGES


def chart_layers(points) -> Tuple[str, ...]:
    """The chart's rows: the four stages, and the fatbin layer where a cell looked it up."""
    return LAYERS if any(any(p["stages"].get("fatbin", (0, 0))) for p in points) else STAGES


def saved_seconds(stats) -> Dict[str, Dict[str, float]]:
    """Compile time saved by hits, per stage and tier: ``{stage: {"total": s, tier: s}}``."""
    result = {}
    for stage in LAYERS:
        values = stats.get(stage, {})
        per_tier = {name: float(t.get("saved_seconds", 0.0)) for name, t in values.get("tiers", {}).items()}
        result[stage] = {"total": float(values.get("saved_seconds", 0.0)), **per_tier}
    return result



def _effective(values: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return CompileConfig(**values).normalised()
    except Exception:
        log.debug("a config from an older entry is shown as stored", exc_info=True)
        return dict(values)



# ---------------------------------------------------------------------------
# HTML and text pieces, shared by the widget and the static fallback


_SUMMARY_COLUMNS = (
    ("hits", "hits"), ("misses", "misses"), ("hit_rate", "hit rate"), ("cutoffs", "cut off"),
    ("entries", "entries"), ("bytes", "bytes"), ("evictions", "evictions"),
    ("compile_seconds", "compile time spent"), ("saved_seconds", "compile time saved"), ("audits", "audited"),
    ("audit_mismatches", "audit mismatches"),
)


def _cell(stage: str, field: str, value: Any, shown: str, tier: Optional[str] = None,
          cls: str = "") -> str:
    attrs = f' data-stage="{esc(stage)}" data-field="{field}" data-value="{esc(value)}"'
    if tier is not None:
        attrs += f' data-tier="{esc(tier)}"'
    if cls:
        attrs += f' class="{cls}"'
    return f"<td{attrs}>{esc(shown)}</td>"


def storage_summary(stats) -> str:
    """What every tier holds, all stages together: "12.3 KiB in memory, 45.6 KiB on disk"."""
    parts = []
    for name in stats.tier_names():  # (KernelCache.stats always lists the memory tier)
        held = sum(int(stats.get(s, {}).get("tiers", {}).get(name, {}).get("bytes", 0)) for s in LAYERS)
        where = {"memory": "in memory", "disk": "on disk"}.get(name, f"in the {name} tier")
        parts.append(f"{format_bytes(held)} {where}")
    return ", ".join(parts)


def summary_rows(stats, saved) -> List[Dict[str, Any]]:
    """One dict per stage (then per tier, then a total): the numbers the summary shows."""
    rows = []
    tiers = stats.tier_names()
    totals = dict.fromkeys(("hits", "misses", "cutoffs", "entries", "bytes", "evictions", "audits",
                            "audit_mismatches"), 0)
    totals.update(compile_seconds=0.0, saved_seconds=0.0)
    for stage in layers_used(stats):
        s = stats.get(stage, {})
        row = {"stage": stage, "tier": None, "hits": int(s.get("hits", 0)),
               "misses": int(s.get("misses", 0)), "entries": int(s.get("entries", 0)),
               "bytes": int(s.get("bytes", 0)), "evictions": int(s.get("evictions", 0)),
               "compile_seconds": float(s.get("compile_seconds", 0.0)),
               "saved_seconds": float(saved.get(stage, {}).get("total", 0.0)),
               "audits": int(s.get("audits", 0)), "audit_mismatches": int(s.get("audit_mismatches", 0))}
        row["hit_rate"] = _rate(row["hits"], row["misses"])
        cutoffs = int(s.get("cutoffs", 0) or 0)
        row["cutoffs"] = cutoffs if stage in KEYED_ON_BYTES or cutoffs else None
        rows.append(row)
        for key in totals:
            totals[key] += row[key] or 0
        lookups = row["hits"] + row["misses"]
        for name in tiers:
            t = s.get("tiers", {}).get(name)
            if t is None:
                continue
            hits = int(t.get("hits", 0))
            rows.append({"stage": stage, "tier": name, "hits": hits, "misses": None,
                         "hit_rate": f"{100.0 * hits / lookups:.0f}%" if lookups else "-", "cutoffs": None,
                         "entries": int(t.get("entries", 0)), "bytes": int(t.get("bytes", 0)),
                         "evictions": None, "compile_seconds": None,
                         "saved_seconds": float(saved.get(stage, {}).get(name, 0.0)),
                         "audits": None, "audit_mismatches": None})
    total = {"stage": "all", "tier": None, **totals}
    total["hit_rate"] = _rate(total["hits"], total["misses"])
    rows.append(total)
    return rows


def _shown(field: str, value: Any) -> str:
    if value is None:
        return ""
    if field == "bytes":
        return format_bytes(value)
    if field in ("compile_seconds", "saved_seconds"):
        return format_seconds(value)
    return str(value)


def summary_html(stats, saved) -> str:
    head = "<th scope=\"col\">stage</th>" + "".join(
        f"<th scope=\"col\">{esc(title)}</th>" for _, title in _SUMMARY_COLUMNS)
    body = []
    for row in summary_rows(stats, saved):
        stage, tier = row["stage"], row["tier"]
        if tier is None:
            cls = "gpucache-total" if stage == "all" else "gpucache-stage"
            title = "all stages" if stage == "all" else stage
        else:
            cls, title = "gpucache-tier", f"\u21b3 {tier}"
        cells = []
        for field, _ in _SUMMARY_COLUMNS:
            value = row[field]
            if value is None:
                cells.append("<td></td>")
                continue
            mark = ""
            if field in ("misses", "audit_mismatches") and value and tier is None:
                mark = "gpucache-miss"
            elif field in ("hits", "cutoffs") and value and tier is None:
                mark = "gpucache-hit"
            cells.append(_cell(stage, field, value, _shown(field, value), tier, mark))
        tier_attr = f' data-tier="{esc(tier)}"' if tier else ""
        body.append(f'<tr class="{cls}" data-stage="{esc(stage)}"{tier_attr}>'
                    f'<th scope="row">{esc(title)}</th>{"".join(cells)}</tr>')
    caption = ("Per stage: lookups that hit and missed, the hits cut off (ptx and cubin found because "
               "the stage before was rebuilt to the same bytes: the cell report's \u201chit (same "
               "bytes)\u201d), what is cached in memory, compile time spent (misses) and saved (hits), "
               "and artifacts audited against a fresh compile (mismatches are soundness bugs); the "
               "indented rows give each tier's hits, entries, bytes and saved time.")
    return (f'<table class="gpucache-table gpucache-summary-table"><caption>{caption}</caption>'
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


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


def summary_text(stats, saved) -> str:
    columns = ["stage"] + [title for _, title in _SUMMARY_COLUMNS]
    lines = []
    for row in summary_rows(stats, saved):
        title = row["stage"] if row["tier"] is None else f"  {row['tier']}"
        if row["stage"] == "all":
            title = "all"
        lines.append([title] + [_shown(f, row[f]) for f, _ in _SUMMARY_COLUMNS])
    widths = [max(len(columns[i]), *(len(line[i]) for line in lines)) for i in range(len(columns))]

    def fmt(cells):
        return "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    return "\n".join([fmt(columns)] + [fmt(line) for line in lines])


# -- the persistent tiers: where, whether signed, what they refused ----------

# what each refusal reason (gpucache_ext.store.signing.REASONS) means, for people
REASON_HELP = {
    "bad signature": "changed since it was signed: tampered with, or damaged",
    "unsigned": "no signature, and this cache requires one",
    "other secret": "signed with a secret this cache does not hold: a retired one, or another team's",
}


def _rotation_help(command: str) -> str:
    return f"rotation in progress ({command} signs them again with GPUCACHE_SECRET)"


# what entries read signed by a previous secret mean, and what to do
ROTATION_HELP = _rotation_help("`gpucache verify --fix`")


def _tiers_of(stats) -> Tuple[Any, ...]:
    """The `TierInfo`s of a `CacheStats` (none for stats from elsewhere)."""
    return tuple(getattr(stats, "tiers", ()) or ())


def entries_phrase(count: int) -> str:
    """"1 entry", "3 entries"."""
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def unsigned_warning(info) -> bool:
    """True for a tier in use whose entries are not signed although its note
    says why that matters (a shared tier, a folder others can write to); an
    unsigned private folder is not one."""
    return bool(info.used and not info.signed and info.note)


def _ordered(rejected) -> List[Tuple[str, int]]:
    """Refusals by reason, in `REASONS` order (then any others), none empty."""
    known = [(reason, int(rejected[reason])) for reason in REASONS if rejected.get(reason)]
    return known + [(reason, int(count)) for reason, count in sorted(rejected.items())
                    if reason not in REASONS and count]


def refusals_text(rejected) -> str:
    """`rejected` ({reason: count}) for people: "3 other secret (signed with a
    secret this cache does not hold: ...), 1 bad signature (...)"."""
    return ", ".join(f"{count} {reason}" + (f" ({REASON_HELP[reason]})" if reason in REASON_HELP else "")
                     for reason, count in _ordered(rejected))


def tier_rows(tiers) -> List[Dict[str, Any]]:
    """One dict per persistent tier (`KernelCache.tier_info`, `CacheStats.tiers`):
    tier, location, state ("signed", "unsigned", "not used"), shown (the state
    as reported: "UNSIGNED" where `unsigned_warning`), note (what to know and
    do), warn, rejected ({reason: count}),
    refused (their total) and previous_secret (entries read that a retired
    secret signed)."""
    rows = []
    for info in tiers:
        state, note = info.state, info.note or ""
        warn = state == "not used" or unsigned_warning(info)
        rejected = dict(_ordered(info.rejected or {}))
        rows.append({"tier": info.name, "location": info.location, "state": state,
                     "shown": "UNSIGNED" if warn and state == "unsigned" else state, "note": note,
                     "warn": warn, "rejected": rejected, "refused": sum(rejected.values()),
                     "previous_secret": int(info.previous_secret or 0)})
    return rows


def _tier_details(row: Dict[str, Any]) -> List[str]:
    """What a tier refused, and read signed by a previous secret, as lines."""
    lines = []
    if row["refused"]:
        lines.append(f"refused {entries_phrase(row['refused'])}: {refusals_text(row['rejected'])}")
    if row["previous_secret"]:
        lines.append(f"read {entries_phrase(row['previous_secret'])} signed by a previous secret: {ROTATION_HELP}")
    return lines


def tier_security_text(tiers) -> str:
    """The persistent tiers, a line each (where, and whether their entries are
    signed), then what each refused; "" without persistent tiers."""
    rows = tier_rows(tiers)
    if not rows:
        return ""
    name_width = max(len(row["tier"]) for row in rows)
    where_width = max(len(row["location"]) for row in rows)
    lines = ["persistent tiers"]
    for row in rows:
        state = row["shown"] + (f": {row['note']}" if row["note"] else "")
        lines.append(f"  {row['tier'].ljust(name_width)}  {row['location'].ljust(where_width)}  {state}")
        lines += [" " * (name_width + 4) + line for line in _tier_details(row)]
    return "\n".join(lines)


def _class(cls: str) -> str:
    return f' class="{cls}"' if cls else ""


def tier_security_html(tiers) -> str:
    """`tier_security_text` as a table; each value in a ``data-tier-field``
    cell's ``data-value`` (state, rejected, previous_secret); "" without
    persistent tiers."""
    rows = tier_rows(tiers)
    if not rows:
        return ""
    body = []
    for row in rows:
        state_class = "gpucache-warn" if row["warn"] else "gpucache-hit" if row["state"] == "signed" else ""
        note = f'<div class="gpucache-muted">{esc(row["note"])}</div>' if row["note"] else ""
        reasons = "".join(
            f'<div data-reason="{esc(reason)}" data-count="{count}">{count} {esc(reason)}'
            + (f' <span class="gpucache-muted">({esc(REASON_HELP[reason])})</span>' if reason in REASON_HELP
               else "") + "</div>"
            for reason, count in row["rejected"].items())
        previous = row["previous_secret"]
        command = '<span class="gpucache-code">gpucache verify --fix</span>'
        rotation = (f'{esc(entries_phrase(previous))}<div class="gpucache-muted">{_rotation_help(command)}</div>'
                    if previous else "none")
        body.append(
            f'<tr data-tier="{esc(row["tier"])}"><th scope="row">{esc(row["tier"])}</th>'
            f'<td class="gpucache-code gpucache-where">{esc(row["location"])}</td>'
            f'<td data-tier-field="state" data-value="{esc(row["state"])}"{_class(state_class)}>'
            f'{esc(row["shown"])}{note}</td>'
            f'<td data-tier-field="rejected" data-value="{row["refused"]}"'
            f'{_class("gpucache-miss" if row["refused"] else "")}>{reasons or "none"}</td>'
            f'<td data-tier-field="previous_secret" data-value="{previous}"'
            f'{_class("gpucache-warn" if previous else "")}>{rotation}</td></tr>')
    caption = ("Persistent tiers: where the entries are, whether they are signed (and required to be), "
               "the entries refused for their signature, and those read that a previous secret signed, "
               "since the cache was made.")
    head = "".join(f'<th scope="col">{title}</th>'
                   for title in ("tier", "where", "signing", "refused", "signed by a previous secret"))
    return (f'<table class="gpucache-table gpucache-left gpucache-tiers-table"><caption>{caption}</caption>'
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def chart_svg(points: List[Dict[str, Any]]) -> str:
    """Hits (up, green) and misses (down, red) per stage, one column per cell."""
    points = points[-_CHART_POINTS:]
    if not points:
        return ('<p class="gpucache-muted gpucache-chart-empty">No cell has used the cache yet: '
                'the chart of hits and misses per cell appears after the first compile.</p>')
    left, top, row_h, half, bottom = 56, 22, 40, 16, 22
    col = max(10, min(28, int(560 / max(1, len(points)))))
    bar = max(4, col - 4)
    # the cell labels under the columns: every `step`-th, counted back from the last (always
    # labelled), so that no two meet; the chart is wide enough for the last one's right half
    labels = [_fit(p["label"], _CHART_LABEL_CHARS) for p in points]
    label_w = max(_text_width(label) for label in labels) + _CHART_LABEL_GAP
    step = max(1, math.ceil(label_w / col))
    width = max(320, left + col * len(points) + max(8, math.ceil(label_w / 2 - col / 2)))
    layers = chart_layers(points)
    height = top + row_h * len(layers) + bottom
    peak = max(1, max(max(h, m) for p in points for h, m in p["stages"].values()))
    totals = {s: (sum(p["stages"].get(s, (0, 0))[0] for p in points),
                  sum(p["stages"].get(s, (0, 0))[1] for p in points)) for s in layers}
    desc = "; ".join(f"{s}: {h} hits, {m} misses" for s, (h, m) in totals.items())
    misses_x = 14 + math.ceil(_text_width("hits (up)")) + 12
    parts = [
        f'<svg class="gpucache-chart" role="img" aria-labelledby="gpucache-chart-title gpucache-chart-desc" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<title id="gpucache-chart-title">Hits and misses per stage over the last {len(points)} '
        f'cells that used the cache</title>',
        f'<desc id="gpucache-chart-desc">{esc(desc)}</desc>',
        '<rect class="gpucache-bar-hit" fill="#2e7d32" x="0" y="4" width="10" height="10"/>',
        '<text x="14" y="13">hits (up)</text>',
        f'<rect class="gpucache-bar-miss" fill="#c62828" x="{misses_x}" y="4" width="10" height="10"/>',
        f'<text x="{misses_x + 14}" y="13">misses (down)</text>',
    ]
    for r, stage in enumerate(layers):
        base = top + r * row_h + row_h // 2
        parts.append(f'<text x="0" y="{base + 4}">{stage}</text>')
        parts.append(f'<line class="gpucache-axis" stroke="#9e9e9e" x1="{left - 4}" '
                     f'y1="{base}" x2="{width - 4}" y2="{base}"/>')
        for i, point in enumerate(points):
            hits, misses = point["stages"].get(stage, (0, 0))
            x = left + i * col + (col - bar) // 2
            label = f"cell {point['label']}, {stage}: {hits} hits, {misses} misses"
            parts.append(f'<g data-stage="{stage}" data-cell="{esc(point["label"])}" '
                         f'data-hits="{hits}" data-misses="{misses}"><title>{esc(label)}</title>')
            if hits:
                h = max(2, round(half * hits / peak))
                parts.append(f'<rect class="gpucache-bar-hit" fill="#2e7d32" x="{x}" y="{base - h}" '
                             f'width="{bar}" height="{h}"/>')
            if misses:
                h = max(2, round(half * misses / peak))
                parts.append(f'<rect class="gpucache-bar-miss" fill="#c62828" x="{x}" y="{base + 1}" '
                             f'width="{bar}" height="{h}"/>')
            parts.append("</g>")
    y = height - 6
    for i, label in enumerate(labels):
        if (len(labels) - 1 - i) % step == 0:
            x = left + i * col + col // 2
            parts.append(f'<text x="{x}" y="{y}" text-anchor="middle">{esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def chart_text(points: List[Dict[str, Any]], limit: int = 12) -> str:
    points = points[-limit:]
    if not points:
        return "hits/misses per cell: no cell has used the cache yet"
    labels = [str(p["label"]) for p in points]
    layers = chart_layers(points)
    cells = [[f"{p['stages'].get(s, (0, 0))[0]}/{p['stages'].get(s, (0, 0))[1]}" for p in points]
             for s in layers]
    widths = [max(len(labels[i]), *(len(c[i]) for c in cells)) for i in range(len(points))]
    lines = ["hits/misses per cell".ljust(8)]
    lines.append("cell    " + "  ".join(lab.rjust(w) for lab, w in zip(labels, widths)))
    for stage, row in zip(layers, cells):
        lines.append(f"{stage:<8}" + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)


# What tells rows apart first (kernel, stage, token, config), so that a narrow view shows
# it without scrolling; the free text ("why built", whole in the entry view) last.
ENTRY_COLUMNS = ("kernel", "stage", "token", "config", "signature", "tier", "size", "age", "why built")
_ENTRY_WIDTHS = {"kernel": 18, "signature": 46, "config": 22, "stage": 6, "token": _TOKEN_SHORT,
                 "tier": 14, "size": 9, "age": 4, "why built": 40}
_RIGHT = ("size", "age")


def _distinct_tail(qualname: str, others) -> str:
    """The shortest dotted tail of `qualname` that no other name of `others` ends with."""
    parts = qualname.split(".")
    for k in range(1, len(parts) + 1):
        tail = parts[-k:]
        if not any(o != qualname and o.split(".")[-k:] == tail for o in others):
            return ".".join(tail)
    return qualname


def kernel_labels(rows) -> Dict[Tuple[str, str], str]:
    """The entries list's kernel column, per row's (stage, token): the
    kernel's definition.

    The short name, told apart only where two definitions share it: by the
    shortest tail of their qualified names that differs (``a.axpy``,
    ``b.axpy``), and where one qualified name was defined in two places
    (``axpy`` in two cells: the magic names both ``__main__.axpy``) by ``@``
    and where (`gpucache_ext.definitions.describe`): ``axpy@In[5]``,
    ``axpy@cell 1a2b3c4d`` (a cell not run since the restart),
    ``axpy@kernels.py``.  A definition's versions (edits to it or to what it
    calls or reads, signatures, configs) all keep its one label."""
    qualnames: Dict[str, set] = {}
    places: Dict[str, set] = {}
    for row in rows:
        qualnames.setdefault(short_kernel(row["kernel"]), set()).add(row["kernel"])
        places.setdefault(row["kernel"], set()).add(row.get("place"))
    labels = {}
    for row in rows:
        kernel = row["kernel"]
        same = qualnames[short_kernel(kernel)]
        name = short_kernel(kernel) if len(same) == 1 else _distinct_tail(kernel, same)
        if len(places[kernel]) > 1:
            name += "@" + definitions.describe(row.get("place"))
        labels[(row["stage"], row["token"])] = name
    return labels


def _fit_kernel(text: str, width: int) -> str:
    """`_fit` that keeps an ``@place`` suffix whole (it is what tells two rows apart)."""
    name, mark, place = text.rpartition("@")
    if not mark or len(text) <= width or len(place) + 2 > width:
        return _fit(text, width)
    return _fit(name, width - len(place) - 1) + "@" + place


def entry_cells(row: Dict[str, Any], now: float, kernel: Optional[str] = None) -> Dict[str, str]:
    """One row's columns as text; `kernel`: its label (`kernel_labels`), else the short name."""
    return {
        "kernel": kernel if kernel is not None else short_kernel(row["kernel"]),
        "signature": row.get("signature", ""),
        "config": row.get("config", ""),
        "stage": row["stage"],
        "token": row["token"][:_TOKEN_SHORT],
        "tier": ",".join(row.get("tiers", ())),
        "size": format_bytes(row.get("bytes", 0)),
        "age": format_age(now - row.get("created", now)),
        "why built": "; ".join(row.get("reasons", ())),
    }


def entry_widths(cells: List[Dict[str, str]]) -> Dict[str, int]:
    """Each column's width: its widest cell (or title), up to the column's
    cap; the config column has none (see `entry_line`)."""
    widths = {c: max([len(c)] + [len(r[c]) for r in cells]) for c in ENTRY_COLUMNS}
    return {c: w if c == "config" else min(_ENTRY_WIDTHS[c], w) for c, w in widths.items()}


def entry_line(cells: Dict[str, str], widths: Dict[str, int]) -> str:
    """One row of the entries list, its columns padded to `widths`.  The
    config is never cut: sm and every field away from its default are what
    tell a kernel's variants apart, so it is shown whole (the list scrolls
    sideways); the other columns are cut to their widths."""
    parts = []
    for column in ENTRY_COLUMNS:
        text = cells[column] if column == "config" else (_fit_kernel if column == "kernel" else _fit)(
            cells[column], widths[column])
        parts.append(text.rjust(widths[column]) if column in _RIGHT else text.ljust(widths[column]))
    return "  ".join(parts).rstrip()


def entries_text(rows: List[Dict[str, Any]], now: float, limit: int = 20,
                 labels: Optional[Dict[Tuple[str, str], str]] = None) -> str:
    if not rows:
        return "entries: none cached"
    labels = labels or {}
    cells = [entry_cells(r, now, labels.get((r["stage"], r["token"]))) for r in rows[:limit]]
    widths = entry_widths(cells)
    lines = [entry_line({c: c for c in ENTRY_COLUMNS}, widths)]
    lines += [entry_line(c, widths) for c in cells]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return "\n".join(lines)


def entries_html(rows: List[Dict[str, Any]], now: float, limit: int = _MAX_STATIC_ROWS,
                 labels: Optional[Dict[Tuple[str, str], str]] = None) -> str:
    if not rows:
        return '<p class="gpucache-muted">No entries are cached.</p>'
    labels = labels or {}
    head = "".join(f'<th scope="col">{esc(c)}</th>' for c in ENTRY_COLUMNS)
    body = []
    for row in rows[:limit]:
        cells = entry_cells(row, now, labels.get((row["stage"], row["token"])))
        tds = []
        for column in ENTRY_COLUMNS:
            cls = "gpucache-text" if column not in _RIGHT else ""
            if column in ("token", "signature"):
                cls += " gpucache-code"
            tds.append(f'<td class="{cls.strip()}">{esc(cells[column])}</td>')
        body.append(f'<tr data-stage="{esc(row["stage"])}" data-token="{esc(row["token"])}">'
                    + "".join(tds) + "</tr>")
    more = (f'<p class="gpucache-muted">... and {len(rows) - limit} more</p>'
            if len(rows) > limit else "")
    return (f'<table class="gpucache-table gpucache-entries-table"><caption>Cached entries, '
            f'newest first</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f"</table>{more}")


# -- one entry ---------------------------------------------------------------


def _pre(text: str, label: str) -> str:
    text = text or ""
    more = ""
    if len(text) > _MAX_ARTIFACT_CHARS:
        more = f"\n... ({len(text) - _MAX_ARTIFACT_CHARS} more characters)"
        text = text[:_MAX_ARTIFACT_CHARS]
    lines = text.count("\n") + 1 if text else 0
    return (f"<details><summary>{esc(label)} ({lines} lines)</summary>"
            f'<pre aria-label="{esc(label)}">{esc(text + more)}</pre></details>')


def _typed_ir_text(artifact) -> str:
    state = getattr(artifact, "state", {}) or {}
    lines = []
    args = state.get("args")
    if args is not None:
        lines.append("arguments: " + short_signature(args)[1:-1])
    if state.get("return_type") is not None:
        lines.append(f"returns:   {state['return_type']}")
    typemap = state.get("typemap") or {}
    if typemap:
        lines.append("")
        lines.append("variable types:")
        for name in sorted(typemap, key=str):
            lines.append(f"  {name}: {typemap[name]}")
    func_ir = state.get("func_ir")
    if func_ir is not None:
        buffer = io.StringIO()
        try:
            func_ir.dump(file=buffer)
            lines += ["", "typed IR:", buffer.getvalue()]
        except Exception:  # numba's IR dump is best effort
            log.debug("numba could not dump the typed IR", exc_info=True)
    return "\n".join(lines)


def artifacts_html(stage: str, entry, sass: Optional[str] = None, sass_note: Optional[str] = None,
                   sass_label: Optional[str] = None) -> str:
    """The entry's artifacts; for a cubin, `sass` (its SASS, headed `sass_label`:
    "SASS sm_86 (nvdisasm 13.5)") or `sass_note` (why there is none)."""
    artifact = entry.artifact
    if artifact is None:
        return '<p class="gpucache-muted">The artifact is not loaded (it lives in a persistent tier).</p>'
    parts = []
    if stage == "typing":
        parts.append(_pre(_typed_ir_text(artifact), "typed IR"))
    elif stage == "llvm":
        parts.append(_pre(getattr(artifact, "text", ""), "NVVM IR (LLVM)"))
    elif stage == "ptx":
        ptx = tuple(getattr(artifact, "ptx", ()) or ())
        if ptx:
            parts.append(_pre("\n".join(ptx), "PTX"))
        ltoir = getattr(artifact, "ltoir", None)
        if ltoir is not None:
            parts.append(f'<p>LTO-IR: {esc(format_bytes(len(ltoir)))} (binary; the PTX after link-time '
                         'optimisation is in the cubin entries built from it)</p>')
    elif stage == "cubin":
        cubin = getattr(artifact, "cubin", b"") or b""
        if sass is not None:
            parts.append(_pre(sass, sass_label or "SASS (nvdisasm)"))
        else:
            parts.append(f'<p class="gpucache-muted gpucache-sass-note">{esc(sass_note or "")}</p>')
        if getattr(artifact, "linked_ptx", None):
            parts.append(_pre(artifact.linked_ptx, "PTX after link-time optimisation"))
        parts.append(_pre(getattr(artifact, "info_log", ""), "link log (nvJitLink)"))
        parts.append(f'<p class="gpucache-muted gpucache-wrap">cubin: {esc(format_bytes(len(cubin)))}, '
                     f'entry {esc(getattr(artifact, "entry_name", ""))}</p>')
    elif stage == "fatbin":
        items = "".join(f'<tr><th scope="row">{esc(m.name)}</th><td>{esc(m.kind)}</td>'
                        f'<td>{esc(format_bytes(m.nbytes))}</td>'
                        f'<td class="gpucache-code">{esc(short_token(m.token))}</td></tr>'
                        for m in getattr(artifact, "members", ()))
        parts.append('<table class="gpucache-table gpucache-fatbin-members"><caption>What the fatbin holds (the '
                     'driver loads the cubin of the GPU\'s architecture, else compiles the PTX)</caption>'
                     '<thead><tr><th scope="col">architecture</th><th scope="col">kind</th><th scope="col">size'
                     f'</th><th scope="col">entry</th></tr></thead><tbody>{items}</tbody></table>')
        parts.append(f'<p class="gpucache-muted gpucache-wrap">fatbin: '
                     f'{esc(format_bytes(len(getattr(artifact, "fatbin", b""))))}, entry '
                     f'{esc(getattr(artifact, "entry_name", ""))}</p>')
    return "".join(parts)


def _resources_html(stage: str, entry, downstream) -> str:
    if stage == "fatbin":
        if not downstream:
            return '<p class="gpucache-muted">None of this fatbin\'s cubin entries is cached any more.</p>'
        return resources_table_html(downstream)
    if stage == "cubin" and entry.artifact is not None:
        res = parse_resources(getattr(entry.artifact, "info_log", "") or "")
        rows = [("registers", res["registers"], ""), ("barriers", res["barriers"], ""),
                ("shared memory", format_bytes(res["shared_bytes"]), ""),
                ("local memory", format_bytes(res["local_bytes"]), ""),
                ("constant memory", format_bytes(res["constant_bytes"]), ""),
                ("stack", format_bytes(res["stack_bytes"]), ""),
                ("spill stores", format_bytes(res["spill_stores"]),
                 "gpucache-warn" if res["spill_stores"] else ""),
                ("spill loads", format_bytes(res["spill_loads"]),
                 "gpucache-warn" if res["spill_loads"] else "")]
        body = "".join(f'<tr><th scope="row">{name}</th><td class="{cls}" data-resource="{name}">'
                       f'{esc(value)}</td></tr>' for name, value, cls in rows)
        return (f'<table class="gpucache-table gpucache-resources"><caption>Per thread and block, '
                f'from the linker\'s log</caption><tbody>{body}</tbody></table>')
    if not downstream:
        return ('<p class="gpucache-muted">Resources (registers, spills, shared memory) are measured '
                'when linking a cubin; no cubin built from this entry is cached.</p>')
    items = []
    for row, res in downstream:
        items.append(f'<li><span class="gpucache-code">{esc(short_token(row["token"]))}</span> '
                     f'[{esc(row["config"])}]: {res["registers"]} registers, '
                     f'{esc(format_bytes(res["shared_bytes"]))} shared, spills '
                     f'{res["spill_stores"]}/{res["spill_loads"]} B</li>')
    return ('<p>Measured on the cubins built from this entry:</p><ul>' + "".join(items) + "</ul>")


def _config_html(stage: str, summary: str, fields: Optional[Dict[str, Any]] = None) -> str:
    if not fields:  # written before entries recorded every field
        return (f'<p class="gpucache-text">{esc(summary) or "(not recorded)"}</p><p class="gpucache-muted">'
                "This entry records its config's summary only.</p>")
    values = dict(fields)
    effective = _effective(values)
    rows = []
    for field in dataclasses.fields(CompileConfig):
        name = field.name
        value = values.get(name)
        shown = "follow fastmath" if value is None and name in FOLLOW_FASTMATH \
            else "default" if value is None and name == "fma" else str(value)
        if value is None and name in effective and effective[name] is not None:
            shown += f" (= {effective[name]})"
        readers = FIELD_STAGES.get(name, ())
        chips = "".join(
            f'<span class="gpucache-chip{" gpucache-chip-on" if s == stage else ""}"'
            f' title="{s} {"reads" if s in readers else "does not read"} {name}">{s}</span>'
            for s in STAGES if s in readers)
        # (a fatbin is made of its members' bytes: each field reaches it through them)
        reads = "through its members" if stage == "fatbin" else "yes" if stage in readers else "no"
        rows.append(f'<tr data-field="{name}"><th scope="row" class="gpucache-code">{name}</th>'
                    f'<td class="gpucache-text">{esc(shown)}</td><td class="gpucache-text gpucache-chips">{chips}</td>'
                    f'<td class="gpucache-text">{reads}</td></tr>')
    return ('<table class="gpucache-table gpucache-left gpucache-config"><caption>The config it was built with; '
            'each field is read by the stages shown (typing and llvm read sm only where their '
            'code asked about the target)</caption><thead><tr><th scope="col">field</th>'
            '<th scope="col">value</th><th scope="col">read by</th>'
            f'<th scope="col">{esc(stage)} reads it</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _components_html(components) -> str:
    rows = "".join(
        f'<tr data-component="{esc(name)}"><th scope="row" class="gpucache-code">{esc(name)}</th>'
        f'<td class="gpucache-text">{esc(part.shown)}</td>'
        f'<td class="gpucache-text gpucache-code">{esc(short_token(part.digest))}</td></tr>'
        for name, part in sorted(components.items()))
    return ('<table class="gpucache-table gpucache-left gpucache-components"><caption>What the token hashes: '
            'one digest per named input</caption><thead><tr><th scope="col">component</th>'
            '<th scope="col">value</th><th scope="col">digest</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def _why_html(stage: str, entry, nearest, names) -> str:
    reasons = tuple(entry.reasons or ())
    items = "".join(f"<li>{esc(r)}</li>" for r in reasons) or "<li>(not recorded)</li>"
    parts = [f'<ul class="gpucache-reasons">{items}</ul>']
    if nearest is None:
        parts.append('<p class="gpucache-muted">No other entry of this kernel is cached at this '
                     'stage to compare with.</p>')
        return "".join(parts)
    rows = []
    for name in names:
        mine, theirs = entry.components.get(name), nearest.components.get(name)
        rows.append(f'<tr data-component="{esc(name)}"><th scope="row" class="gpucache-code">'
                    f'{esc(name)}</th>'
                    f'<td class="gpucache-text">{esc(mine.shown if mine else "(absent)")}</td>'
                    f'<td class="gpucache-text">{esc(theirs.shown if theirs else "(absent)")}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="3">no component differs</td></tr>')
    parts.append(
        '<table class="gpucache-table gpucache-left gpucache-diff"><caption>Side by side with the nearest other '
        f'entry of {esc(short_kernel(entry.kernel))} at this stage: the inputs that differ</caption>'
        '<thead><tr><th scope="col">component</th>'
        f'<th scope="col">this entry <span class="gpucache-code">{esc(short_token(entry.token))}</span><br>'
        f'<span class="gpucache-muted">{esc(entry.config)}</span></th>'
        f'<th scope="col">nearest <span class="gpucache-code">{esc(short_token(nearest.token))}</span><br>'
        f'<span class="gpucache-muted">{esc(nearest.config)}</span></th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>')
    return "".join(parts)


@dataclass(frozen=True)
class EntryDetail:
    """What the entry view shows of one entry, read from the cache by the inspector."""

    stage: str
    entry: Any  # gpucache_ext.store.tiers.Entry
    tiers: Tuple[str, ...]  # where it is
    nearest: Any = None  # the nearest other entry of the kernel at this stage (Entry), if any
    differing: Tuple[str, ...] = ()  # the components they differ in
    downstream: Tuple[Any, ...] = ()  # (EntryInfo, resources) of the cubins built from it
    sass: Optional[str] = None  # a cubin's SASS
    sass_note: Optional[str] = None  # why there is no SASS
    kernel_label: Optional[str] = None  # the kernel as the entries list names it (`kernel_labels`)
    sass_label: Optional[str] = None  # "SASS sm_86 (nvdisasm 13.5)"


def entry_html(detail: Optional[EntryDetail], now: float) -> str:
    """Everything about one entry, as HTML (None: the entry is gone)."""
    if detail is None:
        return '<p class="gpucache-muted">That entry is no longer cached.</p>'
    stage, entry = detail.stage, detail.entry
    token = entry.token
    tiers = ", ".join(detail.tiers) or "-"
    meta = (f'{esc(stage)} entry <span class="gpucache-code">{esc(short_token(token))}</span> in '
            f'{esc(tiers)}, {esc(format_bytes(entry.nbytes))}, built {esc(format_age(now - entry.created))} ago '
            f'in {esc(format_seconds(entry.seconds))}')
    if detail.kernel_label and "@" in detail.kernel_label:  # (one of several definitions of its name)
        meta += (f"; this {esc(short_kernel(entry.kernel))} is the one defined in "
                 f"{esc(definitions.explain(entry.place))}")
    return "".join([
        f'<div class="gpucache-entry" data-stage="{esc(stage)}" data-token="{esc(token)}">',
        f'<h4>{esc(detail.kernel_label or short_kernel(entry.kernel))} <span class="gpucache-code">'
        f'{esc(entry.signature)}</span> [{esc(entry.config)}]</h4>',
        f'<p class="gpucache-muted">{meta}</p>',
        '<div class="gpucache-entry-grid">',
        "<section><h4>Why it was built</h4>", _why_html(stage, entry, detail.nearest, detail.differing),
        "</section>",
        "<section><h4>Config</h4>", _config_html(stage, entry.config, entry.config_fields), "</section>",
        "<section><h4>Token components</h4>", _components_html(entry.components), "</section>",
        "<section><h4>Resources</h4>", _resources_html(stage, entry, detail.downstream), "</section>",
        '<section class="gpucache-wide"><h4>Artifacts</h4>',
        artifacts_html(stage, entry, detail.sass, detail.sass_note, detail.sass_label), "</section>",
        "</div></div>",
    ])


# -- resources across variants (`gpucache_ext.queries.ResourceRow`, `ResourceMove`) --

_VARIANT_COLUMNS = ("arch", "signature", "config", "registers", "spills (stored/loaded)", "shared", "local",
                    "constant", "cubin")


def _variant_columns(rows, occupancy=None, stale=None) -> Tuple[str, ...]:
    """The columns for `rows`: signature and config only where the rows
    differ in them; with `occupancy`, one per block size and the best mark;
    with `stale` rows, a "state" column after the config."""
    hidden = {"signature"} if len({row.signature for row in rows}) < 2 else set()
    if len({row.variant for row in rows}) < 2:
        hidden.add("config")
    columns = tuple(column for column in _VARIANT_COLUMNS if column not in hidden)
    if _stale_rows(rows, stale):
        at = columns.index("registers")
        columns = columns[:at] + ("state",) + columns[at:]
    if occupancy is None:
        return columns
    return ("best",) + columns + tuple(f"{block} threads" for block in occupancy.blocks)


# what the "state" column says of a row built from an earlier state of its kernel's inputs
EARLIER = "EARLIER"


def _stale_rows(rows, stale) -> Dict[str, Tuple[str, ...]]:
    """Of `stale` ({cubin token: what changed since it was built}), the rows' own."""
    if not stale:
        return {}
    return {row.token: tuple(stale[row.token]) for row in rows if row.token in stale}


def stale_note(rows, stale) -> str:
    """The line under a variants table some of whose rows were built from an
    earlier state of their kernel's inputs (`stale`: {cubin token: what
    changed, as the cache explains a miss}); "" where none was."""
    found = _stale_rows(rows, stale)
    if not found:
        return ""
    changed = list(dict.fromkeys(reason for reasons in found.values() for reason in reasons))
    return (f"{EARLIER}: built from an earlier state of the kernel's inputs ({'; '.join(changed)}); not what it "
            "compiles now: a launch, kernel.use() or kernel.variants compiles it again")


# how an occupancy cell names what limits it
_LIMIT_WORDS = {"warps": "warps", "registers": "regs", "shared memory": "smem", "blocks per SM": "blocks"}


def _occupancy_cell(found) -> str:
    """"67% regs" (the share of the SM's warps, and what limits it); "-" where no block fits."""
    if found is None:
        return "-"
    if not found.blocks_per_sm:
        return "0% (does not fit)"
    return f"{round(found.occupancy * 100)}% {_LIMIT_WORDS.get(found.limited_by, found.limited_by)}"


def _spilled(row) -> bool:
    return bool(row.spill_stores or row.spill_loads)


def _variant_cells(row) -> Dict[str, str]:
    spills = f"{format_bytes(row.spill_stores)} / {format_bytes(row.spill_loads)}" if _spilled(row) else "none"
    return {"arch": row.arch, "signature": row.signature, "config": row.variant or "defaults",
            "registers": str(row.registers), "spills (stored/loaded)": spills,
            "shared": format_bytes(row.shared_bytes), "local": format_bytes(row.local_bytes),
            "constant": format_bytes(row.constant_bytes), "cubin": format_bytes(row.cubin_bytes)}


def _cells(row, occupancy, stale=None) -> Dict[str, str]:
    cells = _variant_cells(row)
    cells["state"] = EARLIER if stale and row.token in stale else "current"
    if occupancy is not None and occupancy.dynamic_shared:  # static + per-block dynamic
        cells["shared"] += f" + {format_bytes(occupancy.dynamic_shared)} dyn"
    if occupancy is not None:
        cells["best"] = "*" if row.token in occupancy.best else ""
        for block, found in zip(occupancy.blocks, occupancy.by_row.get(row.token, ())):
            cells[f"{block} threads"] = _occupancy_cell(found)
    return cells


def resources_table_text(rows, occupancy=None, stale=None) -> str:
    """One line per variant (`ResourceRow`s: a kernel's targets and configs):
    arch, registers, spills, shared, local and constant memory, cubin size;
    with `occupancy` (`gpucache_ext.queries.VariantOccupancy`), each one's
    theoretical occupancy at each block size and the best per architecture
    marked ``*``; with `stale` ({cubin token: what changed}), a state column
    (``EARLIER`` for those rows, built from an earlier state of the kernel's
    inputs) and a line saying what changed (`stale_note`); "" without rows."""
    if not rows:
        return ""
    columns = _variant_columns(rows, occupancy, stale)
    lines = [list(columns)] + [[_cells(row, occupancy, stale)[c] for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    left = {"arch", "signature", "config", "best", "state"}
    note = stale_note(rows, stale)
    return "\n".join([*("  ".join(cell.ljust(width) if column in left else cell.rjust(width)
                                  for cell, width, column in zip(line, widths, columns)).rstrip()
                        for line in lines), *([note] if note else [])])


def resources_table_html(rows, occupancy=None, stale=None) -> str:
    """`resources_table_text` as a table; spills are marked where there are
    any; each figure in a ``data-resource`` cell's ``data-value`` (occupancy:
    ``data-block`` and ``data-occupancy``, 0 to 1); a row of `stale` (built
    from an earlier state of the kernel's inputs) is ``data-state="earlier"``,
    its state cell says so and names what changed, and a line under the table
    too (`stale_note`)."""
    if not rows:
        return '<p class="gpucache-muted">No cubin is cached to measure.</p>'
    columns = _variant_columns(rows, occupancy, stale)
    earlier = _stale_rows(rows, stale)
    head = "".join(f'<th scope="col">{esc(column)}</th>' for column in columns)
    values = {"registers": "registers", "shared": "shared_bytes", "local": "local_bytes",
              "constant": "constant_bytes", "cubin": "cubin_bytes"}
    body = []
    for row in rows:
        cells = _cells(row, occupancy, earlier)
        found = dict(zip(occupancy.blocks, occupancy.by_row.get(row.token, ()))) if occupancy else {}
        tds = [f'<th scope="row">{esc(row.arch)}</th>']
        for column in columns:
            if column == "arch":
                continue
            if column == "best":
                tds.insert(0, f'<td class="gpucache-best" data-best="{str(bool(cells["best"])).lower()}">'
                              f'{"&#9733;" if cells["best"] else ""}</td>')
            elif column.endswith(" threads"):
                block = int(column.split()[0])
                share = found.get(block)
                tds.append(f'<td data-block="{block}" data-occupancy="{share.occupancy if share else ""}" '
                           f'data-limited-by="{esc(share.limited_by) if share else ""}">{esc(cells[column])}</td>')
            elif column in ("signature", "config"):
                tds.append(f'<td class="gpucache-text{" gpucache-code" if column == "signature" else ""}">'
                           f'{esc(cells[column])}</td>')
            elif column == "state":
                why = "; ".join(earlier.get(row.token, ()))
                tds.append(f'<td class="gpucache-text{" gpucache-warn" if why else ""}"'
                           + (f' title="built from an earlier state: {esc(why)}"' if why else "")
                           + f">{esc(cells[column])}</td>")
            elif column in values:
                tds.append(f'<td data-resource="{values[column]}" data-value="{getattr(row, values[column])}">'
                           f'{esc(cells[column])}</td>')
            else:
                tds.append(f'<td data-resource="spills" data-value="{row.spill_stores}/{row.spill_loads}"'
                           f'{_class("gpucache-warn" if _spilled(row) else "")}>{esc(cells[column])}</td>')
        state = f' data-state="{"earlier" if row.token in earlier else "current"}"' if earlier else ""
        body.append(f'<tr data-arch="{esc(row.arch)}" data-token="{esc(row.token)}"{state}>{"".join(tds)}</tr>')
    note = stale_note(rows, earlier)
    return ('<div class="gpucache-table-scroll"><table class="gpucache-table gpucache-resource-variants">'
            "<caption>Per target and config, from the linker's log: registers and spills per thread, shared "
            f'memory per block</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
            + (f'<p class="gpucache-warn gpucache-stale">{esc(note)}</p>' if note else ""))


def _move_prefixes(moves) -> List[str]:
    """What each move's line starts with: its signature where the moves are of several."""
    groups = {(move.kernel, move.signature) for move in moves}
    if len(groups) < 2:
        return [""] * len(moves)
    kernels = len({kernel for kernel, _ in groups}) > 1
    return [(f"{short_kernel(move.kernel)} " if kernels else "") + f"{move.signature}: " for move in moves]


def resource_moves_text(moves) -> str:
    """A line per `ResourceMove` ("regression: spills appear ..."); "" when nothing moved."""
    return "\n".join(f"{prefix}{'regression: ' if move.regression else ''}{move.text}"
                     for prefix, move in zip(_move_prefixes(moves), moves))


def resource_moves_html(moves) -> str:
    """`resource_moves_text` as a list, regressions marked; a note when nothing moved."""
    if not moves:
        return ('<p class="gpucache-muted gpucache-moves">No figure moved between variants whose configs '
                "differ in one field.</p>")
    items = []
    for prefix, move in zip(_move_prefixes(moves), moves):
        mark = '<span class="gpucache-warn">regression:</span> ' if move.regression else ""
        items.append(f'<li data-field="{esc(move.field)}" data-resource="{esc(move.resource)}" '
                     f'data-regression="{str(move.regression).lower()}">{esc(prefix)}{mark}'
                     f"{esc(move.text)}</li>")
    return f'<ul class="gpucache-moves">{"".join(items)}</ul>'


def resource_variants_html(kernel: str, rows, moves, occupancy=None, stale=None) -> str:
    """The inspector's "resources across variants" section for one kernel:
    the table of its cubin variants (with `occupancy`, each one's at common
    block sizes and the best per architecture; `stale` rows marked built
    from an earlier state, see `resources_table_html`) and how the figures moved."""
    note = ("" if occupancy is None else
            f'<p class="gpucache-muted">Occupancy: the share of an SM\'s warps the variant keeps busy at '
            f'{", ".join(map(str, occupancy.blocks))} threads a block, and what limits it; theoretical (not '
            "speed); &#9733; the best per architecture (no spills, then the highest occupancy).</p>")
    return (f'<h4>Resources across variants of {esc(kernel)}</h4>{note}{resources_table_html(rows, occupancy, stale)}'
            f"<p>How they moved between variants one config field apart:</p>{resource_moves_html(moves)}")

def compare_options(rows, labels: Optional[Dict[Tuple[str, str], str]] = None) -> List[Tuple[str, str]]:
    """The "compare with" choices: (label, token) per `EntryInfo` in `rows`
    (`gpucache_ext.queries.comparable_entries`), the label naming the
    kernel's definition (its name, as `kernel_labels` tells kernels of one
    name apart where `labels` has it, and its signature), its whole config
    (sm and every field away from its default) and short token:
    ``axpy (float32[::1], float32) [sm_86 fastmath=True max_registers=32] 3f2a1c0b9e12``."""
    labels = labels or {}
    return [(f"{labels.get((row.stage, row.token)) or short_kernel(row.kernel)} {row.signature} "
             f"[{row.config}] {short_token(row.token)}", row.token) for row in rows]


def _diff_cells(number, text) -> str:
    return (f'<td class="gpucache-lineno">{"" if number is None else number}</td>'
            f'<td class="gpucache-code">{esc(text)}</td>')


def comparison_html(comparison) -> str:
    """Two entries' code side by side (a `gpucache_ext.queries.EntryComparison`):
    the differing hunks as a table, changed lines highlighted, and a summary line."""
    diff = comparison.diff
    head = (f'<div class="gpucache-compare" data-stage="{esc(comparison.stage)}">'
            f'<p class="gpucache-compare-summary" data-changed="{diff.changed}" data-removed="{diff.removed}" '
            f'data-added="{diff.added}">{esc(diff.summary())}</p>')
    if diff.identical:
        return (f'{head}<p class="gpucache-muted">{esc(diff.left_label)} and {esc(diff.right_label)} '
                'read the same, instruction by instruction.</p></div>')
    marks = {"same": "", "changed": "|", "left only": "&lt;", "right only": "&gt;"}
    body, shown = [], 0
    for index, hunk in enumerate(diff.hunks):
        if index:
            body.append('<tr class="gpucache-line-gap"><td colspan="5">⋯</td></tr>')
        for row in hunk[:max(0, _MAX_DIFF_ROWS - shown)]:
            body.append(f'<tr class="gpucache-line-{row.kind.replace(" ", "-")}" data-kind="{row.kind}">'
                        f'{_diff_cells(row.left_no, row.left)}<td class="gpucache-mark">{marks[row.kind]}</td>'
                        f'{_diff_cells(row.right_no, row.right)}</tr>')
        shown += len(hunk)
    if shown > _MAX_DIFF_ROWS:
        body.append(f'<tr class="gpucache-line-gap"><td colspan="5">... ({shown - _MAX_DIFF_ROWS} more rows)</td></tr>')
    return (f'{head}<table class="gpucache-table gpucache-left gpucache-side-by-side"><caption>By instruction: '
            "addresses, encodings and the per-build parts of symbol names left out; changed lines are "
            'highlighted</caption><colgroup><col class="gpucache-lineno"><col><col class="gpucache-mark">'
            '<col class="gpucache-lineno"><col></colgroup><thead><tr>'
            f'<th scope="col" colspan="2">{esc(diff.left_label)}</th><th scope="col"></th>'
            f'<th scope="col" colspan="2">{esc(diff.right_label)}</th></tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def comparison_note_html(message: str) -> str:
    """Why two entries cannot be compared."""
    return f'<p class="gpucache-muted gpucache-compare-note">{esc(message)}</p>'


# ---------------------------------------------------------------------------
# A static snapshot (text and HTML), also the widget's fallback


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
