"""The identity of a kernel's source: what the typing token hashes, and the
snapshot the kernel is typed and lowered from.

numba freezes into a kernel everything the kernel reads at compile time: its
bytecode, the values of the globals and closure variables it names, the
attributes it reads through modules, and the device functions it calls (with,
transitively, what those read).  `identify` walks all of that and gives one
named component per input, so a miss can say "global OFFSET changed",
"global cfg.sub.K 3 -> 5" or "device function helper changed".

What is read, precisely:

* Globals and closure variables by the names the bytecode loads.  Attribute
  chains that start at a module (``pkg.sub.K``) are followed through every
  module, and only the attributes the code reads count.  A module is a library
  or user code by where its file lives (the standard library's folder,
  site-packages), never by its name: a library is keyed by its version, user
  code by the attributes read.
* Values by content: numbers, strings, tuples, enum classes and members (every
  member), named-tuple classes (fields and defaults), numpy arrays (contents,
  full dtype description, shape, strides and flags), numpy scalars, numba
  types.  A value whose changes could not be detected is refused with
  `UnsupportedKernelError` rather than guessed at.

Line numbers and file names reach the output only through debug information,
so they enter the identity only when debug info (``debug`` or ``lineinfo``)
is requested.

What is hashed is also what is compiled: arrays are copied when hashed, and
`rebind` returns a copy of the function that reads those copies (and module
clones holding them), with its device functions replaced by the pipeline's
proxies.  Typed IR cached from it therefore never sees a later edit of the
original objects.
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import hashlib
import importlib.metadata
import os
import site
import sys
import sysconfig
import types as pytypes
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from . import linking
from .errors import UnsupportedKernelError
from .tokens import Component, component, digest

# ---------------------------------------------------------------------------
# What a function's bytecode reads

_GLOBAL_LOADS = {"LOAD_GLOBAL", "LOAD_NAME"}
_DEREF_LOADS = {"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}
_ATTR_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}
_TRANSPARENT = {"EXTENDED_ARG", "CACHE"}

Chain = Tuple[str, ...]  # attribute names read after loading a variable; () = the value itself


@dataclass(frozen=True)
class CodeReads:
    """The variables a code object (and the code nested in it) loads, with
    the attribute chains read from each."""

    globals: Dict[str, FrozenSet[Chain]]
    derefs: Dict[str, FrozenSet[Chain]]


@functools.lru_cache(maxsize=4096)
def code_reads(code) -> CodeReads:
    found = {"global": {}, "deref": {}}
    _collect_reads(code, found)
    return CodeReads({k: frozenset(v) for k, v in found["global"].items()},
                     {k: frozenset(v) for k, v in found["deref"].items()})


def _collect_reads(code, found):
    instructions = [i for i in dis.get_instructions(code) if i.opname not in _TRANSPARENT]
    for index, inst in enumerate(instructions):
        if inst.opname in _GLOBAL_LOADS:
            kind = "global"
        elif inst.opname in _DEREF_LOADS:
            kind = "deref"
        else:
            continue
        chain = []
        for following in instructions[index + 1:]:
            if following.opname not in _ATTR_LOADS:
                break
            chain.append(following.argval)
        found[kind].setdefault(inst.argval, set()).add(tuple(chain))
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _collect_reads(const, found)


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


# ---------------------------------------------------------------------------
# Libraries and user code


@functools.lru_cache(maxsize=1)
def _folders() -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(installed-package folders, standard-library folders), each ending in a separator."""
    paths = sysconfig.get_paths()
    packages = {paths[k] for k in ("purelib", "platlib") if k in paths}
    packages |= {p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")}
    try:
        packages |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except AttributeError:  # pragma: no cover - virtualenv's old site module
        pass
    stdlib = {paths[k] for k in ("stdlib", "platstdlib") if k in paths}

    def norm(folders):
        return tuple(sorted({os.path.realpath(f) + os.sep for f in folders if f}))

    return norm(packages), norm(stdlib)


def _module_files(module) -> Tuple[str, ...]:
    files = [getattr(module, "__file__", None)] + list(getattr(module, "__path__", None) or [])
    return tuple(f for f in files if isinstance(f, str))


@functools.lru_cache(maxsize=2048)
def _file_origin(path: str) -> Optional[str]:
    """'installed', 'stdlib' or None (user code) for a source file."""
    if not os.path.isabs(path):  # "<cell>", "<string>": code typed by the user
        return None
    packages, stdlib = _folders()
    path = os.path.realpath(path)
    if path.startswith(packages):  # checked first: site-packages may lie inside the stdlib folder
        return "installed"
    if path.startswith(stdlib):
        return "stdlib"
    return None


def library_version(module) -> Optional[str]:
    """A version string when `module` is a library, None when it is user code.

    A module is a library when it is built in, or when its files live in the
    standard library's folder or in an installed-package folder; where it
    lives decides, not its name (a ``sched.py`` beside the notebook is user
    code).  An installed package is keyed by its distribution's version (its
    contents change only with its version), the standard library by Python's
    (in the typing toolchain).
    """
    name = getattr(module, "__name__", "")
    files = _module_files(module)
    if not files:
        if name in sys.builtin_module_names or getattr(module, "__spec__", None) is not None and \
                getattr(module.__spec__, "origin", None) in ("built-in", "frozen"):
            return "stdlib"
        return None
    origin = _files_origin(files)
    if origin in (None, "stdlib"):
        return origin
    return _distribution_version(name.split(".")[0])


@functools.lru_cache(maxsize=4096)
def _files_origin(files: Tuple[str, ...]) -> Optional[str]:
    """'stdlib', 'installed' or None (user code) for the files of one module."""
    origins = {_file_origin(f) for f in files}
    if None in origins:
        return None
    return "stdlib" if origins == {"stdlib"} else "installed"


@functools.lru_cache(maxsize=1024)
def _distribution_version(top: str) -> str:
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    for dist in importlib.metadata.packages_distributions().get(top, ()) or (top,):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
    return "installed"


def _class_version(cls) -> Optional[str]:
    """The version of the library that defines `cls` (a class or function), or
    None for user code.  ``__main__`` is always the user's, wherever its file
    lies (under pytest or ``python -m`` it is a library's script)."""
    name = getattr(cls, "__module__", None) or ""
    if name == "__main__":
        return None
    module = sys.modules.get(name)
    if module is None:
        return "stdlib" if name == "builtins" else None
    return library_version(module)


# ---------------------------------------------------------------------------
# What rebinding substitutes


class _Plan:
    """How one variable is bound in the rebound function."""

    def materialize(self, proxy_for):
        raise NotImplementedError


@dataclass
class _Snapshot(_Plan):
    value: Any

    def materialize(self, proxy_for):
        return self.value


@dataclass
class _Device(_Plan):
    dispatcher: Any
    identity: "SourceIdentity"

    def materialize(self, proxy_for):
        return proxy_for(self.dispatcher, self.identity)


@dataclass
class _Tuple(_Plan):
    original: tuple
    items: List[Optional[_Plan]]

    def materialize(self, proxy_for):
        values = [old if plan is None else plan.materialize(proxy_for)
                  for old, plan in zip(self.original, self.items)]
        cls = type(self.original)
        return cls._make(values) if hasattr(cls, "_make") else cls(values)


@dataclass
class _ModuleClone(_Plan):
    module: pytypes.ModuleType
    attrs: Dict[str, _Plan]

    def materialize(self, proxy_for):
        clone = pytypes.ModuleType(self.module.__name__, self.module.__doc__)
        clone.__dict__.update(self.module.__dict__)
        for attr, plan in self.attrs.items():
            setattr(clone, attr, plan.materialize(proxy_for))
        return clone


@dataclass
class SourceIdentity:
    """What a function's typed IR depends on, as named components."""

    qualname: str
    pyfunc: Callable
    components: Dict[str, Component]
    # ("global" | "closure", name) -> what the rebound function reads instead
    bindings: Dict[Tuple[str, str], _Plan] = field(default_factory=dict)
    # every device function this function calls directly: (dispatcher, identity)
    devices: List[Tuple[object, "SourceIdentity"]] = field(default_factory=list)
    snapshot_bytes: int = 0  # size of the array copies the bindings hold
    # external device functions (cuda.declare_device) it calls directly
    externs: List[str] = field(default_factory=list)
    # (on the kernel's identity) what those link, anywhere in the walk, read
    # once: the cubin stage links these (its token hashes their digests), and
    # `link_keys` tells them from what numba itself adds to a kernel's library
    links: Tuple[Any, ...] = ()
    link_keys: FrozenSet[Any] = frozenset()
    # (on the kernel's identity) external functions declared without link=:
    # the kernel's own link= must define them
    unlinked: Tuple[str, ...] = ()
    # (on the kernel's identity) device arrays read as globals, anywhere in the
    # walk: compiled code holds their pointers, so the result keeps them alive
    referenced: Tuple[Any, ...] = ()

    @property
    def digest(self) -> str:
        return digest({k: v.digest for k, v in self.components.items()})


# Signatures declared for device functions the magic keeps lazy (numba would
# compile them at once, for the current GPU): dispatcher -> ((args, return type), ...)
_declared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def declare_signatures(dispatcher, signatures) -> None:
    """Record the signatures given to a lazy ``@cuda.jit(sig, device=True)``."""
    from numba.cuda.core import sigutils

    declared = []
    for sig in signatures:
        args, return_type = sigutils.normalize_signature(sig)
        declared.append((tuple(args), return_type))
    _declared[dispatcher] = tuple(declared)


def declared_signatures(dispatcher) -> Tuple[Tuple[tuple, Any], ...]:
    """The signatures a device function was declared with, as numba calls it
    with them (arguments and result cast); () when it types per call."""
    found = _declared.get(dispatcher) if hasattr(dispatcher, "__weakref__") else None
    if found is not None:
        return found
    if is_device_dispatcher(dispatcher) and not getattr(dispatcher, "_can_compile", True):
        return tuple((tuple(sig.args), sig.return_type) for sig in dispatcher.nopython_signatures)
    return ()


def _device_options(dispatcher):
    from .stages import device_options

    return device_options(dispatcher)


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


def identify(func, with_location: bool, freeze: bool = False) -> SourceIdentity:
    """The identity of `func` (a Python function or dispatcher).

    With `freeze`, `rebind` gives a function that reads every global, closure
    variable and module attribute as it is now (what compiled code bakes in),
    not only the arrays and device functions it must substitute: the
    simulator runs Python code, and must see what a GPU would run.
    """
    walker = _Walker(with_location, freeze)
    ident = walker.function(python_function(func))
    ident.referenced = tuple(walker.referenced)
    ident.links = linking.canonical(walker.links)
    ident.link_keys = frozenset(walker.link_keys)
    ident.unlinked = tuple(walker.unlinked.values())
    return ident


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Walker:
    def __init__(self, with_location: bool, freeze: bool = False):
        self.with_location = with_location
        self.freeze = freeze
        self.referenced: List[Any] = []  # device arrays whose pointers compiled code holds
        self.links: List[Any] = []  # LinkInputs: what external functions link
        self.link_keys: set = set()
        self.unlinked: Dict[str, str] = {}  # external functions without link=: name -> refusal
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
            parts["defaults"] = Component(digest(self._data(
                (pyfunc.__defaults__, tuple(sorted((pyfunc.__kwdefaults__ or {}).items()))), ident)[0]),
                "defaults")
        reads = code_reads(code)
        gvars = pyfunc.__globals__
        for name in sorted(reads.globals):
            if name in gvars:
                self._variable(ident, "global", name, gvars[name], reads.globals[name])
            # else a builtin: part of the Python version in the toolchain
        for name, cell in zip(code.co_freevars, pyfunc.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                raise UnsupportedKernelError(
                    f"{qualname} reads closure variable {name!r} before it is assigned"
                ) from None
            self._variable(ident, "closure", name, value, reads.derefs.get(name, frozenset({()})))
        return ident

    def _variable(self, ident, kind, name, value, chains):
        if isinstance(value, pytypes.ModuleType):
            plan = self._module(ident, f"{kind} {name}", name, value, chains)
        else:
            plan = self._read(ident, f"{kind} {name}", name, value)
        if plan is not None:
            ident.bindings[(kind, name)] = plan

    def _read(self, ident, component_name, where, value) -> Optional[_Plan]:
        """Key one value the function reads (a device function keys itself, by
        its own identity); returns how the rebound function reads it."""
        data, plan = self._data(value, ident, label=where)
        if not (isinstance(plan, _Device) and plan.dispatcher is value):
            ident.components[component_name] = Component(digest(data), _short(_shown(value)))
        return _Snapshot(value) if plan is None and self.freeze else plan

    def _module(self, ident, label, path, module, chains) -> Optional[_Plan]:
        """Components for the attributes read through `module`; a clone plan when needed."""
        version = library_version(module)
        if version is not None:
            ident.components[label] = component(["module", module.__name__, version],
                                                f"module {module.__name__}")
            for chain in chains:
                _check_library_chain(ident.qualname, path, module, chain)
            return None
        if () in chains:
            raise UnsupportedKernelError(
                f"{ident.qualname} uses module {path} ({module.__name__}) as a value; the cache "
                f"tracks the attributes read as {path}.name, so write {path}.name where it is used"
            )
        rests: Dict[str, set] = {}
        for chain in chains:
            rests.setdefault(chain[0], set()).add(chain[1:])
        attrs = {}
        for attr in sorted(rests):
            where = f"{path}.{attr}"
            if not hasattr(module, attr):
                # numba fails to type it; still keyed, so defining it later is a change
                ident.components[f"{label}.{attr}"] = component(["missing"], "missing")
                continue
            value = getattr(module, attr)
            if isinstance(value, pytypes.ModuleType):
                plan = self._module(ident, f"{label}.{attr}", where, value, frozenset(rests[attr]))
            else:
                plan = self._read(ident, f"{label}.{attr}", where, value)
            if plan is not None:
                attrs[attr] = plan
        return _ModuleClone(module, attrs) if attrs or self.freeze else None

    def _data_device(self, dispatcher, pyfunc, ident, label):
        """A device function (or one numba compiles as one): hashed by its own
        identity, and proxied in the rebound function."""
        dev = self.function(pyfunc)
        declared = declared_signatures(dispatcher)
        if declared:  # the same function declared otherwise compiles otherwise
            shown = "; ".join(f"{ret}({', '.join(map(str, args))})" for args, ret in declared)
            dev = dataclasses.replace(dev, components={
                **dev.components, "declared signatures": component(shown)})
        # numba lowers a device function with its own options (stages.device_options)
        options = {name: value for name, value in sorted(_device_options(dispatcher).items())
                   if value not in (False, "never")}
        if options:
            dev = dataclasses.replace(dev, components={
                **dev.components, "device options": component(repr(options))})
        ident.devices.append((dispatcher, dev))
        ident.components[f"device function {label}"] = Component(dev.digest, "device function")
        return ["device function", dev.digest], _Device(dispatcher, dev)

    def _extern(self, value, ident, label):
        """cuda.declare_device: keyed by name and signature; what it links is
        read now and keys the cubin stage alone (see `linking`)."""
        from numba.cuda.compiler import ExternFunction

        if not isinstance(value, ExternFunction):
            return None
        items, cooperative = linking.extern_link_items(value)
        origin = f"{ident.qualname} calls {label} ({value.name}), declared with cuda.declare_device: "
        if not items:  # the kernel's link= must define it (checked by the cache)
            self.unlinked[value.name] = (
                f"{origin}nothing defines it: give the file or code that does, "
                f"cuda.declare_device({value.name!r}, ..., link=[...]) or @cuda.jit(link=[...])"
            )
        for item in items:
            link = linking.read(item, origin)
            self.links.append(link)
            self.link_keys.add(linking.item_key(item))
        ident.externs.append(value.name)
        return ["external device function", value.name, str(value.sig), cooperative]

    def _device_array(self, value, ident):
        """A device array read as a global: numba bakes its *pointer* into the
        code (the kernel sees later writes to it), so it is keyed by pointer,
        shape, strides and type, and kept alive with the compile result.  A
        simulator array stands for one: it compiles as a device array over its
        host buffer, and the simulator reads the array itself."""
        simulated = type(value).__name__ == "FakeCUDAArray" and hasattr(value, "_ary")
        if not simulated and getattr(value, "__cuda_array_interface__", None) is None:
            return None
        interface = (_HostBuffer(value._ary) if simulated else value).__cuda_array_interface__
        if interface.get("mask") is not None:
            raise UnsupportedKernelError(f"{ident.qualname} reads a masked device array")
        from numba.cuda.typing.typeof import Purpose, typeof

        self.referenced.append(value)
        data = ["device array", list(interface["data"]), list(interface["shape"]),
                list(interface.get("strides") or ()), interface["typestr"],
                str(typeof(value, Purpose.constant))]
        if simulated and not self.freeze:
            return data, _Snapshot(_HostBuffer(value._ary))
        return data, None

    def _numba_function(self, value, ident, label):
        kind = type(value).__name__
        pyfunc = getattr(value, "py_func", None) or getattr(value, "_defn", None)
        if pyfunc is None or _file_origin(pyfunc.__code__.co_filename) is not None:
            data = ["library " + kind, getattr(pyfunc, "__module__", "?"),
                    getattr(pyfunc, "__qualname__", repr(value)), _class_version(pyfunc) or "?"]
            # the simulator runs Python: it calls the function numba would compile
            simulated = _Snapshot(pure_python(value)) if self.freeze and kind != "_Intrinsic" else None
            return data, simulated
        if kind == "_Intrinsic":
            raise UnsupportedKernelError(
                f"{ident.qualname} calls {label}, an @intrinsic defined in user code; numba keeps "
                "its typing and lowering in process-wide tables keyed by argument types alone, "
                "which the cache cannot key yet"
            )
        # numba.njit function: numba-cuda compiles its Python function as a device function
        return self._data_device(value, pyfunc, ident, label)

    # -- values -------------------------------------------------------------
    def _data(self, value, ident, label="") -> Tuple[Any, Optional[_Plan]]:
        """(JSON-able description of `value`, its rebinding plan or None)."""
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return [type(value).__name__, value], None
        if isinstance(value, complex):
            return ["complex", value.real, value.imag], None
        if isinstance(value, enum.Enum):
            return ["enum member", _class_data(type(value)), value.name], None
        if isinstance(value, tuple):
            items = [self._data(v, ident, f"{label}[{i}]") for i, v in enumerate(value)]
            fields = getattr(type(value), "_fields", None)
            data = ["tuple", _class_data(type(value)) if fields is not None else "tuple",
                    [d for d, _ in items]]
            plans = [p for _, p in items]
            return data, (_Tuple(value, plans) if any(p is not None for p in plans) else None)
        if isinstance(value, list):
            return ["list", [self._data(v, ident, label)[0] for v in value]], None
        if is_device_dispatcher(value):
            return self._data_device(value, value.py_func, ident, label)
        device_data = self._device_array(value, ident)
        if device_data is not None:
            return device_data
        numpy_data = _numpy_data(value, ident)
        if numpy_data is not None:
            return numpy_data
        extern_data = self._extern(value, ident, label)
        if extern_data is not None:
            return extern_data, None
        numba_data = _numba_data(value, ident.qualname, label)
        if numba_data is not None:
            return numba_data, None
        if _is_dispatcher(value):  # a kernel called from a kernel: numba compiles it as a device function
            return self._data_device(value, value.py_func, ident, label)
        if _is_numba_function(value):
            return self._numba_function(value, ident, label)
        if isinstance(value, pytypes.FunctionType):
            if _file_origin(value.__code__.co_filename) is not None:
                return ["library function", value.__module__, value.__qualname__,
                        _class_version(value) or "stdlib"], None
            jitable = _registered_jitable(value, ident.qualname, label)
            if jitable:
                return self._data_device(value, value, ident, label)
            return ["function", self.function(value).digest], None
        if isinstance(value, type):
            return _class_data(value), None
        if isinstance(value, pytypes.BuiltinFunctionType):
            module = getattr(value, "__module__", None) or "builtins"
            return ["builtin", module, getattr(value, "__qualname__", repr(value))], None
        if isinstance(value, pytypes.ModuleType):
            version = library_version(value)
            if version is None:
                raise UnsupportedKernelError(
                    f"{ident.qualname} reads user module {value.__name__} inside {label}; the cache "
                    "tracks user modules only as module.attribute read directly"
                )
            return ["module", value.__name__, version], None
        raise UnsupportedKernelError(
            f"{ident.qualname} reads {label} of type {type(value).__qualname__} "
            f"({_short(repr(value))}), which cannot be hashed into the cache token, so a change "
            "to it could not be detected; pass it to the kernel as an argument or use a number, "
            "tuple, enum or numpy array"
        )


def pure_python(dispatcher, memo=None):
    """The Python function behind a numba dispatcher, with the dispatchers it
    calls replaced the same way: what the simulator runs for a library
    function numba would compile as a device function (cuda.random's)."""
    memo = {} if memo is None else memo
    pyfunc = python_function(dispatcher)
    if id(pyfunc) in memo:
        return memo[id(pyfunc)]
    namespace = dict(pyfunc.__globals__)
    copy = memo[id(pyfunc)] = _copy_function(pyfunc, namespace, pyfunc.__closure__)
    for name in code_reads(pyfunc.__code__).globals:
        value = namespace.get(name)
        if value is not None and _is_numba_function(value) and type(value).__name__ != "_Intrinsic":
            namespace[name] = pure_python(value, memo)
    return copy


def host_array_interface(array) -> dict:
    """The CUDA Array Interface of a numpy array's host buffer: what a
    simulator array stands for (a device array, by its pointer)."""
    interface = array.__array_interface__
    return {"shape": interface["shape"], "strides": interface.get("strides"),
            "typestr": interface["typestr"], "data": interface["data"], "version": 3}


class _HostBuffer:
    """A simulator array's host buffer, presented as a device array (by its
    pointer) so numba compiles a kernel reading it as it would on a GPU."""

    def __init__(self, array):
        self._array = array

    @property
    def __cuda_array_interface__(self):
        return host_array_interface(self._array)


def _is_numba_function(value) -> bool:
    """A numba CPU dispatcher (``numba.njit``) or an ``@intrinsic``, which
    numba-cuda also compiles when a kernel calls them."""
    kind = type(value).__name__
    module = type(value).__module__ or ""
    return module.startswith("numba") and (
        kind == "_Intrinsic" or (hasattr(value, "py_func") and hasattr(value, "targetoptions")))


def _registered_jitable(func, qualname, label) -> bool:
    """True when user function `func` is made callable from kernels by
    ``register_jitable`` (it compiles as a device function would).  A user
    function with its own ``@overload`` implementation is refused: numba keeps
    the implementations it builds in process-wide tables keyed by argument
    types alone, which the cache cannot key."""
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.typing_context
    context.refresh()
    found = context._lookup_global(func)
    templates = getattr(found, "templates", None) or ()
    if not templates:
        return False
    for template in templates:
        overload_func = getattr(template, "_overload_func", None)
        name = getattr(overload_func, "__qualname__", "")
        if name.startswith("register_jitable.") and _file_origin(overload_func.__code__.co_filename):
            continue
        raise UnsupportedKernelError(
            f"{qualname} calls {label}, which has an @overload implementation defined in user "
            f"code ({name or template.__name__}); the cache cannot key numba's per-type tables "
            "of such implementations yet.  Write the implementation as a "
            "@cuda.jit(device=True) function and call that"
        )
    return True


def library_identity_digest(pyfunc) -> Optional[str]:
    """A digest naming library function `pyfunc` (None for user code): its
    place, its code, its library's version and what its closure holds.  Used
    to name the proxies of library functions numba reaches on its own."""
    code = pyfunc.__code__
    if _file_origin(code.co_filename) is None:
        return None
    cells = []
    for cell in pyfunc.__closure__ or ():
        try:
            cells.append(_describe(cell.cell_contents))
        except ValueError:
            cells.append("empty")
    return digest(["library function", pyfunc.__module__, pyfunc.__qualname__,
                   _class_version(pyfunc) or "stdlib", _code_digest(code, False), cells])


def _describe(value):
    """A process-independent description of a value a library closure holds
    (numbers, strings, numba types, functions and classes by name)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return [type(value).__name__, value]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [_describe(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted([repr(k), _describe(v)] for k, v in value.items())]
    pyfunc = getattr(value, "py_func", value)
    if isinstance(pyfunc, (pytypes.FunctionType, type, pytypes.BuiltinFunctionType)):
        return ["named", getattr(pyfunc, "__module__", None), getattr(pyfunc, "__qualname__", None)]
    from numba.cuda import types as nbtypes

    if isinstance(value, nbtypes.Type):
        return ["numba type", str(value)]
    if type(value).__name__ == "FFI" and type(value).__module__.startswith("cffi"):
        # numba types every cffi FFI object alike (types.ffi: only
        # ffi.from_buffer), whatever it declares
        from numba.cuda.typing import cffi_utils

        if cffi_utils.is_ffi_instance(value):
            return ["cffi FFI object"]
    # Anything else is told apart by identity within this process only.
    return ["object", type(value).__qualname__, id(value)]


def _class_data(cls) -> list:
    """What numba may read of a class: enum members, named-tuple fields, its place."""
    version = _class_version(cls)
    name = [getattr(cls, "__module__", "?"), cls.__qualname__]
    if version is not None:
        return ["library class", *name, version]
    bases = [[b.__module__, b.__qualname__] for b in cls.__mro__[1:] if _class_version(b) is not None]
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
    raise UnsupportedKernelError(
        f"class {cls.__qualname__} is defined in user code and is not an enum, named tuple or "
        "exception class; what numba reads of it (numba extension registrations) cannot be "
        "tracked by the cache"
    )


def _plain_data(value, label) -> list:
    """An immutable value held by a class (an enum member's value, a field default)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return [type(value).__name__, value]
    if isinstance(value, complex):
        return ["complex", value.real, value.imag]
    if isinstance(value, tuple):
        return ["tuple", [_plain_data(v, label) for v in value]]
    if isinstance(value, enum.Enum):
        return ["enum member", _class_data(type(value)), value.name]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic) and not value.dtype.hasobject:
        return ["numpy scalar", _dtype_data(value.dtype), np.asarray(value).tobytes()]
    raise UnsupportedKernelError(
        f"{label} holds a {type(value).__qualname__}; class attributes the cache can track are "
        "numbers, strings, tuples, enum members and numpy scalars"
    )


def _check_library_chain(qualname, path, module, chain):
    """Refuse what a library attribute chain reaches that the pipeline cannot compile yet."""
    value = module
    for depth, attr in enumerate(chain):
        value = getattr(value, attr, None)
        if value is None:
            return
        _numba_data(value, qualname, ".".join((path, *chain[:depth + 1])))


def _dtype_data(dtype) -> list:
    """A dtype in full: byte order, kind and size, or every field's name, offset and type."""
    if dtype.fields is not None:
        fields = []
        for name in dtype.names:
            spec = dtype.fields[name]
            fields.append([name, _dtype_data(spec[0]), spec[1], spec[2] if len(spec) > 2 else None])
        return ["struct", dtype.itemsize, bool(dtype.isalignedstruct), fields]
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return ["subarray", _dtype_data(base), list(shape)]
    return ["dtype", dtype.str]


def _numpy_data(value, ident):
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise UnsupportedKernelError(
                f"{ident.qualname} reads an array of Python objects ({value.dtype}); "
                "numba cannot compile it into a kernel"
            )
        snapshot = _snapshot_array(value, ident.qualname)
        ident.snapshot_bytes += snapshot.nbytes
        contiguous = np.ascontiguousarray(snapshot)
        content = hashlib.sha256(contiguous.view(np.uint8).reshape(-1) if contiguous.size else b"")
        flags = snapshot.flags
        data = ["ndarray", _dtype_data(value.dtype), list(value.shape), list(value.strides),
                [bool(flags.c_contiguous), bool(flags.f_contiguous), bool(flags.writeable),
                 bool(flags.aligned)], content.hexdigest()]
        return data, _Snapshot(snapshot)
    if isinstance(value, np.generic):
        if value.dtype.hasobject:
            raise UnsupportedKernelError(
                f"{ident.qualname} reads a numpy scalar holding Python objects ({value.dtype}); "
                "numba cannot compile it into a kernel"
            )
        # a record (np.void) can be a view into an array: hash and compile a copy
        snapshot = value.copy() if isinstance(value, np.void) else value
        data = ["numpy scalar", _dtype_data(value.dtype), np.asarray(snapshot).tobytes()]
        return data, (_Snapshot(snapshot) if snapshot is not value else None)
    if isinstance(value, np.dtype):
        return ["dtype", _dtype_data(value)], None
    return None


def _snapshot_array(array, qualname):
    """A private copy of `array` with the same shape, strides and flags (so numba
    types it and bakes it exactly as it would the original)."""
    np = sys.modules["numpy"]
    if array.size == 0:
        copy = array.copy(order="K")
    else:
        low = sum(s * (n - 1) for s, n in zip(array.strides, array.shape) if s < 0)
        high = sum(s * (n - 1) for s, n in zip(array.strides, array.shape) if s > 0) + array.itemsize
        # byte for byte, padding included (numba bakes the raw bytes of records)
        import ctypes

        span = (ctypes.c_uint8 * (high - low)).from_address(array.ctypes.data + low)
        buffer = np.frombuffer(span, dtype=np.uint8).copy()
        copy = np.ndarray(array.shape, array.dtype, buffer=buffer, offset=-low, strides=array.strides)
    if not array.flags.writeable:
        copy.flags.writeable = False
    from numba.cuda.typing.typeof import Purpose, typeof

    if typeof(copy, Purpose.constant) != typeof(array, Purpose.constant):
        raise UnsupportedKernelError(
            f"{qualname} reads an array ({array.dtype}, shape {array.shape}, strides "
            f"{array.strides}) whose layout the cache cannot copy exactly; pass a copy "
            "made with numpy.ascontiguousarray"
        )
    return copy


def _numba_data(value, qualname, label):
    from numba.cuda import types as nbtypes

    if isinstance(value, nbtypes.Type):
        return ["numba type", str(value)]
    if type(value).__name__ == "FFI" and type(value).__module__.startswith("cffi"):
        # numba types every cffi FFI object alike (types.ffi: only
        # ffi.from_buffer), whatever it declares
        from numba.cuda.typing import cffi_utils

        if cffi_utils.is_ffi_instance(value):
            return ["cffi FFI object"]
    return None


def _shown(value) -> str:
    if type(value).__name__ == "FakeCUDAArray":
        return f"device array{tuple(value.shape)} {value.dtype}"
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface:  # any object with the CUDA Array Interface
        return f"device array{tuple(interface['shape'])} {interface['typestr']}"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    if isinstance(value, pytypes.FunctionType):
        return f"function {value.__qualname__}"
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    return repr(value)


def rebind(ident: SourceIdentity, proxy_for: Callable[[object, SourceIdentity], object]):
    """A copy of ident.pyfunc that reads the snapshots and proxies of `ident`.

    Device functions become ``proxy_for(dispatcher, identity)`` objects; arrays
    the copies that were hashed; modules that lead to either, clones holding
    them.  Returns the original function when there is nothing to substitute.
    """
    pyfunc = ident.pyfunc
    if not ident.bindings:
        return pyfunc
    code = pyfunc.__code__
    new_globals = pyfunc.__globals__
    cells = dict(zip(code.co_freevars, pyfunc.__closure__ or ()))
    for (kind, name), plan in ident.bindings.items():
        value = plan.materialize(proxy_for)
        if kind == "closure":
            cells[name] = pytypes.CellType(value)
        else:
            if new_globals is pyfunc.__globals__:
                new_globals = dict(pyfunc.__globals__)
            new_globals[name] = value
    return _copy_function(pyfunc, new_globals, tuple(cells[n] for n in code.co_freevars) or None)


def _copy_function(pyfunc, namespace, closure):
    """`pyfunc` reading its globals from `namespace` and its free variables from `closure`."""
    copy = pytypes.FunctionType(pyfunc.__code__, namespace, pyfunc.__name__, pyfunc.__defaults__, closure)
    copy.__kwdefaults__ = pyfunc.__kwdefaults__
    copy.__qualname__ = pyfunc.__qualname__
    copy.__module__ = pyfunc.__module__
    copy.__doc__ = pyfunc.__doc__
    return copy
