"""Process-independent descriptions of what the walk cannot simply bind:
numba types by their complete keys (and argument types as a signature's
component), classes by what numba may read of them, the scalars of
subclasses a library defines, the values a library's closures hold, the
functions numba compiles or inlines on its own (`internal_function_digest`),
and what user code registered in numba's extension tables
(`describe_registration`)."""

from __future__ import annotations

import enum
import struct
import sys
import threading
import types as pytypes
from typing import Any, Dict

from ..errors import UnsupportedKernelError
from ..importing import front_end_module, loaded_class
from .libraries import class_version, library_version
from ..keys.tokens import Component, component, digest
from .usercode import DEPTH, cell_value, dunder, numba_made, touches_user_code, user_function, user_module
from .code import code_digest
from .values import EXACT_SCALARS, SCALAR_BASES, dtype_data, is_numba_type, short
from .. import memos


def type_data(nbtype) -> list:
    """A numba type by its complete key, process-independent: the type's
    class and every part of its key (classes by what numba reads of them, so
    two named-tuple classes of one name with other fields differ, as they do
    for numba), never its printed name.  Unknown key parts are refused.
    Memoised for types whose key holds no class (a class can change)."""
    found = _TYPE_DATA.get(nbtype)
    if found is None:
        holds_class = []
        found = _key_data(nbtype, nbtype, holds_class)
        if not holds_class and len(_TYPE_DATA) < 4096:
            _TYPE_DATA[nbtype] = found
    return found


_TYPE_DATA: Dict[Any, list] = memos.memo("sources.describe._TYPE_DATA", {})


def value_key(value):
    """A key telling apart every plain value whose component can be memoised
    (exact scalars, by type and bits; numba types whose key holds no class),
    None for any other value."""
    kind = type(value)
    if kind is float:
        return (float, struct.pack(">d", value))
    if kind in EXACT_SCALARS:
        return (kind, value)
    if is_numba_type(value) and value in _TYPE_DATA:
        return ("numba type", value)
    return None


def signature_component(argtypes, shown: str) -> Component:
    """The typing token's component for argument types (`type_data` of each)."""
    found = _SIGNATURES.get((argtypes, shown))
    if found is None:
        data = [type_data(t) for t in argtypes]
        found = component(data, shown)
        if all(t in _TYPE_DATA for t in argtypes) and len(_SIGNATURES) < 4096:  # (no class among them)
            _SIGNATURES[(argtypes, shown)] = found
    return found


_SIGNATURES: Dict[Any, Component] = memos.memo("sources.describe._SIGNATURES", {})


def _key_data(part, whole, holds_class):
    if is_numba_type(part):
        kind = type(part)
        key = part.key
        data = part.name if key is part else _key_data(key, whole, holds_class)
        return ["type", kind.__module__, kind.__qualname__, data]
    if type(part) in EXACT_SCALARS:
        return [type(part).__name__, part]
    if isinstance(part, enum.Enum):
        holds_class.append(True)
        return ["enum member", class_data(type(part)), part.name]
    if type(part) in (tuple, list):
        return [type(part).__name__, [_key_data(p, whole, holds_class) for p in part]]
    if isinstance(part, frozenset):
        return ["frozenset", sorted((_key_data(p, whole, holds_class) for p in part), key=repr)]
    if isinstance(part, type):
        holds_class.append(True)
        return class_data(part)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(part, np.dtype):
        return ["dtype", dtype_data(part)]
    raise UnsupportedKernelError(
        f"argument type {whole} holds a {type(part).__qualname__} ({short(repr(part))}) that the "
        "cache cannot key exactly; pass the argument as an array, a number or a tuple of them")


def class_data(cls) -> list:
    """What numba may read of a class: enum members, named-tuple fields, its place."""
    version = class_version(cls)
    name = [getattr(cls, "__module__", "?"), cls.__qualname__]
    if version is not None:
        return ["library class", *name, version]
    bases = [[b.__module__, b.__qualname__] for b in cls.__mro__[1:] if class_version(b) is not None]
    if issubclass(cls, enum.Enum):
        members = [[member_name, _plain_data(member.value, f"{cls.__qualname__}.{member_name}")]
                   for member_name, member in cls.__members__.items()]
        return ["enum class", *name, bases, members]
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        defaults = getattr(cls, "_field_defaults", {}) or {}
        return ["namedtuple class", *name, bases, list(cls._fields),
                [[k, _plain_data(v, f"{cls.__qualname__}.{k}")] for k, v in sorted(defaults.items())]]
    if issubclass(cls, BaseException):
        return ["exception class", *name, bases]
    # any other user class: numba reads of it what the extension API registered for it (typeof_impl,
    # type_callable, data models), which every typing token holds (`extensions`); the class itself
    # is keyed by what it is made of
    return describe_class(cls)


