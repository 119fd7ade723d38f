"""The chart of hits (up) and misses (down) per stage, one column per cell
that used the cache, as SVG and as text."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

from ..backends import always_listed
from ..keys.stagespec import ALL_STAGES
from .markup import esc, fit

_CHART_POINTS = 30
_CHART_LABEL_CHARS = 12  # a cell label under the chart (whole in the column's tooltip)
_CHART_CHAR_PX = 7.0  # a character of the chart's 10px text, at most (DejaVu Sans digits: 6.4)
_CHART_LABEL_GAP = 6


def _text_width(text: str) -> float:
    """An upper bound on the width of `text` in the chart's 10px font, in px."""
    return len(str(text)) * _CHART_CHAR_PX


def chart_stages(points) -> Tuple[str, ...]:
    """The chart's rows: the default backend's four stages, and another
    stage (the fatbin, the other backend's) where a cell looked it up."""
    active = {stage for p in points for stage, counts in p["stages"].items() if any(counts)}
    listed = always_listed() - {"fatbin"}
    return tuple(stage for stage in ALL_STAGES if stage in listed or stage in active)


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
    labels = [fit(p["label"], _CHART_LABEL_CHARS) for p in points]
    label_w = max(_text_width(label) for label in labels) + _CHART_LABEL_GAP
    step = max(1, math.ceil(label_w / col))
    width = max(320, left + col * len(points) + max(8, math.ceil(label_w / 2 - col / 2)))
    stages = chart_stages(points)
    height = top + row_h * len(stages) + bottom
    peak = max(1, max(max(h, m) for p in points for h, m in p["stages"].values()))
    totals = {s: (sum(p["stages"].get(s, (0, 0))[0] for p in points),
                  sum(p["stages"].get(s, (0, 0))[1] for p in points)) for s in stages}
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
    for r, stage in enumerate(stages):
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
    stages = chart_stages(points)
    cells = [[f"{p['stages'].get(s, (0, 0))[0]}/{p['stages'].get(s, (0, 0))[1]}" for p in points]
             for s in stages]
    widths = [max(len(labels[i]), *(len(c[i]) for c in cells)) for i in range(len(points))]
    lines = ["hits/misses per cell".ljust(8)]
    lines.append("cell    " + "  ".join(lab.rjust(w) for lab, w in zip(labels, widths)))
    for stage, row in zip(stages, cells):
        lines.append(f"{stage:<8}" + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)
