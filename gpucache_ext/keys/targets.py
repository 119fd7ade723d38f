"""What typing and lowering learn about the target while they run.

numba-cuda lowers almost every kernel to the same NVVM IR for every compute
capability; a few operations ask for it (``cc >= (6, 0)`` for a native
float64 atomic add, ``cc >= (7, 5)`` for ``tanh.approx``).  The pipeline hands
numba a compute capability that records each such question and its answer.
An artifact is then valid for every target that answers the same questions the
same way: IR built at sm_86 serves sm_80 unless lowering asked something the
two answer differently.  Any other use of the value (indexing it, printing it)
pins the artifact to exactly that target.

A `TargetReads` is that record: a frozenset of ``(op, operand, answer)``.
Empty means the artifact serves every target.
"""

from __future__ import annotations

import contextlib
import operator
import threading
from collections import OrderedDict
from typing import Any, FrozenSet, Iterable, List, Tuple

Read = Tuple[str, Tuple[Any, ...], bool]
TargetReads = FrozenSet[Read]

NO_READS: TargetReads = frozenset()

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}


def holds_for(reads: Iterable[Read], cc: Tuple[int, int]) -> bool:
    """True when target `cc` answers every recorded question the same way."""
    return all(_OPS[op](tuple(cc), tuple(operand)) == answer for op, operand, answer in reads)


def reads_key(reads: Iterable[Read]) -> List[list]:
    """A canonical JSON-able form of `reads` (for tokens)."""
    return sorted([op, list(operand), answer] for op, operand, answer in reads)


def reads_from_key(key) -> TargetReads:
    """The reads `reads_key` wrote (a stored entry's)."""
    return frozenset((op, tuple(operand), bool(answer)) for op, operand, answer in key)


def pinned(cc: Tuple[int, int]) -> TargetReads:
    """The reads of an artifact that serves target `cc` alone (a compiler
    that is given the target outright, numba-cuda-mlir's)."""
    return frozenset({("==", tuple(cc), True)})


def describe(reads: Iterable[Read]) -> str:
    """``cc>=(7, 5)`` style text, for miss explanations."""
    parts = []
    for op, operand, answer in sorted(reads, key=repr):
        text = f"cc{op}{tuple(operand)}"
        parts.append(text if answer else f"not {text}")
    return ", ".join(parts) or "any target"


class _Frames(threading.local):
    def __init__(self):
        self.stack: List[set] = []


_frames = _Frames()


@contextlib.contextmanager
def track():
    """Collect the target reads made inside the block (yields a set, filled in).

    Frames nest: a read inside a device function's compile is also a read of
    the kernel being compiled around it.
    """
    reads: set = set()
    _frames.stack.append(reads)
    try:
        yield reads
    finally:
        _frames.stack.pop()


def note(reads: Iterable[Read]) -> None:
    """Record reads in every open frame (also used to replay a memoised compile's reads)."""
    reads = list(reads)
    for frame in _frames.stack:
        frame.update(reads)


class TrackedCC(tuple):
    """A compute capability that records the questions asked of it."""

    def plain(self) -> Tuple[int, ...]:
        """The value as a plain tuple, without recording a read."""
        return tuple(tuple.__iter__(self))

    def _ask(self, op, other):
        if not isinstance(other, tuple):
            return NotImplemented
        other = other.plain() if isinstance(other, TrackedCC) else tuple(other)
        answer = _OPS[op](self.plain(), other)
        note([(op, other, answer)])
        return answer

    def __lt__(self, other):
        return self._ask("<", other)

    def __le__(self, other):
        return self._ask("<=", other)

    def __gt__(self, other):
        return self._ask(">", other)

    def __ge__(self, other):
        return self._ask(">=", other)

    def __eq__(self, other):
        return self._ask("==", other)

    def __ne__(self, other):
        return self._ask("!=", other)

    def _pin(self):
        note([("==", self.plain(), True)])

    def __getitem__(self, index):
        self._pin()
        return tuple.__getitem__(self, index)

    def __iter__(self):
        self._pin()
        return tuple.__iter__(self)

    def __len__(self):
        self._pin()
        return tuple.__len__(self)

    def __hash__(self):
        self._pin()
        return tuple.__hash__(self)

    def __repr__(self):
        self._pin()
        return tuple.__repr__(self)

    __str__ = __repr__

    def __reduce__(self):
        self._pin()
        return (tuple, (self.plain(),))


class VariantMemo:
    """A small LRU memo whose values may hold for some targets only.

    Each key maps to a list of (reads, value); `get` returns the first value
    whose reads hold for the asked target.
    """

    def __init__(self, limit: int = 64, on_evict=None):
        self.limit = limit
        self.on_evict = on_evict  # called with each value dropped
        self.items: "OrderedDict[Any, list]" = OrderedDict()

    def get(self, key, cc):
        variants = self.items.get(key)
        if variants is None:
            return None
        self.items.move_to_end(key)
        for reads, value in variants:
            if holds_for(reads, cc):
                return value
        return None

    def put(self, key, reads: TargetReads, value) -> None:
        variants = self.items.setdefault(key, [])
        dropped = [v for r, v in variants if r == reads]
        variants[:] = [(r, v) for r, v in variants if r != reads] + [(reads, value)]
        self.items.move_to_end(key)
        while len(self.items) > self.limit:
            dropped += [v for _, v in self.items.popitem(last=False)[1]]
        if self.on_evict is not None:
            for old in dropped:
                self.on_evict(old)
