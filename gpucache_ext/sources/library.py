"""What a kernel reads from libraries: a library module (by its name and
version), a library's function (by its place and version, and by its code
and closure, since a library makes functions too), and what is read through
a library module, keyed by what it is now (data by value, functions by
code, builtins and classes by what they are), since a program may rebind or
write any module attribute; numba reads those again, live, as it types
(`library_reads_changed`).  Whether a module is a library, and its
version, `gpucache_ext.sources.libraries` decides."""

from __future__ import annotations

import types as pytypes
from typing import Any, Dict, Optional, Tuple

from .libraries import class_version, file_origin
from ..keys.tokens import Component, component, digest
from .code import code_digest
from .describe import class_data, described_cells, describe_value, internal_function_digest, type_data
from .snapshot import SourceIdentity
from .values import EXACT_SCALARS, MISSING, is_numba_type, short
from .. import memos


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


@memos.cached("sources.library.library_module_component", maxsize=1024)
def library_module_component(name: str, version: str) -> Component:
    """The component of a library module a function reads (``np``, ``math``):
    its name and version."""
    return component(["module", name, version], f"module {name}")


def check_library_chain(ident, label, path, module, chain, reads):
    """Follow one attribute chain read through a library module; returns
    (the value it reaches, where) or None where the chain breaks.  Each step
    read from a namespace joins `reads`: numba reads the chain again, live,
    as it types (`library_reads_changed`).  The walk keys the value
    (`library_value_component`, or by content)."""
    value, where = module, path
    for attr in chain:
        namespace = getattr(value, "__dict__", None)
        value, where = getattr(value, attr, MISSING), f"{where}.{attr}"
        if value is MISSING:
            return None
        if isinstance(namespace, (dict, pytypes.MappingProxyType)) and attr in namespace:
            reads.append((namespace, attr, namespace[attr], where))
    return value, where


def known_library_value(value):
    """The component `library_value_component` gave `value` before, where it
    depends on the value's identity alone (a builtin, a library's class, a
    property of numba's stubs: None), else `MISSING`."""
    found = _LIBRARY_VALUES.get(id(value))
    return found[1] if found is not None and found[0] is value else MISSING


def library_value_component(value) -> Optional[Component]:
    """The component of a value read through a library module that is no
    data (the walk keys data by content): what it is now, not the library's
    version, since a program may rebind any module attribute (``math.sin =
    math.cos``).  Plain scalars by value; a function numba compiles by its
    code and closure; a builtin or ufunc by its place and name; a class as
    the walk keys a class; an ``@intrinsic`` or another numba function by
    its definition.  None for what numba reads of the library itself
    (properties and other descriptors of its stubs): its version keys it.
    Memoised by identity where the answer depends on it alone."""
    kind = type(value)
    if kind in EXACT_SCALARS or kind is complex or (
            kind is tuple and all(type(v) in EXACT_SCALARS for v in value)):
        return component(describe_value(value), short(repr(value)))
    pyfunc = value if kind is pytypes.FunctionType else getattr(value, "py_func", None)
    if isinstance(pyfunc, pytypes.FunctionType):
        return _library_function_component(pyfunc)
    found = known_library_value(value)
    if found is not MISSING:
        return found
    part, stable = _identified(value)
    if stable:
        if len(_LIBRARY_VALUES) > 4096:
            _LIBRARY_VALUES.clear()
        _LIBRARY_VALUES[id(value)] = (value, part)  # (held: its id is not reused meanwhile)
    return part


def _identified(value) -> Tuple[Optional[Component], bool]:
    """`library_value_component` of builtins, ufuncs, classes, numba types and
    numba's functions, and whether it depends on the value's identity alone
    (not for a user's class, whose body can change, or a user's intrinsic)."""
    if isinstance(value, (pytypes.BuiltinFunctionType, pytypes.BuiltinMethodType)):
        module = getattr(value, "__module__", None) or "builtins"
        owner = getattr(value, "__self__", None)
        bound = [] if owner is None or isinstance(owner, pytypes.ModuleType) else [type(owner).__qualname__]
        return component(["builtin", module, getattr(value, "__qualname__", repr(value)), *bound],
                         f"builtin {module}.{value.__name__}"), True
    if type(value).__name__ == "ufunc" and type(value).__module__ == "numpy":
        return component(["numpy ufunc", value.__name__, value.nin, value.nout, value.types],
                         f"ufunc {value.__name__}"), True
    if isinstance(value, type):
        return component(class_data(value), f"class {value.__qualname__}"), class_version(value) is not None
    if is_numba_type(value):
        return component(["numba type", type_data(value)], str(value)), True
    defn = getattr(value, "_defn", None)  # an @intrinsic
    if isinstance(defn, pytypes.FunctionType):
        return (Component(digest([type(value).__name__, _library_function_component(defn).digest]),
                          f"{defn.__module__}.{defn.__qualname__}"),
                file_origin(defn.__code__.co_filename) is not None and defn.__closure__ is None)
    return None, True


_LIBRARY_VALUES: Dict[int, Tuple[Any, Optional[Component]]] = memos.memo("sources.library._LIBRARY_VALUES", {})


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


_LIBRARY_FUNCTIONS: Dict[Any, Tuple[Component, tuple]] = memos.memo("sources.library._LIBRARY_FUNCTIONS", {})


def library_reads_changed(identity: SourceIdentity) -> Optional[str]:
    """The first library attribute `identity`'s walk read that now holds
    another object (its label), or None: numba typed from what is there now,
    not from what was hashed, and the compile must start again."""
    for namespace, attr, value, label in identity.library_reads:
        if namespace.get(attr, MISSING) is not value:
            return label
    return None
