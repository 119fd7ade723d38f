"""What is user code, for numba's extension tables: a function or class
defined in a cell or in a file outside the installed packages, also inside
what numba made around it (a template class, a closure)."""

from __future__ import annotations

import abc
import os
import sys
import types as pytypes
from typing import Any, Dict, Optional, Tuple

from . import libraries
from .. import memos
from .values import is_numba_type

DEPTH = 4  # how deep into closures and class bodies a registration is followed


def user_module(name: Optional[str]) -> bool:
    """Whether the module called `name` is user code (``__main__``, a cell, a
    file outside the installed packages)."""
    if not name or name == "builtins":
        return False
    if name == "__main__":
        return True
    module = sys.modules.get(name)
    if module is None:  # (a name no module has: an extension module's own name, `_nrt_python`)
        return False
    known = _MODULES.get(name)
    if known is not None and known[0] is module:
        return known[1]
    files = libraries.module_files(module)
    user = bool(files) and not library_file(files[0])
    _MODULES[name] = (module, user)
    return user


# module name -> (the module then, whether it is user code)
_MODULES: Dict[str, Tuple[Any, bool]] = memos.memo("usercode._MODULES", {})
# file name -> whether a library's (where a file lies does not change)
_FILES: Dict[str, bool] = memos.memo("usercode._FILES", {})


def library_file(filename: str) -> bool:
    known = _FILES.get(filename)
    if known is None:
        known = _FILES[filename] = libraries.is_library_file(filename)
    return known


def user_function(func) -> bool:
    """Whether `func` is user code: code not loaded from an installed
    package's file.  Code from a string (``exec``, a template) is the user's
    unless it was run in a library's module (numba's generated code): also
    exec'd into a module without a file (``types.ModuleType``) or into a
    plain dict, whose functions have no module or one never imported."""
    code = getattr(func, "__code__", None)
    if code is None or library_file(code.co_filename):
        return False
    return not code.co_filename.startswith("<") or not library_module(getattr(func, "__module__", None))


def library_module(name: Optional[str]) -> bool:
    """Whether the module called `name` is a loaded library module (one
    whose file lies in an installed package, or Python's own)."""
    if not name:
        return False
    if name == "builtins":
        return True
    module = sys.modules.get(name)
    if module is None or user_module(name):
        return False
    return bool(libraries.module_files(module))


def touches_user_code(value, depth: int = 0, seen=None) -> bool:
    """Whether `value` (a registry entry, a template class, a function, ...)
    is or holds user code: a user function or class, also inside a
    closure, a class body or a tuple numba registered."""
    kind = type(value)
    if depth > DEPTH or kind in _INERT:
        return False
    if seen is None:
        seen = set()
    elif id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, (tuple, list, frozenset)):
        for item in value:
            if _plainly_not_user(item):  # (most of what numba registers: no call, no walk)
                continue
            if touches_user_code(item, depth + 1, seen):
                return True
        return False
    if isinstance(value, pytypes.FunctionType):
        return _function_touches_user_code(value)
    if isinstance(value, type):
        if value in _LIBRARY_CLASSES:
            return False
        if user_module(value.__module__):
            return True
        if not numba_made(value) or library_class(value):
            if sys.modules.get(value.__module__) is not None:  # (a module that may yet load is asked again)
                _LIBRARY_CLASSES.add(value)
            return False  # (a library's own class: its version keys it)
        return _class_touches_user_code(value)
    if isinstance(value, (staticmethod, classmethod)):
        return touches_user_code(value.__func__, depth + 1, seen)
    if isinstance(value, property):
        return touches_user_code(value.fget, depth + 1, seen)
    if is_numba_type(value):
        templates = getattr(value, "templates", None)
        return (kind not in _LIBRARY_CLASSES and touches_user_code(kind, depth + 1, seen)) or (
            isinstance(templates, (list, tuple)) and touches_user_code(tuple(templates), depth + 1, seen))
    if _lookup(kind) == "none":  # (neither a py_func nor a _defn, ever; no numba type, asked above)
        _OPAQUE.add(kind)
        return False
    pyfunc = _wrapped_function(value)  # a dispatcher, an @intrinsic
    if isinstance(pyfunc, pytypes.FunctionType):
        return touches_user_code(pyfunc, depth + 1, seen)
    return False


