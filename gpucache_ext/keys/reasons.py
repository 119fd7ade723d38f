"""Why a stage was built, as data: `Reason`, words that know what they are
about; and the phrases every view builds from reasons, worded here alone.

A miss is explained in words ("sm 86 -> 80", "llvm input changed", "global K
2.5 -> 3.25 (read by activate)") and those words are what every view shows.
Code that filters or groups reasons (a stage whose only reason is that the
stage before it changed, a fatbin member's own reasons without the target
that tells targets apart) asks a reason what it is about instead of reading
its words: its `kind`, the token `component` it names ("sm", "global K",
"llvm", "code"), the values it shows (`old`, `new`) and the device functions
it was found within, innermost first.

`Reason` is a `str`, so reasons compare, hash, join and print as the words
they always were.  A stored entry keeps both: the words (what every version
and every listing reads) and, beside them, the data (`Reason.data`), which
`Reason.stored` puts back together, so that a process reading the entry after
a restart has the reason the build gave, a multi-word component's change
included.  `Reason.of` gives what data plain words can tell, for entries
written before the data was kept (or any plain string).

The phrases the cell report, ``gpucache explain`` and the inspector build
from reasons and stages (`and_join`, `own`, `cutoff_phrase`) are worded here
too, once, so that they read alike everywhere.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Mapping, Sequence, Tuple

from .stagespec import TARGET_STAGES

__all__ = ["Reason", "ADDED", "REMOVED", "CHANGED", "UPSTREAM", "NOTE", "KINDS", "and_join", "own",
           "cutoff_phrase"]

ADDED = "added"  # a component the nearest entry lacked ("global K added (2.5)")
REMOVED = "removed"  # a component only the nearest entry had
CHANGED = "changed"  # a component whose value or digest differs ("opt 3 -> 0", "code changed")
UPSTREAM = "upstream"  # the stage before this one gave another artifact ("llvm input changed")
NOTE = "note"  # anything else: a first compile, an entry dropped, a forced rebuild, a refusal
KINDS = (ADDED, REMOVED, CHANGED, UPSTREAM, NOTE)

_ONE_WORD_CHANGE = re.compile(r"\w+ \S+ -> \S+\Z")
_TEXT_FIELDS = ("component", "old", "new")  # (`Reason.data`'s fields besides kind and within)


class Reason(str):
    """One reason a stage was built: its words (the `str` itself) and what it
    is about (`kind`, `component`, `old` and `new` values, `within`)."""

    __slots__ = ("kind", "component", "within", "old", "new")

    def __new__(cls, text: str, kind: str = NOTE, component: str = "", within: Tuple[str, ...] = (),
                old: str = "", new: str = ""):
        self = super().__new__(cls, text)
        self.kind, self.component, self.within, self.old, self.new = kind, component, tuple(within), old, new
        return self

    def __reduce__(self):
        return (Reason, (str(self), self.kind, self.component, self.within, self.old, self.new))

    def __repr__(self) -> str:
        return f"Reason({str(self)!r}, kind={self.kind!r}, component={self.component!r})"

    # -- the reasons the cache gives, each with its words ----------------------

    @classmethod
    def added(cls, name: str, shown: str) -> "Reason":
        return cls(f"{name} added ({shown})", ADDED, name, new=shown)

    @classmethod
    def removed(cls, name: str, shown: str) -> "Reason":
        return cls(f"{name} removed (was {shown})", REMOVED, name, old=shown)

    @classmethod
    def changed(cls, name: str, old: str = "", new: str = "") -> "Reason":
        """"opt 3 -> 0"; "code changed" where the values read alike."""
        return cls(f"{name} {old} -> {new}" if old != new else f"{name} changed", CHANGED, name, old=old, new=new)

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
        return Reason(text, self.kind, self.component, self.within + (label,), self.old, self.new)

    # -- stored: the words, and the data beside them ---------------------------

    def data(self) -> dict:
        """What this reason is about, for an entry's header (JSON): its kind,
        and its component, values and path where it has them."""
        found: dict = {"kind": self.kind}
        found.update((name, getattr(self, name)) for name in _TEXT_FIELDS if getattr(self, name))
        if self.within:
            found["within"] = list(self.within)
        return found

    @classmethod
    def stored(cls, words: Sequence[str], data: Any = None) -> Tuple["Reason", ...]:
        """The reasons an entry's header keeps: each of `words` with its
        `data` where the header has data that fits (one well-formed mapping
        per reason); else as `Reason.of` reads the words (an entry written
        before the data was kept)."""
        words = [str(w) for w in words]
        if not isinstance(data, list) or len(data) != len(words):
            return tuple(map(cls.of, words))
        return tuple(cls._with_data(w, d) for w, d in zip(words, data))

    @classmethod
    def _with_data(cls, words: str, data: Any) -> "Reason":
        """`words` as the reason `data` says, or as `Reason.of` reads them where it does not fit."""
        if not isinstance(data, Mapping) or data.get("kind") not in KINDS:
            return cls.of(words)
        fields = {name: data.get(name, "") for name in _TEXT_FIELDS}
        within = data.get("within", [])
        if not all(isinstance(v, str) for v in fields.values()) or not isinstance(within, list) or not all(
                isinstance(label, str) for label in within):
            return cls.of(words)
        return cls(words, data["kind"], fields["component"], tuple(within), fields["old"], fields["new"])

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
        if rest == "input changed" and head in TARGET_STAGES:
            return cls(text, UPSTREAM, head)
        if _ONE_WORD_CHANGE.match(text):  # a one-word component's values: a config field's, "sm 86 -> 80"
            old, new = text[len(head) + 1:].split(" -> ")
            return cls(text, CHANGED, head, old=old, new=new)
        return cls(text)

    @property
    def is_upstream(self) -> bool:
        """Whether this says only that the stage before gave another artifact."""
        return self.kind == UPSTREAM


# -- the phrases built from reasons, for every view -------------------------


def and_join(names: Sequence[str]) -> str:
    """"ptx", "ptx and cubin", "llvm, ptx and cubin": stages, tiers, members."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def own(reasons: Iterable[str]) -> List[Reason]:
    """Reasons less "llvm input changed" and the like: what the stage before
    already says of itself."""
    return [r for r in map(Reason.of, reasons) if not r.is_upstream]


def cutoff_phrase(stage: str, reasons: Iterable[str], reused: Sequence[str]) -> str:
    """`stage` rebuilt to the same bytes as before (early cutoff), so that
    the stages `reused` after it were found: "ptx rebuilt (opt 3 -> 2), same
    bytes: cubin reused"."""
    reasons = list(reasons)
    why = f" ({', '.join(reasons)})" if reasons else ""
    return f"{stage} rebuilt{why}, same bytes: {and_join(reused)} reused"
