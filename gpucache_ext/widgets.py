"""The cache inspector: a live ipywidgets view of a `KernelCache`.

``gpucache_ext.inspector(cache=None)`` (what ``%gpucache`` shows) returns one
widget per cache.  It shows

* per layer (typing, llvm, ptx, cubin) hits, misses, hit rate, entries, bytes,
  evictions, compile time spent and saved, and the same per tier;
* a small chart of hits and misses per layer over the session's cells;
* the cached entries (kernel, signature, config, layer, token, tier, size,
  age, why it was built), filtered by kernel and layer;
* the selected entry: its config and which stages read each field, its token
  components, its artifacts (typed IR, NVVM IR, PTX, SASS where nvdisasm is
  found, the link log), its resources, and why it was built, side by side with
  the nearest other entry of the same kernel and layer;
* actions: clear a layer, evict the entry, recompile it.

The widget refreshes after every cell (an IPython ``post_run_cell`` hook,
installed by ``%load_ext gpucache_ext`` or by the first ``inspector()``) and
after each action; every place it is displayed shows the same model, so all
of them update.  Displayed where widgets cannot render (a terminal IPython, an
exported notebook, a frontend without the widget manager) it falls back to
plain text and static HTML (`_repr_mimebundle_`), as `CacheSnapshot` does.

Styling uses JupyterLab's CSS variables (with fallbacks), so the views follow
the light and dark themes; there are no scripts anywhere in the output.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import io
import re
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import ipywidgets as W

from .config import FIELD_STAGES, STAGES, CompileConfig
from .report import format_age, format_bytes, format_seconds
from .results import SassUnavailable, disassemble, parse_resources, short_signature
from .tokens import short_token
from .queries import built_from, nearest_entry
from .session import CellHistory

__all__ = ["inspector", "Inspector", "CacheSnapshot", "StatsView"]

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
  white-space: pre; overflow: hidden; padding: 0 5px; font-weight: 600;
  color: var(--jp-ui-font-color1, #1f1f1f);
}
.gpucache-inspector pre, .gpucache-static pre {
  font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace);
  font-size: var(--jp-code-font-size, 12px);
  background: var(--jp-layout-color2, #eeeeee); color: var(--jp-content-font-color1, #000000);
  border: 1px solid var(--jp-border-color2, #e0e0e0);
  max-height: 22em; overflow: auto; padding: 6px; margin: 4px 0; white-space: pre;
}
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
</style>"""

_TOKEN_SHORT = 8
_MAX_LIST_ROWS = 500
_MAX_STATIC_ROWS = 40
_MAX_ARTIFACT_CHARS = 200_000
_CHART_POINTS = 30


# ---------------------------------------------------------------------------
# Small formatters


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _rate(hits: int, misses: int) -> str:
    total = hits + misses
    return f"{100.0 * hits / total:.0f}%" if total else "-"




def _short_kernel(qualname: str) -> str:
    return (qualname or "").rsplit(".", 1)[-1]


