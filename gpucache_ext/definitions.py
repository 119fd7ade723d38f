"""Where a kernel was defined: the place part of its definition's identity.

A kernel definition is known by its qualified name (``__main__.matmul_act``,
``mypkg.kernels.axpy``) and the place its ``def`` stands: a notebook cell
(by the cell's id, which survives edits, re-runs and restarts) or a file.
Its versions (source edits, edits to what it calls or reads, signatures,
configs) are entries under that one definition; none of this is in any
token, so moving a kernel to another cell misses nothing.

A place is a string: ``"cell:<cell id>"`` or ``"file:<absolute path>"``;
None where it is not known (a terminal IPython session has no cell ids: a
kernel of one name there is one definition).  The IPython layer tells this
module which code names are cells (`set_cell_resolver`); core modules ask
`place_of` and `describe`, and import nothing of IPython.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Tuple

# (code filename -> (cell id or None, the cell's execution count) for a
# notebook cell, None for anything else), set by the IPython session
_cells: Optional[Callable[[str], Optional[Tuple[Optional[str], Optional[int]]]]] = None
# cell id -> the latest execution count it ran as, in this process
_numbers: Optional[Callable[[str], Optional[int]]] = None


def set_cell_resolver(cells, numbers) -> None:
    """Install (or, with None, remove) how code names map to notebook cells:
    ``cells(filename)`` gives (cell id or None, execution count) for a cell's
    code and None otherwise; ``numbers(cell_id)`` the count it last ran as."""
    global _cells, _numbers
    _cells, _numbers = cells, numbers


def place_of(code) -> Optional[str]:
    """The place of the function whose code object is `code`."""
    filename = getattr(code, "co_filename", None)
    if not isinstance(filename, str):
        return None
    cell = _cells(filename) if _cells is not None else None
    if cell is not None:
        cell_id = cell[0]
        return f"cell:{cell_id}" if cell_id else None
    if filename.startswith("<") or not os.path.isfile(filename):
        return None
    return "file:" + os.path.realpath(filename)


def describe(place: Optional[str]) -> str:
    """A place in a few characters, as a label's suffix: ``In[5]`` (a cell
    run in this process, by its latest number), ``cell 1a2b3c4d`` (a cell
    not run since the restart), ``kernels.py`` (a file); ``?`` if unknown."""
    if not place:
        return "?"
    kind, _, where = place.partition(":")
    if kind == "cell":
        number = _numbers(where) if _numbers is not None else None
        return f"In[{number}]" if number is not None else f"cell {where[:8]}"
    if kind == "file":
        return os.path.basename(where)
    return place


def explain(place: Optional[str]) -> str:
    """A place in words: "cell In[5]", "a cell not run since the restart
    (id 1a2b3c4d)", "file /path/kernels.py", "an unknown place"."""
    if not place:
        return "an unknown place"
    kind, _, where = place.partition(":")
    if kind == "cell":
        number = _numbers(where) if _numbers is not None else None
        return f"cell In[{number}]" if number is not None else \
            f"a cell not run in this session (id {where[:8]})"
    if kind == "file":
        return f"file {where}"
    return place
