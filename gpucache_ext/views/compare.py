"""Two entries compared: the "compare with" choices, and their code side by
side (`gpucache_ext.queries.EntryComparison`)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..tokens import short_token
from .markup import esc, scrolling_table, short_kernel

_MAX_DIFF_ROWS = 2000


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
    table = ('<table class="gpucache-table gpucache-left gpucache-side-by-side"><colgroup><col class="gpucache-lineno">'
             '<col><col class="gpucache-mark"><col class="gpucache-lineno"><col></colgroup><thead><tr>'
             f'<th scope="col" colspan="2">{esc(diff.left_label)}</th><th scope="col"></th>'
             f'<th scope="col" colspan="2">{esc(diff.right_label)}</th></tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table>')
    caption = ("By instruction: addresses, encodings and the per-build parts of symbol names left out; changed "
               "lines are highlighted")
    return f'{head}{scrolling_table(table, caption, "the two listings side by side")}</div>'


def comparison_note_html(message: str) -> str:
    """Why two entries cannot be compared."""
    return f'<p class="gpucache-muted gpucache-compare-note">{esc(message)}</p>'
