"""The small pieces every view is made of: HTML escaping, text cut to a
width, a class attribute, a kernel's short name, a table that may be wider
than its output."""

from __future__ import annotations

import html
from typing import Any

from ..keys.tokens import short_name

short_kernel = short_name


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fit(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


def class_attr(cls: str) -> str:
    return f' class="{cls}"' if cls else ""


def scrolling_table(table: str, caption: str, label: str) -> str:
    """`table` (HTML) where it may be wider than the output: its `caption`
    (plain text) as a paragraph above it, which wraps to the output's width,
    and the table alone in a box that scrolls sideways (a keyboard scrolls
    it too; `label` names the box).  Prose is never in a box that scrolls:
    a table's own <caption> is as wide as the table, so it would be cut."""
    return (f'<p class="gpucache-caption">{esc(caption)}</p><div class="gpucache-table-scroll" role="region" '
            f'tabindex="0" aria-label="{esc(label)}">{table}</div>')
