"""What a kernel reads from libraries: a library module (by its name and
version), a library's function (by its place and version, and by its code
and closure, since a library makes functions too), and the attributes read
through a library module that its version does not vouch for (plain data,
functions numba compiles), which numba reads again, live, as it types
(`library_reads_changed`).  Whether a module is a library, and its
version, `gpucache_ext.libraries` decides."""

from __future__ import annotations

import functools
import types as pytypes
from typing import Any, Dict, Optional, Tuple

from ..libraries import class_version, file_origin
from ..tokens import Component, component, digest
from .code import code_digest
from .describe import described_cells, describe_value, internal_function_digest
from .snapshot import SourceIdentity
from .values import EXACT_SCALARS, MISSING, short


def library_function_data(func) -> list:
    """A library's function as a kernel reads it: its place and its library's
    version, and its code and what its closure holds (functions there by
    their own code and closure), since a library makes functions too: a
    factory's closure over the caller's value (``make(2.0)``, ``make(3.0)``)
    or code generated from a template under the library's file name share
    the place and the version and differ in nothing else."""
    return ["library function", func.__module__, func.__qualname__, class_version(func) or "stdlib",
            internal_function_digest(func)]


def library_identity_digest(pyfunc) -> Optional[str]:
    """A digest naming library function `pyfunc` (None for user code): its
    place, its code, its library's version and what its closure holds.  Used
    to name the proxies of library functions numba reaches on its own."""
    code = pyfunc.__code__
    if file_origin(code.co_filename) is None:
        return None
    return digest(["library function", pyfunc.__module__, pyfunc.__qualname__,
                   class_version(pyfunc) or "stdlib", code_digest(code, False), described_cells(pyfunc)])


@functools.lru_cache(maxsize=1024)
def library_module_component(name: str, version: str) -> Component:
    """The component of a library module a function reads (``np``, ``math``):
    its name and version."""
    return component(["module", name, version], f"module {name}")


def check_library_chain(ident, label, path, module, chain, reads):
    """Key what a library attribute chain reaches that its version does not
    vouch for: plain data (``math.pi``, ``np.e``: module attributes can be
    reassigned at run time) and a function numba compiles (``lib.f``: by its
    code and closure, as a library function read as a global is).  Other
    values (classes, numba's stubs) are the library's own, keyed by its
    version.  Each step read from a namespace joins `reads`: numba reads the
    chain again, live, as it types (`library_reads_changed`)."""
    value, where = module, path
    for attr in chain:
        namespace = getattr(value, "__dict__", None)
        value, where = getattr(value, attr, MISSING), f"{where}.{attr}"
        if value is MISSING:
            return
        if isinstance(namespace, (dict, pytypes.MappingProxyType)) and attr in namespace:
            reads.append((namespace, attr, namespace[attr], where))
    if type(value) in EXACT_SCALARS or type(value) is complex or (
            type(value) is tuple and all(type(v) in EXACT_SCALARS for v in value)):
        ident.components[".".join((label, *chain))] = component(
            describe_value(value), short(repr(value)))
        return
    pyfunc = getattr(value, "py_func", None) if not isinstance(value, pytypes.FunctionType) else value
    if isinstance(pyfunc, pytypes.FunctionType):
        ident.components[".".join((label, *chain))] = _library_function_component(pyfunc)


def _library_function_component(pyfunc) -> Component:
    """`internal_function_digest` as a component; memoised by the code
    object, place and name, and by what a closure holds where that is
    functions without a closure of their own (by their code) and exact
    scalars (a library's decorated stubs: ``cuda.shared.array``); other
    closures are described again each time."""
    held = []
    for cell in pyfunc.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            value = None
        if isinstance(value, pytypes.FunctionType) and value.__closure__ is None:
            held.append((id(value), id(value.__code__)))
        elif type(value) in EXACT_SCALARS and type(value) is not float:
            held.append((type(value), value))
        else:
            return Component(internal_function_digest(pyfunc), f"{pyfunc.__module__}.{pyfunc.__qualname__}")
    key = (pyfunc.__code__, pyfunc.__module__, pyfunc.__qualname__, tuple(held))
    found = _LIBRARY_FUNCTIONS.get(key)
    if found is None or any(a is not b for a, b in zip(found[1], _cell_values(pyfunc))):
        if len(_LIBRARY_FUNCTIONS) > 4096:
            _LIBRARY_FUNCTIONS.clear()
        found = _LIBRARY_FUNCTIONS[key] = (
            Component(internal_function_digest(pyfunc), f"{key[1]}.{key[2]}"), _cell_values(pyfunc))
    return found[0]


def _cell_values(pyfunc) -> tuple:
    """What a function's closure cells hold (held by the memo, so the ids its key names stay theirs)."""
    values = []
    for cell in pyfunc.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            values.append(None)
    return tuple(values)


_LIBRARY_FUNCTIONS: Dict[Any, Tuple[Component, tuple]] = {}


def library_reads_changed(identity: SourceIdentity) -> Optional[str]:
    """The first library attribute `identity`'s walk read that now holds
    another object (its label), or None: numba typed from what is there now,
    not from what was hashed, and the compile must start again."""
    for namespace, attr, value, label in identity.library_reads:
        if namespace.get(attr, MISSING) is not value:
            return label
    return None
