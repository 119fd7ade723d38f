"""The source files an artifact's debug info names, and what ptxas records
of them.  Apart from the stages, whose import brings numba-cuda's compiler:
a compile that every stage serves from a cache reads these and none of the
compiler."""

from __future__ import annotations

import os
import re
from typing import Tuple

from .artifacts import LLVMArtifact

_DI_FILE = re.compile(r'!DIFile\(directory: "((?:[^"\\]|\\.)*)", filename: "((?:[^"\\]|\\.)*)"\)')


def debug_source_files(llvm: LLVMArtifact) -> Tuple[str, ...]:
    """The source files the debug info of `llvm` names (none without debug
    info).  ptxas, inside nvJitLink, reads each one's size and modification
    time from the file system and writes them into the cubin's line table:
    they are inputs of the cubin stage (see `source_file_stats`)."""
    found = getattr(llvm, "_debug_sources", None)  # (read once per artifact: its modules never change)
    if found is None:
        found = llvm._debug_sources = _debug_source_files(llvm)
    return found


def _debug_source_files(llvm: LLVMArtifact) -> Tuple[str, ...]:
    found = set()
    for module in llvm.modules:
        if "!DIFile(" in module:
            for directory, filename in _DI_FILE.findall(module):
                found.add(os.path.join(_unescape(directory), _unescape(filename)))
    return tuple(sorted(found))


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def source_file_stats(paths) -> list:
    """What ptxas records of each file debug info names: its size and
    modification time, or that it is absent (a cell has no file)."""
    stats = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stats.append([path, "absent"])
        else:
            stats.append([path, info.st_size, info.st_mtime_ns])
    return stats
