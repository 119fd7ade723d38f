"""Why a stage was built, as data: `Reason`, words that know what they are about.

A miss is explained in words ("sm 86 -> 80", "llvm input changed", "global K
2.5 -> 3.25 (read by activate)") and those words are what every tier keeps
and every view shows.  Code that filters or groups reasons (a stage whose
only reason is that the stage before it changed, a fatbin member's own
reasons without the target that tells targets apart) asks a reason what it
is about instead of reading its words: its `kind`, the token `component` it
names ("sm", "global K", "llvm", "code") and the device functions it was
found within, innermost first.

`Reason` is a `str`, so reasons compare, hash, join, print and persist as the
words they always were; `Reason.of` gives the data back for words read from a
tier written by an older version (or any plain string).
"""

from __future__ import annotations

import re
from typing import Tuple

__all__ = ["Reason", "ADDED", "REMOVED", "CHANGED", "UPSTREAM", "NOTE"]

ADDED = "added"  # a component the nearest entry lacked ("global K added (2.5)")
REMOVED = "removed"  # a component only the nearest entry had
CHANGED = "changed"  # a component whose value or digest differs ("opt 3 -> 0", "code changed")
UPSTREAM = "upstream"  # the stage before this one gave another artifact ("llvm input changed")
NOTE = "note"  # anything else: a first compile, an entry dropped, a forced rebuild, a refusal

_STAGES = ("typing", "llvm", "ptx", "cubin")
_ONE_WORD_CHANGE = re.compile(r"\w+ \S+ -> \S+\Z")


class Reason(str):
    """One reason a stage was built: its words (the `str` itself) and what it
    is about (`kind`, `component`, `within`)."""

    __slots__ = ("kind", "component", "within")

    def __new__(cls, text: str, kind: str = NOTE, component: str = "", within: Tuple[str, ...] = ()):
        self = super().__new__(cls, text)
        self.kind, self.component, self.within = kind, component, tuple(within)
        return self

    def __reduce__(self):
        return (Reason, (str(self), self.kind, self.component, self.within))

    def __repr__(self) -> str:
        return f"Reason({str(self)!r}, kind={self.kind!r}, component={self.component!r})"

    # -- the reasons the cache gives, each with its words ----------------------

    @classmethod
    def added(cls, name: str, shown: str) -> "Reason":
        return cls(f"{name} added ({shown})", ADDED, name)

    @classmethod
    def removed(cls, name: str, shown: str) -> "Reason":
        return cls(f"{name} removed (was {shown})", REMOVED, name)

    @classmethod
    def changed(cls, name: str, old: str = "", new: str = "") -> "Reason":
        """"opt 3 -> 0"; "code changed" where the values read alike."""
        return cls(f"{name} {old} -> {new}" if old != new else f"{name} changed", CHANGED, name)

    @classmethod
    def upstream(cls, stage: str) -> "Reason":
        """The stage before this one, `stage`, gave another artifact."""
        return cls(f"{stage} input changed", UPSTREAM, stage)

    def inside(self, label: str) -> "Reason":
        """This reason, found inside device function `label`, named from
        outside: what it reads "(read by activate)", what a function it calls
        reads "(read by inner, called by activate)", its own code "device
        function activate: code changed"."""
        if self.within and self.endswith(")") and self.component.startswith(("global ", "closure ")):
            text = f"{self[:-1]}, called by {label})"
        elif self.component.startswith(("global ", "closure ")):
            text = f"{self} (read by {label})"
        else:
            text = f"device function {label}: {self}"
        return Reason(text, self.kind, self.component, self.within + (label,))

    # -- plain words back to data ----------------------------------------------

    @classmethod
    def of(cls, text: str) -> "Reason":
        """`text` as a `Reason`: itself where it is one; else what its words
        say, for the forms that are unambiguous: "llvm input changed", a
        one-word component's "opt 3 -> 0"; anything else is a `NOTE`."""
        if isinstance(text, Reason):
            return text
        text = str(text)
        head, _, rest = text.partition(" ")
        if rest == "input changed" and head in _STAGES:
            return cls(text, UPSTREAM, head)
        if _ONE_WORD_CHANGE.match(text):  # a one-word component's values: a config field's, "sm 86 -> 80"
            return cls(text, CHANGED, head)
        return cls(text)

    @property
    def is_upstream(self) -> bool:
        """Whether this says only that the stage before gave another artifact."""
        return self.kind == UPSTREAM
