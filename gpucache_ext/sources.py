"""The identity of a kernel's source: what the typing token hashes.

numba freezes into a kernel everything the kernel reads at compile time: its
bytecode, the values of the globals and closure variables it names, and the
device functions it calls (with, transitively, what those read).  `identify`
walks all of that and gives one named component per input, so a miss can say
"global OFFSET changed" or "device function helper changed".

Line numbers and file names reach the output only through debug information,
so they enter the identity only when debug info (``debug`` or ``lineinfo``)
is requested.

`rebind` returns a copy of the function whose device functions are replaced by
the pipeline's own proxies, so that device functions are typed and lowered for
the kernel's configuration instead of numba's per-dispatcher cache (which
ignores the caller's target and flags).
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import importlib.metadata
import os
import sys
import sysconfig
import types as pytypes
from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

from .errors import UnsupportedKernelError
from .tokens import Component, component, digest


@dataclass
class SourceIdentity:
    """What a function's typed IR depends on, as named components."""

    qualname: str
    pyfunc: Callable
    components: Dict[str, Component]
    # name in the function's globals/closure -> (dispatcher, its identity)
    devices: Dict[str, Tuple[object, "SourceIdentity"]] = field(default_factory=dict)
    # module global name -> {attribute: (dispatcher, identity)} for device functions
    # reached as module attributes (helpers.clamp)
    module_devices: Dict[str, Dict[str, Tuple[object, "SourceIdentity"]]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return digest({k: v.digest for k, v in self.components.items()})


def is_device_dispatcher(value) -> bool:
    from numba.cuda.dispatcher import CUDADispatcher

    return isinstance(value, CUDADispatcher) and bool(value.targetoptions.get("device"))


def _is_dispatcher(value) -> bool:
    from numba.cuda.dispatcher import CUDADispatcher

    return isinstance(value, CUDADispatcher)


def python_function(func) -> Callable:
    """The plain Python function behind a function or a numba dispatcher."""
    if isinstance(func, pytypes.FunctionType):
        return func
    pyfunc = getattr(func, "py_func", None)
    if isinstance(pyfunc, pytypes.FunctionType):
        return pyfunc
    raise TypeError(
        f"expected a Python function or a numba.cuda.jit dispatcher, got {type(func).__name__}"
    )


def identify(func, with_location: bool) -> SourceIdentity:
    """The identity of `func` (a Python function or dispatcher)."""
    return _Walker(with_location).function(python_function(func))


_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME"}
_ATTR_OPS = {"LOAD_ATTR", "LOAD_METHOD"}


@functools.lru_cache(maxsize=4096)
def _code_names(code) -> Tuple[frozenset, frozenset]:
    """Names the code loads as globals, and names it loads as attributes."""
    global_names, attr_names = set(), set()
    for inst in dis.get_instructions(code):
        if inst.opname in _GLOBAL_OPS:
            global_names.add(inst.argval)
        elif inst.opname in _ATTR_OPS:
            attr_names.add(inst.argval)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            inner_globals, inner_attrs = _code_names(const)
            global_names |= inner_globals
            attr_names |= inner_attrs
    return frozenset(global_names), frozenset(attr_names)


@functools.lru_cache(maxsize=4096)
def _code_digest(code, with_location: bool) -> str:
    return digest(_code_value(code, with_location))


def _code_value(code, with_location):
    value = {
        "bytecode": code.co_code,
        "consts": [
            _code_value(c, with_location) if isinstance(c, pytypes.CodeType) else _const_value(c)
            for c in code.co_consts
        ],
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "freevars": list(code.co_freevars),
        "cellvars": list(code.co_cellvars),
        "argcounts": [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount],
        "flags": code.co_flags,
        "name": code.co_name,
        "exceptiontable": getattr(code, "co_exceptiontable", b""),
    }
    if with_location:
        value["file"] = code.co_filename
        value["lines"] = [list(span) for span in code.co_lines()]
        value["firstlineno"] = code.co_firstlineno
    return value


def _const_value(value):
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return [type(value).__name__, value]
    if isinstance(value, complex):
        return ["complex", value.real, value.imag]
    if isinstance(value, (tuple, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return [type(value).__name__, [_const_value(v) for v in items]]
    if value is Ellipsis:
        return ["ellipsis"]
    return ["repr", repr(value)]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> Tuple[str, ...]:
    """Folders of the standard library and of installed packages."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    return tuple(os.path.realpath(r) + os.sep for r in roots)


@functools.lru_cache(maxsize=1024)
def _library_version(module_name: str):
    """A version string for an installed (library) module, or None for user code.

    A module is a library when it is built in or lives in the standard
    library's or site-packages' folders; its version is its top package's
    ``__version__`` or its distribution's (a library's contents change only
    with its version).  Anything else is user code, whose attributes count.
    """
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top == "builtins":
        return "stdlib"
    module = sys.modules.get(module_name) or sys.modules.get(top)
    files = [getattr(module, "__file__", None)] + list(getattr(module, "__path__", []) or [])
    files = [os.path.realpath(f) for f in files if f]
    if files and not any(f.startswith(_installed_roots()) for f in files):
        return None
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(top)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return "installed" if files else None


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Walker:
    def __init__(self, with_location: bool):
        self.with_location = with_location
        self.active = []  # functions being walked (cycle guard)
        self.memo = {}

    def function(self, pyfunc) -> SourceIdentity:
        key = id(pyfunc)
        if key in self.memo:
            return self.memo[key]
        if pyfunc in self.active:
            raise UnsupportedKernelError(
                f"{pyfunc.__qualname__} is reached recursively through device functions; "
                "recursive device functions are not supported by the staged cache"
            )
        self.active.append(pyfunc)
        try:
            ident = self._function(pyfunc)
        finally:
            self.active.pop()
        self.memo[key] = ident
        return ident

    def _function(self, pyfunc) -> SourceIdentity:
        code = pyfunc.__code__
        qualname = f"{pyfunc.__module__}.{pyfunc.__qualname__}"
        ident = SourceIdentity(qualname, pyfunc, {})
        parts = ident.components
        parts["function"] = component(qualname)
        parts["code"] = Component(_code_digest(code, self.with_location), "code")
        if self.with_location:
            parts["location"] = component(
                [code.co_filename, code.co_firstlineno],
                f"{_short(code.co_filename)}:{code.co_firstlineno}",
            )
        if pyfunc.__defaults__ or pyfunc.__kwdefaults__:
            parts["defaults"] = self.value(
                (pyfunc.__defaults__, tuple(sorted((pyfunc.__kwdefaults__ or {}).items())))
            )
        global_names, attr_names = _code_names(code)
        gvars = pyfunc.__globals__
        for name in sorted(global_names):
            if name in gvars:
                self._variable(ident, "global", name, gvars[name], attr_names)
            # else a builtin: part of the Python version in the toolchain
        for name, cell in zip(code.co_freevars, pyfunc.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                raise UnsupportedKernelError(
                    f"{qualname} reads closure variable {name!r} before it is assigned"
                ) from None
            self._variable(ident, "closure", name, value, attr_names)
        return ident

    def _variable(self, ident, kind, name, value, names):
        if is_device_dispatcher(value):
            dev = self.function(value.py_func)
            ident.devices[name] = (value, dev)
            ident.components[f"device function {name}"] = Component(dev.digest, "device function")
            return
        if isinstance(value, pytypes.ModuleType):
            self._module(ident, kind, name, value, names)
            return
        ident.components[f"{kind} {name}"] = self.value(value)

    def _module(self, ident, kind, name, module, names):
        version = _library_version(module.__name__)
        if version is not None:
            ident.components[f"{kind} {name}"] = component(
                ["module", module.__name__, version], f"module {module.__name__}"
            )
            return
        # A user module: numba freezes the attributes the code reads.
        attrs = {}
        for attr in sorted(names):
            if not hasattr(module, attr):
                continue
            value = getattr(module, attr)
            if is_device_dispatcher(value):
                dev = self.function(value.py_func)
                ident.module_devices.setdefault(name, {})[attr] = (value, dev)
                attrs[attr] = Component(dev.digest, "device function")
            elif isinstance(value, pytypes.ModuleType):
                attrs[attr] = component(["module", value.__name__])
            else:
                attrs[attr] = self.value(value)
        ident.components[f"{kind} {name}"] = Component(
            digest(["user module", module.__name__, {k: v.digest for k, v in attrs.items()}]),
            f"module {module.__name__}",  # an edit shows as "global NAME changed"
        )

    def value(self, value) -> Component:
        """A component for a value numba may freeze into the kernel."""
        return Component(digest(self._value(value)), _short(_shown(value)))

    def _value(self, value):
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return [type(value).__name__, value]
        if isinstance(value, complex):
            return ["complex", value.real, value.imag]
        if isinstance(value, enum.Enum):
            cls = type(value)
            return ["enum", cls.__module__, cls.__qualname__, value.name, self._value(value.value)]
        if isinstance(value, tuple):
            fields = getattr(type(value), "_fields", None)
            return ["tuple", type(value).__qualname__, list(fields or ()),
                    [self._value(v) for v in value]]
        if isinstance(value, list):
            return ["list", [self._value(v) for v in value]]
        numpy_value = _numpy_value(value)
        if numpy_value is not None:
            return numpy_value
        numba_value = _numba_value(value)
        if numba_value is not None:
            return numba_value
        if _is_dispatcher(value):
            kernel = self.function(value.py_func)
            return ["kernel", kernel.digest]
        if isinstance(value, pytypes.FunctionType):
            return ["function", self.function(value).digest]
        if isinstance(value, (type, pytypes.BuiltinFunctionType)):
            module = getattr(value, "__module__", None) or "builtins"
            return ["named", module, getattr(value, "__qualname__", repr(value)),
                    _library_version(module) or "user"]
        if isinstance(value, pytypes.ModuleType):
            return ["module", value.__name__]
        raise UnsupportedKernelError(
            f"a global or closure variable of type {type(value).__qualname__} ({_short(repr(value))}) "
            "cannot be hashed into the cache token, so a change to it could not be detected; "
            "pass it to the kernel as an argument or use a number, tuple or numpy array"
        )


def _numpy_value(value):
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ["ndarray", value.dtype.str, list(value.shape),
                hashlib.sha256(data.view(np.uint8).reshape(-1) if data.size else b"").hexdigest()]
    if isinstance(value, np.generic):
        return ["numpy scalar", value.dtype.str, np.asarray(value).tobytes()]
    if isinstance(value, np.dtype):
        return ["dtype", value.str, str(value)]
    return None


def _numba_value(value):
    from numba.cuda import types as nbtypes

    if isinstance(value, nbtypes.Type):
        return ["numba type", str(value)]
    from numba.cuda.compiler import ExternFunction

    if isinstance(value, ExternFunction):
        return ["extern", value.name, str(value.sig)]
    return None


def _shown(value) -> str:
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    if isinstance(value, pytypes.FunctionType):
        return f"function {value.__qualname__}"
    return repr(value)


def rebind(ident: SourceIdentity, proxy_for: Callable[[object, SourceIdentity], object]):
    """A copy of ident.pyfunc whose device functions are `proxy_for(...)` objects.

    Returns the original function when it calls no device function.
    """
    pyfunc = ident.pyfunc
    if not ident.devices and not ident.module_devices:
        return pyfunc
    code = pyfunc.__code__
    new_globals = dict(pyfunc.__globals__)
    cells = dict(zip(code.co_freevars, pyfunc.__closure__ or ()))
    new_cells = dict(cells)
    for name, (dispatcher, dev) in ident.devices.items():
        proxy = proxy_for(dispatcher, dev)
        if name in cells and cells[name].cell_contents is dispatcher:
            new_cells[name] = pytypes.CellType(proxy)
        else:
            new_globals[name] = proxy
    for name, attrs in ident.module_devices.items():
        module = new_globals[name] if name in new_globals else cells[name].cell_contents
        clone = pytypes.ModuleType(module.__name__, module.__doc__)
        clone.__dict__.update(module.__dict__)
        for attr, (dispatcher, dev) in attrs.items():
            setattr(clone, attr, proxy_for(dispatcher, dev))
        if name in cells:
            new_cells[name] = pytypes.CellType(clone)
        else:
            new_globals[name] = clone
    closure = tuple(new_cells[n] for n in code.co_freevars) or None
    copy = pytypes.FunctionType(code, new_globals, pyfunc.__name__, pyfunc.__defaults__, closure)
    copy.__kwdefaults__ = pyfunc.__kwdefaults__
    copy.__qualname__ = pyfunc.__qualname__
    copy.__module__ = pyfunc.__module__
    copy.__doc__ = pyfunc.__doc__
    return copy
