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

A cell's place also remembers the number the cell ran as when it was read
(`Place.number`: not part of its words, so not of the definition): entries
record it, so that a later process (``gpucache ls``, an inspector after a
restart) names a definition ``act@In[7]`` as the notebook still shows it,
and every view names one definition alike (`Places.suffixes`).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Callable, Dict, Iterable, List, Optional, Tuple

__all__ = ["Place", "Places", "FILES", "place_of", "describe", "explain"]

CELL, FILE = "cell", "file"


class Place(str):
    """A place as its stored words (``"cell:1a2b..."``, ``"file:/x/k.py"``),
    with its `kind` (`CELL`, `FILE`, or "" for words of another form),
    `where` (the cell id or the path) and, for a cell, `number`: the
    execution count it ran as when the place was read (None where unknown,
    or for a cell run without history, which has no number of its own).
    The number is a note for people, not part of the words: two places of
    one cell are equal whatever numbers they carry."""

    __slots__ = ("kind", "where", "number")

    def __new__(cls, kind: str, where: str, number: Optional[int] = None):
        self = super().__new__(cls, f"{kind}:{where}")
        self.kind, self.where = kind, where
        self.number = _count(number) if kind == CELL else None
        return self

    def __reduce__(self):
        return (Place, (self.kind, self.where, self.number))

    @classmethod
    def cell(cls, cell_id: str, number: Optional[int] = None) -> "Place":
        return cls(CELL, cell_id, number)

    @classmethod
    def file(cls, path: str) -> "Place":
        return cls(FILE, os.path.realpath(path))

    @classmethod
    def of(cls, text: Optional[str], number: Optional[int] = None) -> Optional["Place"]:
        """Stored words as a `Place` (itself where it is one and no `number`
        is given); None for none.  `number`: the cell's recorded number."""
        if not text:
            return None
        if isinstance(text, Place) and (number is None or text.number == _count(number)):
            return text
        kind, _, where = str(text).partition(":")
        place = super().__new__(cls, str(text))
        place.kind, place.where = (kind, where) if kind in (CELL, FILE) else ("", str(text))
        place.number = _count(number) if place.kind == CELL else None
        return place


def _count(number) -> Optional[int]:
    """An execution count as recorded (a positive int), else None (what a
    header from elsewhere holds is not trusted to be one)."""
    return number if isinstance(number, int) and not isinstance(number, bool) and number > 0 else None


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
        """The place of the function whose code object is `code`; a cell's
        with the number it ran as (`numbers`' where it has them: a cell run
        without history has none of its own)."""
        filename = getattr(code, "co_filename", None)
        if not isinstance(filename, str):
            return None
        cell = self.cells(filename) if self.cells is not None else None
        if cell is not None:
            cell_id, count = cell
            if not cell_id:
                return None
            return Place.cell(cell_id, self.numbers(cell_id) if self.numbers is not None else count)
        if filename.startswith("<") or not os.path.isfile(filename):
            return None
        return Place.file(filename)

    def number(self, place: Optional[str]) -> Optional[int]:
        """The number a cell's place goes by: the latest this session ran it
        as, else the one its entry recorded (`Place.number`: the notebook
        shows it beside the cell until it runs again); None for a cell run
        without history, or a place that is no cell."""
        place = Place.of(place)
        if place is None or place.kind != CELL:
            return None
        known = self.numbers(place.where) if self.numbers is not None else None
        return known if known is not None else place.number

    def describe(self, place: Optional[str]) -> str:
        """A place in a few characters, as a label's suffix: ``In[5]`` (a cell
        by its `number`), ``cell 1a2b3c4d`` (a cell of no known number),
        ``kernels.py`` (a file); ``?`` if unknown.  `suffixes` tells places
        apart that read alike."""
        place = Place.of(place)
        if place is None:
            return "?"
        if place.kind == CELL:
            number = self.number(place)
            return f"In[{number}]" if number is not None else f"cell {place.where[:_ID_SHOWN]}"
        if place.kind == FILE:
            return os.path.basename(place.where)
        return str(place)

    def suffixes(self, places: Iterable[Optional[str]]) -> Dict[Optional[str], str]:
        """The definitions of one kernel name, each by its place in a few
        characters (`describe`), no two alike: where two read the same (two
        cells run without history, ``In[7]`` recorded by two notebooks, two
        files named ``kernels.py``), cells go by their ids (``cell 1a2b3c4d``,
        as many characters as tell them apart) and files by as much of their
        paths as differs.  {place's words (None: unknown): suffix}."""
        found: Dict[Optional[str], Optional[Place]] = {}
        for place in map(Place.of, places):
            found.setdefault(None if place is None else str(place), place)
        shown = {words: self.describe(place) for words, place in found.items()}
        alike = Counter(shown.values())
        cells = [place.where for place in found.values() if place is not None and place.kind == CELL]
        ids = dict(zip(cells, _distinct_prefixes(cells)))
        files = [place.where for words, place in found.items()
                 if place is not None and place.kind == FILE and alike[shown[words]] > 1]
        tails = dict(zip(files, _distinct_tails(files)))
        for words, place in found.items():
            if place is None:
                continue
            if place.kind == CELL and (alike[shown[words]] > 1 or self.number(place) is None):
                shown[words] = f"cell {ids[place.where]}"
            elif place.where in tails:
                shown[words] = tails[place.where]
        return shown

    def explain(self, place: Optional[str]) -> str:
        """A place in words: "cell In[5]" (run in this session), "cell In[5]
        as numbered when it last ran (id 1a2b3c4d)" (a number an entry
        recorded), "a cell not run in this session (id 1a2b3c4d)", "file
        /path/kernels.py", "an unknown place"."""
        place = Place.of(place)
        if place is None:
            return "an unknown place"
        if place.kind == CELL:
            if self.numbers is not None and self.numbers(place.where) is not None:
                return f"cell In[{self.numbers(place.where)}]"
            if place.number is not None:
                return f"cell In[{place.number}] as numbered when it last ran (id {place.where[:_ID_SHOWN]})"
            return f"a cell not run in this session (id {place.where[:_ID_SHOWN]})"
        if place.kind == FILE:
            return f"file {place.where}"
        return str(place)


_ID_SHOWN = 8  # a cell id's characters a label shows, at least


def _distinct_prefixes(ids: List[str]) -> List[str]:
    """Each of `ids` cut to `_ID_SHOWN` characters, or as many more as tell it from the others."""
    shown = []
    for one in ids:
        size = _ID_SHOWN
        while size < len(one) and any(other != one and other[:size] == one[:size] for other in ids):
            size += 1
        shown.append(one[:size])
    return shown


def _distinct_tails(paths: List[str]) -> List[str]:
    """Each of `paths` by its last parts, as many as tell it from the others ("a/kernels.py")."""
    shown = []
    for one in paths:
        parts = one.split(os.sep)
        size = 1
        while size < len(parts) and any(other != one and other.split(os.sep)[-size:] == parts[-size:]
                                        for other in paths):
            size += 1
        shown.append("/".join(parts[-size:]))
    return shown


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