def _plain_data(value, label) -> list:
    """An immutable value held by a class (an enum member's value, a field default)."""
    if type(value) in EXACT_SCALARS:
        return [type(value).__name__, value]
    if type(value) is complex:
        return ["complex", value.real, value.imag]
    if isinstance(value, enum.Enum):
        return ["enum member", class_data(type(value)), value.name]
    if type(value) is tuple:
        return ["tuple", [_plain_data(v, label) for v in value]]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic) and not value.dtype.hasobject:
        return ["numpy scalar", dtype_data(value.dtype), np.asarray(value).tobytes()]
    raise UnsupportedKernelError(
        f"{label} holds a {type(value).__qualname__}; class attributes the cache can track are "
        "numbers, strings, tuples, enum members and numpy scalars"
    )


def scalar_subclass(value, ident, label) -> list:
    """An instance of a subclass of int, float, complex, str or bytes that is
    not an enum: a library's by its class and exact base value; a user
    class's is refused (its own methods may change what numba reads)."""
    cls = type(value)
    base = next(b for b in SCALAR_BASES if isinstance(value, b))
    if class_version(cls) is None:
        raise UnsupportedKernelError(
            f"{ident.qualname} reads {label}, an instance of {cls.__qualname__} (a subclass of "
            f"{base.__name__} defined in user code): the cache cannot tell what its methods change "
            f"in what numba reads; pass {base.__name__}({label.split()[-1]}) instead, or an enum")
    exact = complex(value.real, value.imag) if base is complex else base.__new__(base, value)
    return ["library scalar", class_data(cls), describe_value(exact)]


