"""Writing files so that readers never see a torn one.

A leaf module (it imports nothing of the package): the disk tier and the
toolchain memo both write through it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, prefix: str) -> Optional[int]:
    """Write `data` to `path` through a temporary file (named `prefix`...) in
    its folder and `os.replace`: readers see the old file or the new one, never
    a torn one.  Returns the size of the file it replaced (None: there was
    none); raises OSError, leaving no temporary file behind."""
    temp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".part")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        try:
            replaced = path.stat().st_size
        except FileNotFoundError:
            replaced = None
        os.replace(temp, path)
        temp = None
        return replaced
    finally:
        if temp is not None:
            try:
                os.unlink(temp)
            except OSError:
                pass
