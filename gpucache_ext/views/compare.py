"""Two entries compared: the "compare with" choices, and their code side by
side (`gpucache_ext.queries.EntryComparison`)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

from ..keys.tokens import short_token
from .markup import esc, scrolling_table, short_kernel

_MAX_DIFF_ROWS = 2000


def compare_options(rows, labels: Optional[Dict[Tuple[str, str], str]] = None,
                    digest_of: Optional[Callable[[str], Optional[str]]] = None, selected=None
                    ) -> List[Tuple[str, str]]:
    """The "compare with" choices: (label, token) per `EntryInfo` in `rows`
    (`gpucache_ext.queries.comparable_entries`, newest first), the label
    naming what tells the entries apart: the kernel's definition (its name,
    and the cell or file it was defined in where `labels`, `kernel_labels`,
    say so), its signature, its whole config (sm and every field away from
    its default) and short token:
    ``axpy@In[7] (float32[::1], float32) [sm_86 fastmath=True max_registers=32] 3f2a1c0b9e12``.
    Entries that read alike so far, among themselves or with `selected`
    (the `EntryInfo` they are compared with), are versions of one
    definition's code (an edit, a global it reads): of those, entries of the same content
    (`digest_of(token)`, the artifact's digest; asked of those alone) are
    one choice, the newest, as comparing with either shows the same code;
    the rest say which run of their cell built each (``... [sm_86] from
    In[6] ...``), else when (``built 18:42:10``)."""
    return compare_choices(rows, labels, digest_of, selected)[0]


def compare_choices(rows, labels: Optional[Dict[Tuple[str, str], str]] = None,
                    digest_of: Optional[Callable[[str], Optional[str]]] = None, selected=None
                    ) -> Tuple[List[Tuple[str, str]], Dict[str, str]]:
    """`compare_options`, and {token of an identical duplicate left out: the
    token of the choice that stands for it}."""
    labels = labels or {}

    def text_of(row) -> str:
        return f"{labels.get((row.stage, row.token)) or short_kernel(row.kernel)} {row.signature} [{row.config}]"

    said = [(text_of(row), row) for row in rows]
    beside = [(text_of(selected), selected)] if selected is not None else []
    alike = Counter(text for text, _ in said + beside)
    first: Dict[Tuple[str, str], str] = {}
    kept, same = [], {}
    for text, row in said:
        digest = digest_of(row.token) if alike[text] > 1 and digest_of is not None else None
        if digest is not None and (text, digest) in first:
            same[row.token] = first[(text, digest)]  # (an identical duplicate of a newer choice)
            continue
        if digest is not None:
            first[(text, digest)] = row.token
        kept.append((text, row))
    return _told_apart(kept, beside), same


def _told_apart(said, beside=()) -> List[Tuple[str, str]]:
    """(text, row) pairs as choices, those that read alike told apart by the
    run of their cell that built each ("from In[6]": IPython's ``In[6]``
    holds the code it ran), else, or where those are alike too, by when each
    was built ("built 18:42:10"); `beside` (the selected entry's pair) counts, not shown."""
    alike = Counter(text for text, _ in [*said, *beside])
    said, beside = ([(text + (f" from In[{_number(row)}]" if alike[text] > 1 and _number(row) else ""), row)
                     for text, row in pairs] for pairs in (said, beside))
    alike = Counter(text for text, _ in [*said, *beside])
    days = {time.strftime("%Y-%m-%d", time.localtime(row.created)) for text, row in said if alike[text] > 1}
    when = "%H:%M:%S" if len(days) < 2 else "%Y-%m-%d %H:%M:%S"
    return [(f"{text}{' built ' + time.strftime(when, time.localtime(row.created)) if alike[text] > 1 else ''} "
             f"{short_token(row.token)}", row.token) for text, row in said]


def _number(row) -> Optional[int]:
    """The number the row's cell ran as when it was built (`Place.number`), if recorded."""
    return getattr(row.place, "number", None)


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
