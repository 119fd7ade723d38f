"""The small pieces every view is made of: HTML escaping, text cut to a
width, a class attribute, a kernel's short name."""

from __future__ import annotations

import html
from typing import Any

from ..tokens import short_name

short_kernel = short_name


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fit(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


def class_attr(cls: str) -> str:
    return f' class="{cls}"' if cls else ""
