"""What every command prints with: its error, counted nouns, a progress bar."""

from __future__ import annotations

import sys
import time


class CommandError(Exception):
    """A problem with the command's input; printed without a traceback."""


def counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


class Progress:
    """A progress bar on stderr for long operations (only on a terminal)."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (time.monotonic() - self._last < 0.1 and done < total):
            return
        self._last = time.monotonic()
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()
