"""The compilers the pipeline compiles with, each behind one interface.

A backend is what knows a compiler: how it types a Python function against a
snapshot and lowers it, what of the process its tokens must read besides the
snapshot (numba-cuda: its extension tables, the environment its code read,
its settings), what it refuses, and how a compile is bracketed (numba-cuda:
its registrations made meanwhile are its own).  Tokens, tiers, claims, the
driver (`pipeline`), the magic, the inspector and the CLI speak to `Backend`;
the stages a backend runs are declared in `stagespec` and built by its
`build`.  A backend is registered by name (`register_backend`), as
"module:Class" where it lives outside the package; `backend()` gives the one
a compile uses.  docs/design.md says how to add one.
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional

from .base import Backend
from .. import memos
from ..importing import import_named

__all__ = ["Backend", "DEFAULT_BACKEND", "backend", "register_backend", "registered_backends"]

DEFAULT_BACKEND = "numba-cuda"


_REGISTERED: Dict[str, str] = {DEFAULT_BACKEND: "gpucache_ext.backends.numba_cuda.backend:NumbaCuda"}
_MADE: Dict[str, Backend] = memos.state("backends._MADE", {},
                             "one backend object a process: every pipeline holds it")


def register_backend(name: str, where: str) -> None:
    """Make the `Backend` class at `where` ("module:Class", imported when
    first used) the backend called `name`."""
    if ":" not in where:
        raise ValueError(f"backend {name!r}: give where its class is as 'module:Class', not {where!r}")
    _REGISTERED[name] = where
    _MADE.pop(name, None)


def registered_backends() -> Iterator[str]:
    return iter(_REGISTERED)


def backend(name: Optional[str] = None) -> Backend:
    """The backend called `name` (None: the default one), made once a process."""
    name = name or DEFAULT_BACKEND
    made = _MADE.get(name)
    if made is not None:
        return made
    where = _REGISTERED.get(name)
    if where is None:
        raise ValueError(f"no backend is called {name!r}; the backends are {', '.join(_REGISTERED)}")
    kind = import_named(where, f"backend {name!r}, registered as", "is not 'module:Class'")
    if not (isinstance(kind, type) and issubclass(kind, Backend)):
        raise ValueError(f"backend {name!r}: {where} is no Backend class (see gpucache_ext.backends.base)")
    made = _MADE[name] = kind()
    return made
