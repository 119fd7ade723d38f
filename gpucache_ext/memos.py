"""The package's module-level memos and process state, each registered once.

A memo remembers an answer that can always be worked out again (a
component's digest, a library's files, a toolchain part's version): dropping
it changes no result, only what the next answer costs.  `forget` drops every
memo at once, as a new process starts: what the tests use to compare a
compile with one from nothing, in the same process.  Process state (numba's
patches installed, the settings a default cache is made with) is registered
as such, with why it is kept, and is never dropped.

Registering is how a module-level dict, set or ``functools.lru_cache`` is
declared: a test reads every module and fails on one that is neither a memo
nor state (tests/test_memos.py).  Imports nothing of the package.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

__all__ = ["memo", "cached", "state", "forget", "memos", "states"]

Held = TypeVar("Held")

_MEMOS: Dict[str, Tuple[Any, Callable[[], None]]] = {}
_STATE: Dict[str, Tuple[Any, str]] = {}


def memo(name: str, holder: Held) -> Held:
    """Register `holder` (a dict, set or other container with ``clear``, or
    a function with ``cache_clear``) as the memo `name`; returns it."""
    clear = getattr(holder, "cache_clear", None) or getattr(holder, "clear", None)
    if clear is None:
        raise TypeError(f"memo {name!r}: {type(holder).__name__} has neither clear() nor cache_clear()")
    _MEMOS[name] = (holder, clear)
    return holder


def cached(name: str, maxsize: Optional[int] = 128) -> Callable[[Callable], Callable]:
    """``functools.lru_cache(maxsize)``, registered as the memo `name`."""
    def wrap(function: Callable) -> Callable:
        return memo(name, functools.lru_cache(maxsize=maxsize)(function))
    return wrap


def state(name: str, holder: Held, why: str) -> Held:
    """Register `holder` as process state `name`, never dropped, for `why`; returns it."""
    _STATE[name] = (holder, why)
    return holder


def forget() -> None:
    """Drop every memo, as a new process starts with none."""
    for _, clear in list(_MEMOS.values()):
        clear()


def memos() -> Dict[str, Any]:
    """{name: holder} of every memo registered so far."""
    return {name: holder for name, (holder, _) in _MEMOS.items()}


def states() -> Dict[str, Tuple[Any, str]]:
    """{name: (holder, why)} of the process state registered so far."""
    return dict(_STATE)


def registered() -> List[int]:
    """The ids of every holder registered, memo or state."""
    return [id(holder) for holder, _ in _MEMOS.values()] + [id(holder) for holder, _ in _STATE.values()]
