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

from types import FunctionType, ModuleType
from typing import Dict, Iterator, Optional

from .base import Backend
from .. import memos
from ..importing import import_named, installed
from ..keys.stagespec import DEFAULT_CHAIN, Chain

__all__ = ["Backend", "DEFAULT_BACKEND", "MLIR_BACKEND", "backend", "backend_for", "canonical_backend",
           "default_backend", "register_backend", "registered_backends"]

DEFAULT_BACKEND = "numba-cuda"
MLIR_BACKEND = "mlir"

_REGISTERED: Dict[str, str] = {
    DEFAULT_BACKEND: "gpucache_ext.backends.numba_cuda.backend:NumbaCuda",
    MLIR_BACKEND: "gpucache_ext.backends.numba_cuda_mlir.backend:NumbaCudaMlir",
}
# other names a backend is given by (its package's name)
_ALIASES = {"numba-cuda-mlir": MLIR_BACKEND, "numba_cuda_mlir": MLIR_BACKEND, "numba_cuda": DEFAULT_BACKEND}
# the module a kernel object of each backend's compiler comes from (`backend_for`)
_KERNEL_MODULES = (("numba_cuda_mlir", MLIR_BACKEND),)
# The modules whose objects a plain function reads tell its compiler (its import: `imported_backend`)
_IMPORTED_MODULES = _KERNEL_MODULES + (("numba.cuda", DEFAULT_BACKEND), ("numba_cuda", DEFAULT_BACKEND))
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


def canonical_backend(name: str) -> str:
    """The name `name` registers (an alias, any case, read as its backend's);
    a ValueError names the backends."""
    text = str(name).strip().lower()
    text = _ALIASES.get(text, text)
    if text not in _REGISTERED:
        raise ValueError(f"is no backend; use {' or '.join(_REGISTERED)}")
    return text


@memos.cached("backends.default_backend", maxsize=1)
def default_backend() -> str:
    """The backend a plain Python function compiles with: numba-cuda where it
    is installed, else numba-cuda-mlir."""
    for name, package in ((DEFAULT_BACKEND, "numba_cuda"), (MLIR_BACKEND, "numba_cuda_mlir")):
        if installed(package):
            return name
    return DEFAULT_BACKEND  # (its first compile says what to install)


def chain_of(config_fields) -> Chain:
    """The chain a stored entry was built through, from its config's fields
    (`Entry.config_fields`): that of the backend they name; numba-cuda's
    (`DEFAULT_CHAIN`, read without importing numba-cuda) where they name
    none, or one not registered here."""
    name = (config_fields or {}).get("backend")
    try:
        return _chain_named(name or DEFAULT_BACKEND)
    except ValueError:
        return DEFAULT_CHAIN


def _chain_named(name: str) -> Chain:
    """The chain of the backend called `name`: numba-cuda's without importing numba-cuda."""
    return DEFAULT_CHAIN if name == DEFAULT_BACKEND else backend(name).chain


@memos.cached("backends.always_listed", maxsize=1)
def always_listed() -> frozenset:
    """The stages statistics always list: the default backend's chain
    (numba-cuda's where it is installed, else numba-cuda-mlir's) and the
    fatbin; another backend's stage once it was used or a tier holds its
    entries.  (numba-cuda's chain is read without importing numba-cuda.)"""
    return frozenset(_chain_named(default_backend()).stages + ("fatbin",))


def backend_for(name: Optional[str], func=None, module: bool = False) -> Backend:
    """The backend a compile of `func` uses: `name` (a config's ``backend``)
    where given, else the one whose compiler made `func` (a
    ``numba_cuda_mlir.cuda.jit`` kernel: mlir), else, for a plain function,
    the one whose ``cuda`` it reads (`imported_backend`; `module`: else the
    one its module imported), else the default."""
    if name is None and func is not None:
        module = type(func).__module__ or ""
        name = next((each for prefix, each in _KERNEL_MODULES if _within(module, prefix)), None)
        if name is None and isinstance(func, FunctionType):
            name = imported_backend(func, module)
    return backend(name)


def imported_backend(func: FunctionType, module: bool = False) -> Optional[str]:
    """The backend whose objects the plain function `func` reads as globals
    (``from numba_cuda_mlir import cuda``: mlir; ``from numba import cuda``:
    numba-cuda): the import decides, as in a cell.  With `module`, where
    those decide nothing, the backend whose modules its module imported (a
    kernel that reads no ``cuda.``, decorated with ``gpucache_ext.jit``).
    None where nothing decides, or both do."""
    found = _backend_of(func.__globals__.get(name) for name in func.__code__.co_names)
    if found is None and module:
        found = _backend_of(value for value in list(func.__globals__.values()) if isinstance(value, ModuleType))
    return found or None


def _within(module: str, package: str) -> bool:
    """Whether `module` is `package` or one of its modules ("numba_cuda_absent" is not numba_cuda's)."""
    return module == package or module.startswith(package + ".")


def _backend_of(values) -> Optional[str]:
    """The one backend whose objects are among `values` ("" where two are)."""
    found = None
    for value in values:
        if value is None:
            continue
        module = value.__name__ if isinstance(value, ModuleType) else (type(value).__module__ or "")
        each = next((backend for prefix, backend in _IMPORTED_MODULES if _within(module, prefix)), None)
        if each is not None:
            if found is not None and each != found:
                return ""
            found = each
    return found


def backend(name: Optional[str] = None) -> Backend:
    """The backend called `name` (None: the default one), made once a process."""
    name = name or default_backend()
    made = _MADE.get(name)
    if made is not None:
        return made
    where = _REGISTERED.get(name)
    if where is None:
        raise ValueError(f"no backend is called {name!r}; the backends are {', '.join(_REGISTERED)}")
    if name == DEFAULT_BACKEND and not installed("numba_cuda"):
        from ..errors import ConfigError

        raise ConfigError(
            "the numba-cuda backend compiles with numba-cuda, which is not installed here (numba-cuda-mlir "
            "alone is); install it with pip install \"gpucache_ext[cu12]\", or write the kernel with "
            "numba-cuda-mlir (from numba_cuda_mlir import cuda) and use --backend mlir", field="backend")
    kind = import_named(where, f"backend {name!r}, registered as", "is not 'module:Class'")
    if not (isinstance(kind, type) and issubclass(kind, Backend)):
        raise ValueError(f"backend {name!r}: {where} is no Backend class (see gpucache_ext.backends.base)")
    made = _MADE[name] = kind()
    return made