def _plainly_not_user(value) -> bool:
    """What the walk would say no to at once, told without a call of it: an
    inert value, a library class, a library's function without a closure
    (also as a static method: numba's templates hold thousands)."""
    kind = type(value)
    if kind in _INERT:
        return True
    if kind is staticmethod:
        value = value.__func__
        kind = type(value)
    if kind is pytypes.FunctionType:  # (numba's own: another library's may be made at run time)
        filename = value.__code__.co_filename
        return value.__closure__ is None and _FILES.get(filename) is True and _NUMBA_FILES.get(filename) is True
    return kind in _OPAQUE or (isinstance(value, type) and value in _LIBRARY_CLASSES)


def _function_touches_user_code(func) -> bool:
    if user_function(func):
        return True
    closure = func.__closure__
    if not closure:
        # another library's function made as it runs (a factory's inner function, a template
        # exec'd under the library's file name with the caller's constant): not its module's own
        return not numba_code(func.__code__.co_filename) and not library_function(func)
    if not numba_code(func.__code__.co_filename):
        # another library's function closing over values: a factory's, whose closure holds what its
        # caller passed (``lib.make_op(2.5)`` registering a lowering that multiplies by it), which
        # that library's version does not key (numba's own closures are numba's code)
        return True
    # a library's function closing over values (numba's lowering wrappers): walked afresh and
    # remembered while its closure holds the same objects, as classes are
    values = [cell_value(c) for c in closure]
    state = tuple(map(id, values))
    known = _CLASSES.get(id(func))
    if known is not None and _HELD.get(id(func)) is func and known[0] == state:
        return known[1]
    inner = {id(func)}
    touches = False
    for value in values:
        if touches_user_code(value, 1, inner):
            touches = True
            break
    _remember(func, state, touches)
    return touches


NUMBA_PACKAGES = ("numba", "numba_cuda", "numba_cuda_mlir")


def numba_named(module: Optional[str]) -> bool:
    """Whether the module called `module` is numba's or numba-cuda's."""
    return bool(module) and module.split(".")[0] in NUMBA_PACKAGES


def numba_code(filename: str) -> bool:
    """Whether code from `filename` is numba's or numba-cuda's own (a file in
    their packages' folders, as imported or as resolved)."""
    folders = _numba_folders()  # (first: a package loaded since forgets what was said before it)
    known = _NUMBA_FILES.get(filename)
    if known is None:
        known = _NUMBA_FILES[filename] = filename.startswith(folders) if folders else False
    return known


def _numba_folders() -> Tuple[str, ...]:
    """The package folders of those of numba, numba-cuda and numba-cuda-mlir
    loaded (each as imported and resolved)."""
    global _FOLDERS
    loaded = tuple(name for name in NUMBA_PACKAGES if name in sys.modules)
    if _FOLDERS is None or _FOLDERS[0] != loaded:
        folders = []
        for name in loaded:
            for folder in getattr(sys.modules.get(name), "__path__", None) or ():
                folders += [os.path.join(folder, ""), os.path.join(os.path.realpath(folder), "")]
        _NUMBA_FILES.clear()  # (a no may turn into a yes)
        _FOLDERS = (loaded, tuple(dict.fromkeys(folders)))
    return _FOLDERS[1]


_FOLDERS: Optional[Tuple[Tuple[str, ...], Tuple[str, ...]]] = None
_NUMBA_FILES: Dict[str, bool] = memos.memo("usercode._NUMBA_FILES", {})  # file name -> whether numba's or numba-cuda's


def _wrapped_function(value):
    """``value.py_func`` or ``value._defn`` (a dispatcher's function, an
    ``@intrinsic``'s), or None; looked up without raising where the class
    shows there can be neither (most values met: a raised and caught
    AttributeError is the walk's main cost)."""
    kind = _lookup(type(value))
    if kind == "none":
        return None
    if kind == "dict":
        attributes = value.__dict__
        return attributes.get("py_func") or attributes.get("_defn")
    return getattr(value, "py_func", None) or getattr(value, "_defn", None)


