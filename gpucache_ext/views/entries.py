"""The list of cached entries: a label per kernel definition, a row's
columns, padded lines for the listbox, and the static text and HTML lists."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Dict, List, Optional, Tuple

from .. import sessions
from ..pipeline.definitions import Place
from ..pipeline.results import EntryInfo
from ..units import format_age, format_bytes
from .markup import esc, fit, short_kernel

_TOKEN_SHORT = 8
MAX_LIST_ROWS = 500
_MAX_STATIC_ROWS = 40


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


def _listed(row) -> Tuple[str, str, str, Optional[Place], float]:
    """(stage, token, kernel, place, created) of an `EntryInfo`, or of a
    plain row of the ``gpucache`` command's (read from an entry's header: its
    place's number apart, ``place_number``)."""
    if isinstance(row, Mapping):
        return (row["stage"], row["token"], row["kernel"], Place.of(row.get("place"), row.get("place_number")),
                row.get("created") or 0.0)
    return row.stage, row.token, row.kernel, Place.of(row.place), row.created or 0.0


def kernel_labels(rows, places=None) -> Dict[Tuple[str, str], str]:
    """The entries list's kernel column, per row's (stage, token): the
    kernel's definition, named alike in the inspector, the ``gpucache``
    command and the reports.  `rows`: `EntryInfo`s, or the command's plain
    rows (`_listed`).

    The short name, told apart only where two definitions share it: by the
    shortest tail of their qualified names that differs (``a.axpy``,
    ``b.axpy``), and where one qualified name was defined in two places
    (``axpy`` in two cells: the magic names both ``__main__.axpy``) by ``@``
    and where (`places.suffixes`, `gpucache_ext.pipeline.definitions.Places`;
    default: the current session's): ``axpy@In[5]`` (the number the cell
    last ran as in this session, else the one its newest entry recorded),
    ``axpy@cell 1a2b3c4d`` (a cell of no known number), ``axpy@kernels.py``;
    never two definitions alike.  A definition's versions (edits to it or
    to what it calls or reads, signatures, configs) all keep its one label."""
    where = places if places is not None else sessions.places()
    qualnames: Dict[str, set] = {}
    defined: Dict[str, Dict[Optional[str], Tuple[float, Optional[Place]]]] = {}
    listed = [_listed(row) for row in rows]
    for _, _, kernel, place, created in listed:
        qualnames.setdefault(short_kernel(kernel), set()).add(kernel)
        words = None if place is None else str(place)
        # (a definition's place as its newest entry that recorded a number has it)
        seen = (place is not None and place.number is not None, created)
        held = defined.setdefault(kernel, {}).get(words)
        if held is None or seen > held[0]:
            defined[kernel][words] = (seen, place)
    suffixes = {kernel: where.suffixes(place for _, place in found.values())
                for kernel, found in defined.items() if len(found) > 1}
    labels = {}
    for stage, token, kernel, place, _ in listed:
        same = qualnames[short_kernel(kernel)]
        name = short_kernel(kernel) if len(same) == 1 else _distinct_tail(kernel, same)
        if kernel in suffixes:
            name += "@" + suffixes[kernel][None if place is None else str(place)]
        labels[(stage, token)] = name
    return labels


def _fit_kernel(text: str, width: int) -> str:
    """`fit` that keeps an ``@place`` suffix whole (it is what tells two rows apart)."""
    name, mark, place = text.rpartition("@")
    if not mark or len(text) <= width or len(place) + 2 > width:
        return fit(text, width)
    return fit(name, width - len(place) - 1) + "@" + place


def entry_cells(row: EntryInfo, now: float, kernel: Optional[str] = None) -> Dict[str, str]:
    """One row's columns as text; `kernel`: its label (`kernel_labels`), else the short name."""
    return {
        "kernel": kernel if kernel is not None else short_kernel(row.kernel),
        "signature": row.signature,
        "config": row.config,
        "stage": row.stage,
        "token": row.token[:_TOKEN_SHORT],
        "tier": ",".join(row.tiers),
        "size": format_bytes(row.bytes),
        "age": format_age(now - row.created),
        "why built": "; ".join(row.reasons),
    }


def _clock(when: float) -> str:
    """A moment as local date and time to the second: "2026-12-06 18:42:10"."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


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
        text = cells[column] if column == "config" else (_fit_kernel if column == "kernel" else fit)(
            cells[column], widths[column])
        parts.append(text.rjust(widths[column]) if column in _RIGHT else text.ljust(widths[column]))
    return "  ".join(parts).rstrip()


def entries_text(rows: List[EntryInfo], now: float, limit: int = 20,
                 labels: Optional[Dict[Tuple[str, str], str]] = None) -> str:
    if not rows:
        return "entries: none cached"
    labels = labels or {}
    cells = [entry_cells(r, now, labels.get((r.stage, r.token))) for r in rows[:limit]]
    widths = entry_widths(cells)
    lines = [entry_line({c: c for c in ENTRY_COLUMNS}, widths)]
    lines += [entry_line(c, widths) for c in cells]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return "\n".join(lines)


def entries_html(rows: List[EntryInfo], now: float, limit: int = _MAX_STATIC_ROWS,
                 labels: Optional[Dict[Tuple[str, str], str]] = None) -> str:
    if not rows:
        return '<p class="gpucache-muted">No entries are cached.</p>'
    labels = labels or {}
    head = "".join(f'<th scope="col">{esc(c)}</th>' for c in ENTRY_COLUMNS)
    body = []
    for row in rows[:limit]:
        cells = entry_cells(row, now, labels.get((row.stage, row.token)))
        tds = []
        for column in ENTRY_COLUMNS:
            cls = "gpucache-text" if column not in _RIGHT else ""
            if column in ("token", "signature"):
                cls += " gpucache-code"
            # (an age is as of `now`: a shown table is not updated, so each says when it was built)
            title = f' title="built {_clock(row.created)}"' if column == "age" else ""
            tds.append(f'<td class="{cls.strip()}"{title}>{esc(cells[column])}</td>')
        body.append(f'<tr data-stage="{esc(row.stage)}" data-token="{esc(row.token)}">'
                    + "".join(tds) + "</tr>")
    more = (f'<p class="gpucache-muted">... and {len(rows) - limit} more</p>'
            if len(rows) > limit else "")
    return (f'<table class="gpucache-table gpucache-entries-table"><caption>Cached entries, '
            f'newest first (ages as of {_clock(now)})</caption><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody>'
            f"</table>{more}")