def _fit(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


def saved_seconds(cache, stats: Optional[Dict[str, Any]] = None) -> Dict[str, Dict[str, float]]:
    """Compile time saved by hits, per stage and tier: ``{stage: {"total": s, tier: s}}``."""
    stats = cache.stats() if stats is None else stats
    result = {}
    for stage in STAGES:
        values = stats.get(stage, {})
        per_tier = {name: float(t.get("saved_seconds", 0.0)) for name, t in values.get("tiers", {}).items()}
        result[stage] = {"total": float(values.get("saved_seconds", 0.0)), **per_tier}
    return result


# ---------------------------------------------------------------------------
# Reading the cache


def _config_fields(summary: str) -> Dict[str, Any]:
    """The full config of an entry, from its summary (``sm_86 max_registers=32``)."""
    values = {f.name: f.default for f in dataclasses.fields(CompileConfig)}
    text = (summary or "").strip()
    match = re.match(r"sm_(\d+)", text)
    if match:
        values["sm"] = int(match.group(1))
    for name, raw in re.findall(r"(\w+)=(.*?)(?=\s+\w+=|$)", text):
        if name in values:
            try:
                values[name] = ast.literal_eval(raw.strip())
            except (ValueError, SyntaxError):
                values[name] = raw.strip()
    return values


def _effective(values: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return CompileConfig(**values).normalised()
    except Exception:
        return dict(values)


_sass_cache: "OrderedDict[str, Tuple[Optional[str], Optional[str]]]" = OrderedDict()


def sass_of(token: str, cubin: bytes) -> Tuple[Optional[str], Optional[str]]:
    """(SASS text, None) via nvdisasm, or (None, a one-line note why not)."""
    if token in _sass_cache:
        return _sass_cache[token]
    try:
        found = (disassemble(cubin), None)
    except SassUnavailable as exc:  # a missing or broken nvdisasm must not break the view
        found = (None, f"SASS: {exc}")
    _sass_cache[token] = found
    while len(_sass_cache) > 32:
        _sass_cache.popitem(last=False)
    return found


# ---------------------------------------------------------------------------
# HTML and text pieces, shared by the widget and the static fallback


_SUMMARY_COLUMNS = (
    ("hits", "hits"), ("misses", "misses"), ("hit_rate", "hit rate"), ("entries", "entries"),
    ("bytes", "bytes"), ("evictions", "evictions"), ("compile_seconds", "compile time spent"),
    ("saved_seconds", "compile time saved"), ("audits", "audited"),
    ("audit_mismatches", "audit mismatches"),
)


def _cell(stage: str, field: str, value: Any, shown: str, tier: Optional[str] = None,
          cls: str = "") -> str:
    attrs = f' data-stage="{_esc(stage)}" data-field="{field}" data-value="{_esc(value)}"'
    if tier is not None:
        attrs += f' data-tier="{_esc(tier)}"'
    if cls:
        attrs += f' class="{cls}"'
    return f"<td{attrs}>{_esc(shown)}</td>"


def storage_summary(stats) -> str:
    """What every tier holds, all layers together: "12.3 KiB in memory, 45.6 KiB on disk"."""
    parts = []
    for name in stats.tier_names():  # (KernelCache.stats always lists the memory tier)
        held = sum(int(stats.get(s, {}).get("tiers", {}).get(name, {}).get("bytes", 0)) for s in STAGES)
        where = {"memory": "in memory", "disk": "on disk"}.get(name, f"in the {name} tier")
        parts.append(f"{format_bytes(held)} {where}")
    return ", ".join(parts)


def summary_rows(stats, saved) -> List[Dict[str, Any]]:
    """One dict per layer (then per tier, then a total): the numbers the summary shows."""
    rows = []
    tiers = stats.tier_names()
    totals = dict.fromkeys(("hits", "misses", "entries", "bytes", "evictions", "audits",
                            "audit_mismatches"), 0)
    totals.update(compile_seconds=0.0, saved_seconds=0.0)
    for stage in STAGES:
        s = stats.get(stage, {})
        row = {"stage": stage, "tier": None, "hits": int(s.get("hits", 0)),
               "misses": int(s.get("misses", 0)), "entries": int(s.get("entries", 0)),
               "bytes": int(s.get("bytes", 0)), "evictions": int(s.get("evictions", 0)),
               "compile_seconds": float(s.get("compile_seconds", 0.0)),
               "saved_seconds": float(saved.get(stage, {}).get("total", 0.0)),
               "audits": int(s.get("audits", 0)), "audit_mismatches": int(s.get("audit_mismatches", 0))}
        row["hit_rate"] = _rate(row["hits"], row["misses"])
        rows.append(row)
        for key in totals:
            totals[key] += row[key]
        lookups = row["hits"] + row["misses"]
        for name in tiers:
            t = s.get("tiers", {}).get(name)
            if t is None:
                continue
            hits = int(t.get("hits", 0))
            rows.append({"stage": stage, "tier": name, "hits": hits, "misses": None,
                         "hit_rate": f"{100.0 * hits / lookups:.0f}%" if lookups else "-",
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
    head = "<th scope=\"col\">layer</th>" + "".join(
        f"<th scope=\"col\">{_esc(title)}</th>" for _, title in _SUMMARY_COLUMNS)
    body = []
    for row in summary_rows(stats, saved):
        stage, tier = row["stage"], row["tier"]
        if tier is None:
            cls = "gpucache-total" if stage == "all" else "gpucache-layer"
            title = "all layers" if stage == "all" else stage
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
            elif field == "hits" and value and tier is None:
                mark = "gpucache-hit"
            cells.append(_cell(stage, field, value, _shown(field, value), tier, mark))
        tier_attr = f' data-tier="{_esc(tier)}"' if tier else ""
        body.append(f'<tr class="{cls}" data-stage="{_esc(stage)}"{tier_attr}>'
                    f'<th scope="row">{_esc(title)}</th>{"".join(cells)}</tr>')
    caption = ("Per layer: lookups that hit and missed, what is cached in memory, compile "
               "time spent (misses) and saved (hits), and artifacts audited against a fresh "
               "compile (mismatches are soundness bugs); the indented rows give each tier's "
               "hits, entries, bytes and saved time.")
    return (f'<table class="gpucache-table gpucache-summary-table"><caption>{caption}</caption>'
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


class StatsView:
    """`%gpucache stats`: the inspector's per-layer and per-tier summary, with
    its units (KiB, ms) and labels, as text and as HTML."""

    def __init__(self, cache):
        self.stats = cache.stats()
        self.saved = saved_seconds(cache, self.stats)

    def __repr__(self) -> str:
        return summary_text(self.stats, self.saved)

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        return STYLE + summary_html(self.stats, self.saved)

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        return {"text/plain": repr(self), "text/html": self._repr_html_()}


def summary_text(stats, saved) -> str:
    columns = ["layer"] + [title for _, title in _SUMMARY_COLUMNS]
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


def chart_svg(points: List[Dict[str, Any]]) -> str:
    """Hits (up, green) and misses (down, red) per layer, one column per cell."""
    points = points[-_CHART_POINTS:]
    if not points:
        return ('<p class="gpucache-muted gpucache-chart-empty">No cell has used the cache yet: '
                'the chart of hits and misses per cell appears after the first compile.</p>')
    left, top, row_h, half, bottom = 56, 22, 40, 16, 22
    col = max(10, min(28, int(560 / max(1, len(points)))))
    bar = max(4, col - 4)
    width = max(320, left + col * len(points) + 8)
    height = top + row_h * len(STAGES) + bottom
    peak = max(1, max(max(h, m) for p in points for h, m in p["stages"].values()))
    totals = {s: (sum(p["stages"].get(s, (0, 0))[0] for p in points),
                  sum(p["stages"].get(s, (0, 0))[1] for p in points)) for s in STAGES}
    desc = "; ".join(f"{s}: {h} hits, {m} misses" for s, (h, m) in totals.items())
    parts = [
        f'<svg class="gpucache-chart" role="img" aria-labelledby="gpucache-chart-title gpucache-chart-desc" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<title id="gpucache-chart-title">Hits and misses per layer over the last {len(points)} '
        f'cells that used the cache</title>',
        f'<desc id="gpucache-chart-desc">{_esc(desc)}</desc>',
        '<rect class="gpucache-bar-hit" fill="#2e7d32" x="0" y="4" width="10" height="10"/>',
        '<text x="14" y="13">hits (up)</text>',
        '<rect class="gpucache-bar-miss" fill="#c62828" x="80" y="4" width="10" height="10"/>',
        '<text x="94" y="13">misses (down)</text>',
    ]
    for r, stage in enumerate(STAGES):
        base = top + r * row_h + row_h // 2
        parts.append(f'<text x="0" y="{base + 4}">{stage}</text>')
        parts.append(f'<line class="gpucache-axis" stroke="#9e9e9e" x1="{left - 4}" '
                     f'y1="{base}" x2="{width - 4}" y2="{base}"/>')
        for i, point in enumerate(points):
            hits, misses = point["stages"].get(stage, (0, 0))
            x = left + i * col + (col - bar) // 2
            label = f"cell {point['label']}, {stage}: {hits} hits, {misses} misses"
            parts.append(f'<g data-stage="{stage}" data-cell="{_esc(point["label"])}" '
                         f'data-hits="{hits}" data-misses="{misses}"><title>{_esc(label)}</title>')
            if hits:
                h = max(2, round(half * hits / peak))
                parts.append(f'<rect class="gpucache-bar-hit" fill="#2e7d32" x="{x}" y="{base - h}" '
                             f'width="{bar}" height="{h}"/>')
            if misses:
                h = max(2, round(half * misses / peak))
                parts.append(f'<rect class="gpucache-bar-miss" fill="#c62828" x="{x}" y="{base + 1}" '
                             f'width="{bar}" height="{h}"/>')
            parts.append("</g>")
    step = max(1, (len(points) * 28) // max(1, width - left) + 1)
    y = height - 6
    for i, point in enumerate(points):
        if i % step == 0 or i == len(points) - 1:
            x = left + i * col + col // 2
            parts.append(f'<text x="{x}" y="{y}" text-anchor="middle">{_esc(point["label"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def chart_text(points: List[Dict[str, Any]], limit: int = 12) -> str:
    points = points[-limit:]
    if not points:
        return "hits/misses per cell: no cell has used the cache yet"
    labels = [str(p["label"]) for p in points]
    cells = [[f"{p['stages'].get(s, (0, 0))[0]}/{p['stages'].get(s, (0, 0))[1]}" for p in points]
             for s in STAGES]
    widths = [max(len(labels[i]), *(len(c[i]) for c in cells)) for i in range(len(points))]
    lines = ["hits/misses per cell".ljust(8)]
    lines.append("cell    " + "  ".join(lab.rjust(w) for lab, w in zip(labels, widths)))
    for stage, row in zip(STAGES, cells):
        lines.append(f"{stage:<8}" + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)


_ENTRY_COLUMNS = ("kernel", "signature", "config", "layer", "token", "tier", "size", "age", "why built")
_ENTRY_WIDTHS = {"kernel": 14, "signature": 46, "config": 24, "layer": 6, "token": _TOKEN_SHORT,
                 "tier": 14, "size": 8, "age": 4, "why built": 44}
_RIGHT = ("size", "age")


def entry_cells(row: Dict[str, Any], now: float) -> Dict[str, str]:
    return {
        "kernel": _short_kernel(row["kernel"]),
        "signature": row.get("signature", ""),
        "config": row.get("config", ""),
        "layer": row["stage"],
        "token": row["token"][:_TOKEN_SHORT],
        "tier": ",".join(row.get("tiers", ())),
        "size": format_bytes(row.get("bytes", 0)),
        "age": format_age(now - row.get("created", now)),
        "why built": "; ".join(row.get("reasons", ())),
    }


def _entry_widths(cells: List[Dict[str, str]]) -> Dict[str, int]:
    return {c: min(_ENTRY_WIDTHS[c], max([len(c)] + [len(r[c]) for r in cells])) for c in _ENTRY_COLUMNS}


def _entry_line(cells: Dict[str, str], widths: Dict[str, int]) -> str:
    parts = []
    for column in _ENTRY_COLUMNS:
        text = _fit(cells[column], widths[column])
        parts.append(text.rjust(widths[column]) if column in _RIGHT else text.ljust(widths[column]))
    return "  ".join(parts).rstrip()


def entries_text(rows: List[Dict[str, Any]], now: float, limit: int = 20) -> str:
    if not rows:
        return "entries: none cached"
    cells = [entry_cells(r, now) for r in rows[:limit]]
    widths = _entry_widths(cells)
    lines = [_entry_line({c: c for c in _ENTRY_COLUMNS}, widths)]
    lines += [_entry_line(c, widths) for c in cells]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return "\n".join(lines)


def entries_html(rows: List[Dict[str, Any]], now: float, limit: int = _MAX_STATIC_ROWS) -> str:
    if not rows:
        return '<p class="gpucache-muted">No entries are cached.</p>'
    head = "".join(f'<th scope="col">{_esc(c)}</th>' for c in _ENTRY_COLUMNS)
    body = []
    for row in rows[:limit]:
        cells = entry_cells(row, now)
        tds = []
        for column in _ENTRY_COLUMNS:
            cls = "gpucache-text" if column not in _RIGHT else ""
            if column in ("token", "signature"):
                cls += " gpucache-code"
            tds.append(f'<td class="{cls.strip()}">{_esc(cells[column])}</td>')
        body.append(f'<tr data-stage="{_esc(row["stage"])}" data-token="{_esc(row["token"])}">'
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
    return (f"<details><summary>{_esc(label)} ({lines} lines)</summary>"
            f'<pre aria-label="{_esc(label)}">{_esc(text + more)}</pre></details>')


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
            pass
    return "\n".join(lines)


def artifacts_html(stage: str, entry) -> str:
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
            parts.append(f'<p>LTO-IR: {_esc(format_bytes(len(ltoir)))} (binary; the PTX after link-time '
                         'optimisation is in the cubin entries built from it)</p>')
    elif stage == "cubin":
        cubin = getattr(artifact, "cubin", b"") or b""
        sass, note = sass_of(entry.token, cubin)
        if sass is not None:
            parts.append(_pre(sass, "SASS (nvdisasm)"))
        else:
            parts.append(f'<p class="gpucache-muted gpucache-sass-note">{_esc(note)}</p>')
        if getattr(artifact, "linked_ptx", None):
            parts.append(_pre(artifact.linked_ptx, "PTX after link-time optimisation"))
        parts.append(_pre(getattr(artifact, "info_log", ""), "link log (nvJitLink)"))
        parts.append(f'<p class="gpucache-muted gpucache-wrap">cubin: {_esc(format_bytes(len(cubin)))}, '
                     f'entry {_esc(getattr(artifact, "entry_name", ""))}</p>')
    return "".join(parts)


def _resources_html(cache, stage: str, entry) -> str:
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
                       f'{_esc(value)}</td></tr>' for name, value, cls in rows)
        return (f'<table class="gpucache-table gpucache-resources"><caption>Per thread and block, '
                f'from the linker\'s log</caption><tbody>{body}</tbody></table>')
    downstream = built_from(cache, stage, entry.token, entry.kernel)
    if not downstream:
        return ('<p class="gpucache-muted">Resources (registers, spills, shared memory) are measured '
                'when linking a cubin; no cubin built from this entry is cached.</p>')
    items = []
    for row, res in downstream:
        items.append(f'<li><span class="gpucache-code">{_esc(short_token(row["token"]))}</span> '
                     f'[{_esc(row["config"])}]: {res["registers"]} registers, '
                     f'{_esc(format_bytes(res["shared_bytes"]))} shared, spills '
                     f'{res["spill_stores"]}/{res["spill_loads"]} B</li>')
    return ('<p>Measured on the cubins built from this entry:</p><ul>' + "".join(items) + "</ul>")


def _config_html(stage: str, summary: str, fields: Optional[Dict[str, Any]] = None) -> str:
    values = dict(fields) if fields else _config_fields(summary)
    effective = _effective(values)
    rows = []
    for field in dataclasses.fields(CompileConfig):
        name = field.name
        value = values.get(name)
        shown = "follow fastmath" if value is None and name in ("ftz", "prec_div", "prec_sqrt") \
            else "default" if value is None and name == "fma" else str(value)
        if value is None and name in effective and effective[name] is not None:
            shown += f" (= {effective[name]})"
        readers = FIELD_STAGES.get(name, ())
        chips = "".join(
            f'<span class="gpucache-chip{" gpucache-chip-on" if s == stage else ""}"'
            f' title="{s} {"reads" if s in readers else "does not read"} {name}">{s}</span>'
            for s in STAGES if s in readers)
        reads = "yes" if stage in readers else "no"
        rows.append(f'<tr data-field="{name}"><th scope="row" class="gpucache-code">{name}</th>'
                    f'<td class="gpucache-text">{_esc(shown)}</td><td class="gpucache-text gpucache-chips">{chips}</td>'
                    f'<td class="gpucache-text">{reads}</td></tr>')
    return ('<table class="gpucache-table gpucache-left gpucache-config"><caption>The config it was built with; '
            'each field is read by the stages shown (typing and llvm read sm only where their '
            'code asked about the target)</caption><thead><tr><th scope="col">field</th>'
            '<th scope="col">value</th><th scope="col">read by</th>'
            f'<th scope="col">{_esc(stage)} reads it</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _components_html(components) -> str:
    rows = "".join(
        f'<tr data-component="{_esc(name)}"><th scope="row" class="gpucache-code">{_esc(name)}</th>'
        f'<td class="gpucache-text">{_esc(part.shown)}</td>'
        f'<td class="gpucache-text gpucache-code">{_esc(short_token(part.digest))}</td></tr>'
        for name, part in sorted(components.items()))
    return ('<table class="gpucache-table gpucache-left gpucache-components"><caption>What the token hashes: '
            'one digest per named input</caption><thead><tr><th scope="col">component</th>'
            '<th scope="col">value</th><th scope="col">digest</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def _why_html(cache, stage: str, entry) -> str:
    reasons = tuple(entry.reasons or ())
    items = "".join(f"<li>{_esc(r)}</li>" for r in reasons) or "<li>(not recorded)</li>"
    parts = [f'<ul class="gpucache-reasons">{items}</ul>']
    nearest, names = nearest_entry(cache, stage, entry.token)
    if nearest is None:
        parts.append('<p class="gpucache-muted">No other entry of this kernel is cached at this '
                     'layer to compare with.</p>')
        return "".join(parts)
    rows = []
    for name in names:
        mine, theirs = entry.components.get(name), nearest.components.get(name)
        rows.append(f'<tr data-component="{_esc(name)}"><th scope="row" class="gpucache-code">'
                    f'{_esc(name)}</th>'
                    f'<td class="gpucache-text">{_esc(mine.shown if mine else "(absent)")}</td>'
                    f'<td class="gpucache-text">{_esc(theirs.shown if theirs else "(absent)")}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="3">no component differs</td></tr>')
    parts.append(
        '<table class="gpucache-table gpucache-left gpucache-diff"><caption>Side by side with the nearest other '
        f'entry of {_esc(_short_kernel(entry.kernel))} at this layer: the inputs that differ</caption>'
        '<thead><tr><th scope="col">component</th>'
        f'<th scope="col">this entry <span class="gpucache-code">{_esc(short_token(entry.token))}</span><br>'
        f'<span class="gpucache-muted">{_esc(entry.config)}</span></th>'
        f'<th scope="col">nearest <span class="gpucache-code">{_esc(short_token(nearest.token))}</span><br>'
        f'<span class="gpucache-muted">{_esc(nearest.config)}</span></th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>')
    return "".join(parts)


def entry_html(cache, stage: str, token: str, now: Optional[float] = None) -> str:
    """Everything about one entry, as HTML."""
    now = time.time() if now is None else now
    entry = cache.entry(stage, token)
    if entry is None:
        return '<p class="gpucache-muted">That entry is no longer cached.</p>'
    rows = {(r["stage"], r["token"]): r for r in cache.entries(stage=stage, kernel=entry.kernel)}
    row = rows.get((stage, token), {})
    tiers = ", ".join(row.get("tiers", ())) or "-"
    meta = (f'{_esc(stage)} entry <span class="gpucache-code">{_esc(short_token(token))}</span> in '
            f'{_esc(tiers)}, {_esc(format_bytes(entry.nbytes))}, built {_esc(format_age(now - entry.created))} ago '
            f'in {_esc(format_seconds(entry.seconds))}')
    return "".join([
        f'<div class="gpucache-entry" data-stage="{_esc(stage)}" data-token="{_esc(token)}">',
        f'<h4>{_esc(_short_kernel(entry.kernel))} <span class="gpucache-code">'
        f'{_esc(entry.signature)}</span> [{_esc(entry.config)}]</h4>',
        f'<p class="gpucache-muted">{meta}</p>',
        '<div class="gpucache-entry-grid">',
        "<section><h4>Why it was built</h4>", _why_html(cache, stage, entry), "</section>",
        "<section><h4>Config</h4>", _config_html(stage, entry.config, entry.config_fields), "</section>",
        "<section><h4>Token components</h4>", _components_html(entry.components), "</section>",
        "<section><h4>Resources</h4>", _resources_html(cache, stage, entry), "</section>",
        '<section class="gpucache-wide"><h4>Artifacts</h4>', artifacts_html(stage, entry), "</section>",
        "</div></div>",
    ])


# ---------------------------------------------------------------------------
# A static snapshot (text and HTML), also the widget's fallback


class CacheSnapshot:
    """The inspector's numbers at one moment, as plain text and static HTML."""

    def __init__(self, cache, history=None):
        self.cache = cache
        self.stats = cache.stats()
        self.saved = saved_seconds(cache, self.stats)
        self.points = list(history.points) if history is not None else []
        self.entries = cache.entries()
        self.time = time.time()

    def text(self) -> str:
        return "\n".join([
            "gpucache inspector",
            summary_text(self.stats, self.saved),
            "",
            chart_text(self.points),
            "",
            entries_text(self.entries, self.time),
        ])

    def html(self) -> str:
        return "".join([
            STYLE,
            '<div class="gpucache-static">',
            "<h3>gpucache inspector</h3>",
            summary_html(self.stats, self.saved),
            "<h4>Hits and misses per cell</h4>",
            chart_svg(self.points),
            "<h4>Entries</h4>",
            entries_html(self.entries, self.time),
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


# ---------------------------------------------------------------------------
# The widget


_ALL = "\u2014 all \u2014"
_EVERY_LAYER = "all"  # the clear-layer choice for every layer


class Inspector(W.VBox):
    """A live view of a `KernelCache`: per-layer numbers, a chart, the entries,
    one entry in detail, and actions.  Use `inspector(cache)` to get the shared one."""

    def __init__(self, cache, history: Optional[CellHistory] = None, siblings=None, **kwargs):
        super().__init__(**kwargs)
        self.cache = cache
        # the per-cell chart's data (a session's, else this widget's own from now on)
        self.history = history if history is not None else CellHistory(cache.lookups())
        self._siblings = siblings  # () -> the open inspectors to refresh after an action
        self._selected: Optional[Tuple[str, str]] = None
        self._updating = False
        self._rows: List[Dict[str, Any]] = []

        self.header = W.HTML()
        self.summary = W.HTML()
        self.chart = W.HTML()
        self.kernel_filter = W.Dropdown(description="kernel", options=[(_ALL, "")], value="",
                                        tooltip="Show the entries of one kernel",
                                        layout=W.Layout(width="auto"))
        self.layer_filter = W.Dropdown(description="layer", options=[(_ALL, "")] + [(s, s) for s in STAGES],
                                       value="", tooltip="Show the entries of one layer",
                                       layout=W.Layout(width="auto"))
        self.count = W.HTML()
        self.entries_head = W.HTML()
        self.entries_list = W.Select(options=[], rows=8, layout=W.Layout(width="100%"),
                                     description="", tooltip="Cached entries; select one to see it below")
        self.evict_button = W.Button(description="Evict entry", icon="trash", button_style="warning",
                                     tooltip="Remove the selected entry from every tier", disabled=True)
        self.recompile_button = W.Button(description="Recompile entry", icon="refresh",
                                         tooltip="Compile the selected entry's kernel again from scratch "
                                                 "(same signature and config)", disabled=True)
        self.clear_layer = W.Dropdown(description="clear",
                                      options=[(s, s) for s in STAGES] + [("all layers", _EVERY_LAYER)],
                                      value="cubin", tooltip="The layer to clear",
                                      layout=W.Layout(width="auto"))
        self.clear_button = W.Button(description="Clear layer", icon="eraser", button_style="danger",
                                     tooltip="Drop every entry of the chosen layer, in every tier")
        self.status = W.HTML()
        self.entry_view = W.HTML()

        for widget, cls in ((self.header, "gpucache-header"), (self.summary, "gpucache-summary"),
                            (self.chart, "gpucache-chart-box"), (self.count, "gpucache-count"),
                            (self.entries_head, "gpucache-entries-head-box"),
                            (self.entries_list, "gpucache-entries"), (self.status, "gpucache-status"),
                            (self.entry_view, "gpucache-entry-view"),
                            (self.evict_button, "gpucache-evict"),
                            (self.recompile_button, "gpucache-recompile"),
                            (self.clear_button, "gpucache-clear"), (self.kernel_filter, "gpucache-kernel-filter"),
                            (self.layer_filter, "gpucache-layer-filter"),
                            (self.clear_layer, "gpucache-clear-layer")):
            widget.add_class(cls)

        self.children = [
            self.header,
            self.summary,
            W.HTML("<h4>Hits and misses per cell</h4>"),
            self.chart,
            W.HTML("<h4>Entries</h4>"),
            W.HBox([self.kernel_filter, self.layer_filter, self.count],
                   layout=W.Layout(flex_flow="row wrap", align_items="center")),
            self.entries_head,
            self.entries_list,
            W.HBox([self.evict_button, self.recompile_button, self.clear_layer, self.clear_button],
                   layout=W.Layout(flex_flow="row wrap", align_items="center")),
            self.status,
            self.entry_view,
        ]
        self.add_class("gpucache-inspector")

        self.kernel_filter.observe(self._on_filter, names="value")
        self.layer_filter.observe(self._on_filter, names="value")
        self.entries_list.observe(self._on_select, names="value")
        self.evict_button.on_click(lambda _: self.evict_selected())
        self.recompile_button.on_click(lambda _: self.recompile_selected())
        self.clear_button.on_click(lambda _: self.clear(self.clear_layer.value))
        self.refresh()

    # -- reading -----------------------------------------------------------------
    def refresh(self) -> None:
        """Read the cache again and update every part of the view."""
        try:
            self._refresh()
        except Exception as exc:  # the view must not break a cell
            self._set_status(f"could not refresh: {type(exc).__name__}: {exc}", error=True)

    def _refresh(self):
        stats = self.cache.stats()
        saved = saved_seconds(self.cache, stats)
        points = self.history.points
        rows = self.cache.entries()
        kernels = len({r["kernel"] for r in rows})
        self.header.value = (
            f'{STYLE}<h3>gpucache inspector</h3><p class="gpucache-muted">{len(rows)} entries of '
            f'{kernels} kernel{"s" if kernels != 1 else ""}, {_esc(storage_summary(stats))}; updated '
            f'{time.strftime("%H:%M:%S")}{" after cell " + _esc(points[-1]["label"]) if points else ""}</p>')
        self.summary.value = summary_html(stats, saved)
        self.chart.value = chart_svg(points)
        self._rows = rows
        self._update_entries()

    def _update_entries(self):
        rows = self._rows
        now = time.time()
        kernels = sorted({r["kernel"] for r in rows}, key=_short_kernel)
        short = [_short_kernel(k) for k in kernels]
        options = [(_ALL, "")] + [(s if short.count(s) == 1 else k, k) for s, k in zip(short, kernels)]
        self._updating = True
        try:
            wanted = self.kernel_filter.value
            if list(self.kernel_filter.options) != options:
                self.kernel_filter.options = options
            self.kernel_filter.value = wanted if wanted in kernels else ""
            kernel, layer = self.kernel_filter.value, self.layer_filter.value
            shown = [r for r in rows if (not kernel or r["kernel"] == kernel)
                     and (not layer or r["stage"] == layer)]
            listed = shown[:_MAX_LIST_ROWS]
            cells = [entry_cells(r, now) for r in listed]
            widths = _entry_widths(cells)
            # (the listbox keeps the labels' spaces, so the columns line up)
            self.entries_head.value = ('<div class="gpucache-entries-head" aria-hidden="true">'
                                       + _esc(_entry_line({c: c for c in _ENTRY_COLUMNS}, widths))
                                       + "</div>")
            list_options = [(_entry_line(c, widths), (r["stage"], r["token"])) for c, r in zip(cells, listed)]
            values = [value for _, value in list_options]
            selected = self._selected if self._selected in values else (values[0] if values else None)
            if list(self.entries_list.options) != list_options:
                self.entries_list.options = list_options
            self.entries_list.value = selected
            self._selected = selected
            total = len(rows)
            more = f" (first {len(listed)} listed)" if len(shown) > len(listed) else ""
            self.count.value = (f'<span class="gpucache-muted">{len(shown)} of {total} entries'
                                f'{more}</span>')
        finally:
            self._updating = False
        self._show_selected()

    def _show_selected(self):
        selected = self._selected
        self.evict_button.disabled = self.recompile_button.disabled = selected is None
        if selected is None:
            self.entry_view.value = ('<p class="gpucache-muted">Select an entry above to see its '
                                     'config, token components, artifacts and why it was built.</p>')
            return
        self.entry_view.value = entry_html(self.cache, *selected)

    def _on_filter(self, change):
        if not self._updating:
            self._update_entries()

    def _on_select(self, change):
        if self._updating:
            return
        self._selected = change["new"]
        self._show_selected()

    @property
    def selected(self) -> Optional[Tuple[str, str]]:
        """The selected entry as (stage, token), or None."""
        return self._selected

    def select(self, stage: str, token: str) -> None:
        """Select an entry (clearing filters that would hide it)."""
        self._selected = (stage, token)
        self._updating = True
        try:
            self.kernel_filter.value = ""
            self.layer_filter.value = ""
        finally:
            self._updating = False
        self._update_entries()

    # -- actions -----------------------------------------------------------------
    def evict_selected(self) -> bool:
        if self._selected is None:
            self._set_status("select an entry to evict", error=True)
            return False
        stage, token = self._selected
        found = self.cache.evict(stage, token)
        self._selected = None
        self._refresh_all()
        self._set_status(f"evicted {stage} entry {short_token(token)}" if found
                         else f"{stage} entry {short_token(token)} was already gone")
        return found

    def recompile_selected(self):
        if self._selected is None:
            self._set_status("select an entry to recompile", error=True)
            return None
        stage, token = self._selected
        try:
            result = self.cache.recompile(token)
        except KeyError as exc:
            message = exc.args[0] if exc.args else str(exc)
            self._set_status(f"cannot recompile: {message}", error=True)
            return None
        except Exception as exc:
            self._set_status(f"recompile failed: {type(exc).__name__}: {exc}", error=True)
            return None
        self.history.record("recompile", self.cache.lookups())
        layer = result.layers.get(stage)
        if layer is not None:
            self._selected = (stage, layer.token)
        self._refresh_all()
        self._set_status(f"recompiled {_short_kernel(result.kernel)} {result.signature_text} "
                         f"[{result.config.summary()}] in {format_seconds(result.seconds)}")
        return result

    def clear(self, stage: Optional[str] = None) -> None:
        """Drop every entry of `stage` (None or "all": every layer)."""
        stage = None if stage in (None, "", _EVERY_LAYER) else stage
        before = sum(1 for r in self.cache.entries(stage=stage))
        self.cache.clear(stage)
        self._refresh_all()
        self._set_status(f"cleared {stage or 'every layer'}: {before} entr{'y' if before == 1 else 'ies'} dropped")

    def _refresh_all(self) -> None:
        """Refresh this inspector and every other open one of the same cache."""
        self.refresh()
        for widget in (self._siblings() if self._siblings is not None else ()):
            if widget is not self and widget.cache is self.cache:
                widget.refresh()

    def _set_status(self, text: str, error: bool = False) -> None:
        cls = "gpucache-status-error" if error else "gpucache-status-ok"
        self.status.value = f'<div role="status" aria-live="polite" class="{cls}">{_esc(text)}</div>'

    # -- display -----------------------------------------------------------------
    def snapshot(self) -> CacheSnapshot:
        return CacheSnapshot(self.cache, self.history)

    def __repr__(self) -> str:
        return self.snapshot().text()

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        snapshot = self.snapshot()
        bundle["text/plain"] = snapshot.text()
        bundle["text/html"] = snapshot.html()
        return bundle



def inspector(cache=None) -> Inspector:
    """The live inspector widget of `cache` (default: the magic's cache).

    In an IPython session with the extension loaded, the session's (see
    `gpucache_ext.session.Session.inspector`): the same widget for the same
    cache while it is open, refreshed after every cell.  Elsewhere a new
    widget, refreshed by its `refresh` method.
    """
    from . import _session, default_cache

    session = _session()
    if session is not None:
        return session.inspector(cache)
    return Inspector(default_cache() if cache is None else cache)