_WRAPPED = ("py_func", "_defn")


@memos.cached("usercode._lookup", maxsize=None)  # (per class: how its instances' wrapped function is found)
def _lookup(cls) -> str:
    plain = cls.__getattribute__ is object.__getattribute__ and not hasattr(cls, "__getattr__") and \
        not any(hasattr(cls, name) for name in _WRAPPED)
    return ("dict" if cls.__dictoffset__ else "none") if plain else "getattr"


@memos.cached("usercode.numba_made", maxsize=None)  # (a class's bases do not change)
def numba_made(cls) -> bool:
    """A class numba makes (or may make) around what it is given: one of
    numba's own, or a subclass of one (``type()``'d templates, whose module
    may read ``abc``)."""
    return any(numba_named(getattr(c, "__module__", None)) for c in cls.__mro__)


def library_function(func) -> bool:
    """A function a ``def`` in a library's module made, found under its name
    there: its code is that library's, keyed by its version (not one a
    factory or a template made as the library ran)."""
    return _a_library_modules_own(func)


@memos.cached("usercode.library_class", maxsize=None)
def library_class(cls) -> bool:
    """A class a ``class`` statement in a library's module made, found under
    its name there: its body is that library's code.  (numba's extension API
    makes classes around user code with ``type()``, or inside functions,
    never as a library module's own attributes.)"""
    return _a_library_modules_own(cls)


def _a_library_modules_own(value) -> bool:
    """Whether `value` is found under its qualified name in its module, a
    library's, and was not made inside a function."""
    qualname = getattr(value, "__qualname__", "")
    module = getattr(value, "__module__", None)
    found = sys.modules.get(module or "")
    for part in qualname.split("."):
        found = vars(found).get(part) if hasattr(found, "__dict__") else None  # (no module __getattr__ runs)
    return found is value and "<locals>" not in qualname and not user_module(module)


# library classes (not numba-made, or a library module's own class): never user code, whatever they hold
_LIBRARY_CLASSES: set = memos.memo("usercode._LIBRARY_CLASSES", set())
# classes whose instances the walk never enters: no numba type, neither a py_func nor a _defn
_OPAQUE: set = memos.memo("usercode._OPAQUE", set())
# values that never are nor hold user code, told apart by their exact type before anything else
_INERT = frozenset({type(None), bool, int, float, complex, str, bytes, dict, set, pytypes.BuiltinFunctionType,
                    pytypes.MethodDescriptorType, pytypes.WrapperDescriptorType,
                    type(abc.ABC._abc_impl)})  # (an ABC's registry, in each ABC's body)


def dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _class_touches_user_code(cls) -> bool:
    """Whether a class numba made (a template, a numba type's class) holds
    user code in its body, walked afresh from the class (so alike wherever it
    is met) and remembered while its body holds the same objects: the same
    numba types and templates recur across thousands of registrations."""
    state = tuple(map(id, vars(cls).values()))
    known = _CLASSES.get(id(cls))
    if known is not None and _HELD.get(id(cls)) is cls and known[0] == state:
        return known[1]
    # (a concrete template's `cases` are signatures of numba types: a user type there comes with a
    # user class of its own)
    seen = {id(cls)}
    touches = False
    for name, value in vars(cls).items():
        if _plainly_not_user(value) or dunder(name) or name == "cases":
            continue
        if touches_user_code(value, 1, seen):
            touches = True
            break
    _remember(cls, state, touches)
    return touches


def _remember(value, state: tuple, touches: bool) -> None:
    _HELD[id(value)] = value  # (kept: its id is not reused meanwhile)
    _CLASSES[id(value)] = (state, touches)


# id -> (its state, the answer) for the classes and closures walked, and id ->
# the object itself.  Apart, so that the memo's thousands of values hold ids
# and bools only: the garbage collector stops tracking such tuples, and a
# memo of tracked ones would bring the user's next full collection forward.
_CLASSES: Dict[int, Tuple[tuple, bool]] = memos.memo("usercode._CLASSES", {})
_HELD: Dict[int, Any] = memos.memo("usercode._HELD", {})