def describe_value(value):
    """A process-independent description of a value a library closure holds
    (numbers, strings, numba types, functions and classes by name)."""
    if type(value) in EXACT_SCALARS:
        return [type(value).__name__, value]
    if isinstance(value, enum.Enum):
        return ["enum member", type(value).__module__, type(value).__qualname__, value.name,
                describe_value(value.value)]
    if type(value) is complex:
        return ["complex", value.real, value.imag]
    if type(value) in (tuple, list):
        return [type(value).__name__, [describe_value(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted([repr(k), describe_value(v)] for k, v in value.items())]
    pyfunc = getattr(value, "py_func", value)
    if isinstance(pyfunc, (pytypes.FunctionType, type, pytypes.BuiltinFunctionType)):
        return ["named", getattr(pyfunc, "__module__", None), getattr(pyfunc, "__qualname__", None)]
    if is_numba_type(value):
        return ["numba type", type_data(value)]
    if type(value).__name__ == "FFI" and type(value).__module__.startswith("cffi"):
        # numba types every cffi FFI object alike (types.ffi: only
        # ffi.from_buffer), whatever it declares
        if front_end_module("typing.cffi_utils").is_ffi_instance(value):
            return ["cffi FFI object"]
    described = _described_library_value(value)
    if described is not None:
        return described
    # Anything else is told apart by identity within this process only.
    return ["object", type(value).__qualname__, id(value)]


def _described_library_value(value):
    """Values numba's own helpers hold in their closures, exactly (None for
    others): numpy scalars (``FLT_MAX / 4`` in cmath's ``acos``) by dtype and
    bytes, external functions (the fp16 shims' ``declare_device``) by name and
    signature, which is all their caller's code names of them, intrinsics by
    their definition."""
    import numpy as np

    if isinstance(value, np.generic):
        return ["numpy scalar", value.dtype.str, value.tobytes().hex()]
    if isinstance(value, loaded_class("numba.cuda.compiler", "ExternFunction")):
        return ["external function", value.name, str(value.sig)]
    if type(value).__name__ == "_Intrinsic" and isinstance(getattr(value, "_defn", None), pytypes.FunctionType):
        # made per call by numba's helpers (carray's): by its definition's content
        return ["intrinsic", internal_function_digest(value._defn)]
    return None


def internal_function_digest(pyfunc, depth: int = 0) -> str:
    """A digest of a function numba compiles or inlines on its own inside a
    compile (a library helper such as ``int_power``, a closure it inlines, the
    branch table ``literal_unroll`` generates): its place, its code and what
    its closure holds, functions there by their own digest.  numba numbers
    such functions from a process-wide counter and puts the number in symbol
    and variable names; `stages` numbers them from this digest instead, so
    the names are the same in every process.  A closure value with no
    process-independent description is told apart by identity (`describe_value`):
    unique, but not the same in another process."""

    def describe(value):
        # (a dispatcher by its Python function, an @intrinsic by its definition)
        inner = getattr(value, "py_func", None) or getattr(value, "_defn", None) or value
        if isinstance(inner, pytypes.FunctionType) and depth < 4:
            return ["function", internal_function_digest(inner, depth + 1)]
        return describe_value(value)

    return digest(["numba-compiled function", pyfunc.__module__, pyfunc.__qualname__,
                   code_digest(pyfunc.__code__, False), described_cells(pyfunc, describe)])


def described_cells(pyfunc, describe=None) -> list:
    """What a function's closure cells hold, each described ("empty" for an empty cell)."""
    described = []
    for cell in pyfunc.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            described.append("empty")
        else:
            described.append((describe or describe_value)(value))
    return described


# ---------------------------------------------------------------------------
# numba's extension tables (`extensions`): what user code registered, described


def function_digest(func: pytypes.FunctionType) -> str:
    """The digest of user function `func`'s identity (`walk.identify`, without
    debug information).  A user class is described by its functions'
    identities and a function's identity by the values it reads, described
    here, so `walk`, which imports this module, puts its own here."""
    raise RuntimeError("gpucache_ext.sources.walk was not imported")


def describe_registration(value, depth: int = 0) -> Any:
    """A process-independent, exact description of `value` as numba's
    extension tables hold it (see `extensions`)."""
    if depth > DEPTH:
        return ["deep", type(value).__qualname__]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [describe_registration(v, depth + 1) for v in value]]
    if isinstance(value, frozenset):
        return ["frozenset", sorted((describe_registration(v, depth + 1) for v in value), key=repr)]
    if isinstance(value, (dict, pytypes.MappingProxyType)):
        # (an @intrinsic's template holds its keyword arguments as a read-only mapping)
        return [type(value).__name__, sorted(([repr(k), describe_registration(v, depth + 1)]
                                              for k, v in value.items()), key=repr)]
    if isinstance(value, pytypes.FunctionType):
        if user_function(value):
            return ["user function", value.__module__, value.__qualname__, function_digest(value)]
        return ["library function", value.__module__, value.__qualname__,
                class_version(value) or "stdlib", code_digest(value.__code__, False),
                [describe_registration(cell_value(c), depth + 1) for c in value.__closure__ or ()]]
    if isinstance(value, (staticmethod, classmethod)):
        return [type(value).__name__, describe_registration(value.__func__, depth + 1)]
    if isinstance(value, property):
        return ["property", [describe_registration(f, depth + 1) for f in (value.fget, value.fset, value.fdel)]]
    if isinstance(value, type):
        return describe_class(value, depth)
    if is_numba_type(value):
        # a function type (what infer_global registers) by the templates that type its calls
        templates = getattr(value, "templates", None)
        if isinstance(templates, (list, tuple)):  # (its name holds the function's address)
            return ["numba function type", describe_class(type(value), depth + 1),
                    [describe_registration(t, depth + 1) for t in templates]]
        return ["numba type", describe_class(type(value), depth + 1), str(value)]
    pyfunc = getattr(value, "py_func", None) or getattr(value, "_defn", None)
    if isinstance(pyfunc, pytypes.FunctionType) and touches_user_code(pyfunc):
        return ["numba " + type(value).__name__, describe_registration(pyfunc, depth + 1)]
    if isinstance(value, pytypes.ModuleType):
        if user_module(value.__name__):
            return ["user module", value.__name__]  # (what it holds: read where a function reads it)
        return ["module", value.__name__, library_version(value) or "stdlib"]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and numba_made(type(value)):
        if all(type(item) in (str, int, float, bool, type(None)) for item in state.values()):
            # numba's small records (InlineOptions), by what they hold
            return ["numba object", describe_class(type(value), depth + 1), sorted(state.items(), key=repr)]
        # numba's own machinery a closure holds (a data model manager): numba's, keyed by its version
        return ["numba's object", describe_class(type(value), depth + 1)]
    return describe_value(value)


def describe_class(cls, depth: int = 0) -> list:
    """A class by what it is made of: a library's by name and version; a
    user's, or one numba made around user values (a template), by its bases
    and every attribute of its body, functions by their identity."""
    version = class_version(cls)
    name = [getattr(cls, "__module__", "?"), cls.__qualname__]
    made_by_numba = version is not None and numba_made(cls) and touches_user_code(cls)
    if version is not None and not made_by_numba:
        return ["library class", *name, version]
    kind = "numba-made class" if made_by_numba else "user class"
    inside = _describing.__dict__.setdefault("classes", set())
    if id(cls) in inside:  # (its own methods read it: named, and described where it started)
        return [kind, *name, "itself"]
    inside.add(id(cls))
    try:
        bases = [describe_class(b, depth + 1) if depth < DEPTH else [b.__module__, b.__qualname__]
                 for b in cls.__bases__ if b is not object]
        body = [[key, describe_registration(value, depth + 1)] for key, value in vars(cls).items()
                if (not dunder(key) or key in ("__init__", "__call__", "__new__")) and key not in _NOT_STATE]
    finally:
        inside.discard(id(cls))
    return [kind, *name, bases, sorted(body, key=repr)]


_describing = threading.local()  # the classes being described on this thread
# what a template's class holds that is not what it was made from: numba's memos of
# what it built (emptied by `forget_stale_builds`; an @intrinsic's `_overload_cache`
# fills as numba types it), abc's bookkeeping
_NOT_STATE = frozenset({"_impl_cache", "_compiled_overloads", "_inline_overloads", "_overload_cache",
                        "_abc_impl"})
