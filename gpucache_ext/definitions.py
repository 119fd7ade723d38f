"""Where a kernel was defined: the place part of its definition's identity.

A kernel definition is known by its qualified name (``__main__.matmul_act``,
``mypkg.kernels.axpy``) and the place its ``def`` stands: a notebook cell
(by the cell's id, which survives edits, re-runs and restarts) or a file.
Its versions (source edits, edits to what it calls or reads, signatures,
configs) are entries under that one definition; none of this is in any
token, so moving a kernel to another cell misses nothing.

A `Place` is a string that knows its kind: ``"cell:<cell id>"`` or
``"file:<absolute path>"`` as every tier keeps it; None where it is not
known (a terminal IPython session has no cell ids: a kernel of one name there
is one definition).  Which code is a notebook cell, and which number a cell
last ran as, only the IPython session knows: it gives its cache a `Places`
that asks it (``cache.places``); a cache of plain Python has `FILES`, which
knows files alone.  Nothing here imports IPython or keeps a module-wide
resolver.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Tuple

__all__ = ["Place", "Places", "FILES", "place_of", "describe", "explain"]

CELL, FILE = "cell", "file"


class Place(str):
    """A place as its stored words (``"cell:1a2b..."``, ``"file:/x/k.py"``),
    with its `kind` (`CELL`, `FILE`, or "" for words of another form) and
    `where` (the cell id or the path)."""

    __slots__ = ("kind", "where")

    def __new__(cls, kind: str, where: str):
        self = super().__new__(cls, f"{kind}:{where}")
        self.kind, self.where = kind, where
        return self

    def __reduce__(self):
        return (Place, (self.kind, self.where))

    @classmethod
    def cell(cls, cell_id: str) -> "Place":
        return cls(CELL, cell_id)

    @classmethod
    def file(cls, path: str) -> "Place":
        return cls(FILE, os.path.realpath(path))

    @classmethod
    def of(cls, text: Optional[str]) -> Optional["Place"]:
        """Stored words as a `Place` (itself where it is one); None for none."""
        if not text or isinstance(text, Place):
            return text or None
        kind, _, where = str(text).partition(":")
        place = super().__new__(cls, str(text))
        place.kind, place.where = (kind, where) if kind in (CELL, FILE) else ("", str(text))
        return place


# (code filename -> (cell id or None, the cell's execution count) for a
# notebook cell, None for anything else)
CellsOf = Callable[[str], Optional[Tuple[Optional[str], Optional[int]]]]


class Places:
    """Where code was defined, and a place in words, for one cache: `cells`
    tells which code names are notebook cells (``cells(filename)`` gives (cell
    id or None, execution count) for a cell's code, None otherwise) and
    `numbers` the count a cell id last ran as; without them only files are
    places (`FILES`)."""

    def __init__(self, cells: Optional[CellsOf] = None, numbers: Optional[Callable[[str], Optional[int]]] = None):
        self.cells, self.numbers = cells, numbers

    def of(self, code) -> Optional[Place]:
        """The place of the function whose code object is `code`."""
        filename = getattr(code, "co_filename", None)
        if not isinstance(filename, str):
            return None
        cell = self.cells(filename) if self.cells is not None else None
        if cell is not None:
            return Place.cell(cell[0]) if cell[0] else None
        if filename.startswith("<") or not os.path.isfile(filename):
            return None
        return Place.file(filename)

    def _number(self, place: Place) -> Optional[int]:
        return self.numbers(place.where) if self.numbers is not None else None

    def describe(self, place: Optional[str]) -> str:
        """A place in a few characters, as a label's suffix: ``In[5]`` (a cell
        run in this process, by its latest number), ``cell 1a2b3c4d`` (a cell
        not run since the restart), ``kernels.py`` (a file); ``?`` if unknown."""
        place = Place.of(place)
        if place is None:
            return "?"
        if place.kind == CELL:
            number = self._number(place)
            return f"In[{number}]" if number is not None else f"cell {place.where[:8]}"
        if place.kind == FILE:
            return os.path.basename(place.where)
        return str(place)

    def explain(self, place: Optional[str]) -> str:
        """A place in words: "cell In[5]", "a cell not run in this session (id
        1a2b3c4d)", "file /path/kernels.py", "an unknown place"."""
        place = Place.of(place)
        if place is None:
            return "an unknown place"
        if place.kind == CELL:
            number = self._number(place)
            return f"cell In[{number}]" if number is not None else \
                f"a cell not run in this session (id {place.where[:8]})"
        if place.kind == FILE:
            return f"file {place.where}"
        return str(place)


FILES = Places()  # knows files only: a cache of plain Python's places


def place_of(code) -> Optional[Place]:
    """`Places.of` for code outside any notebook (a file's, or none)."""
    return FILES.of(code)


def describe(place: Optional[str]) -> str:
    """`Places.describe` without a notebook: cells by their id."""
    return FILES.describe(place)


def explain(place: Optional[str]) -> str:
    """`Places.explain` without a notebook: cells by their id."""
    return FILES.explain(place)
