"""The identity of a kernel's source: what the typing token hashes, and the
snapshot the kernel is typed and lowered from.

numba freezes into a kernel everything the kernel reads at compile time: its
bytecode, the values of the globals and closure variables it names, the
attributes it reads through modules, and the device functions it calls (with,
transitively, what those read).  `identify` walks all of that and gives one
named component per input, so a miss can say "global OFFSET changed",
"global cfg.sub.K 3 -> 5", "global ALPHA 1.5 -> 3.0 (read by helper)" or
"device function helper: code changed".

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

import builtins
import dataclasses
import dis
import enum
import functools
import linecache
import os
import struct
import sys
import threading
import types as pytypes
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import xxhash

from . import libraries
from .toolchain import linking
from .errors import SnapshotChanged, UnsupportedKernelError  # noqa: F401  (SnapshotChanged: importable here too)
from .options import device_options
from .tokens import Component, component, digest, parts_digest
from .usercode import DEPTH, cell_value, dunder, numba_made, numba_type, touches_user_code, user_function, user_module

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


def _by_code(fn):
    """`fn(code, *args)` memoised by the code object's identity (the memo holds
    it, so its id stays its own): an lru_cache would hash and compare code
    objects, bytecode and constants, tens of microseconds on a cold hit, and
    equal code objects may differ in their file name."""
    memo: Dict[tuple, tuple] = {}

    @functools.wraps(fn)
    def memoised(code, *args):
        key = (id(code), *args)
        found = memo.get(key)
        if found is None or found[0] is not code:
            if len(memo) >= 4096:
                memo.clear()
            found = memo[key] = (code, fn(code, *args))
        return found[1]

    return memoised


@_by_code
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


@_by_code
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
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.generic, np.ndarray)) and not value.dtype.hasobject:
        # (generated code may hold numpy values: by their bytes, not a repr that prints every
        # float32 NaN alike and elides the middle of a large array)
        return ["numpy", _dtype_data(value.dtype), list(np.shape(value)), _array_content(np.asarray(value))]
    return ["repr", repr(value)]


# ---------------------------------------------------------------------------
# Libraries and user code: `libraries` decides (by where a file lives) and
# keys a library (by the distribution that owns its file)

library_version = libraries.library_version
_file_origin = libraries.file_origin
_class_version = libraries.class_version


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
class _ArraySnapshot(_Plan):
    """A numpy array, hashed live (cheap: a hit never copies it) and copied
    when a compile needs it; the copy must hash as the array did, or the
    array changed meanwhile (`SnapshotChanged`)."""

    array: Any
    data: list  # its description as hashed (`_array_data`)
    qualname: str
    copy: Any = None

    def materialize(self, proxy_for):
        if self.copy is None:
            copy = _snapshot_array(self.array, self.qualname)
            # (the copy's own buffer may be aligned where the array was not: compared apart from flags)
            same = _array_data(copy, _array_content(copy))
            if same[:4] != self.data[:4] or same[5] != self.data[5] or same[4][2] != self.data[4][2]:
                raise SnapshotChanged(f"an array {self.qualname} reads changed while it was being compiled")
            self.copy = copy
        return self.copy


@dataclass
class _Device(_Plan):
    dispatcher: Any
    identity: "SourceIdentity"

    def materialize(self, proxy_for):
        return proxy_for(self.dispatcher, self.identity)


@dataclass
class _Sequence(_Plan):
    """A tuple or list as it was read, its items bound by their own plans."""

    kind: type
    original: Any  # the items as read (a list: a copy)
    items: List[Optional[_Plan]]

    def materialize(self, proxy_for):
        values = [old if plan is None else plan.materialize(proxy_for)
                  for old, plan in zip(self.original, self.items)]
        if self.kind is list:
            return values
        return self.kind._make(values) if hasattr(self.kind, "_make") else self.kind(values)


@dataclass
class _ModuleClone(_Plan):
    """A user module as the function read it: a new module holding only the
    attributes read, each as it was hashed (numba types a module's attribute
    by reading it from the module object it is given)."""

    name: str
    doc: Optional[str]
    attrs: Dict[str, _Plan]

    def materialize(self, proxy_for):
        clone = pytypes.ModuleType(self.name, self.doc)
        for attr, plan in self.attrs.items():
            setattr(clone, attr, plan.materialize(proxy_for))
        return clone


@dataclass
class SourceIdentity:
    """What a function's typed IR depends on, as named components, and the
    snapshot of everything they were hashed from (what `rebind` compiles)."""

    qualname: str
    pyfunc: Callable
    components: Dict[str, Component]
    # ("global" | "closure", name) -> what the rebound function reads (every
    # variable its code reads: builtins are globals there)
    bindings: Dict[Tuple[str, str], _Plan] = field(default_factory=dict)
    # the function's own attributes, read once (each can be reassigned)
    code: Any = None
    name: str = ""
    module: Optional[str] = None
    func_qualname: str = ""
    namespace_name: Any = None  # its globals' __name__ (numba reads it)
    defaults: Optional[tuple] = None
    kwdefaults: Optional[dict] = None
    # the file numba-cuda writes into debug info (os.path.abspath of the code's
    # file, so the working directory for cells), None without debug info
    debug_filename: Optional[str] = None
    def_line: Optional[int] = None  # the line of `def` numba-cuda names there (None: not found)
    # (device functions) the signatures it was declared with and the options it
    # is lowered with, as hashed
    declared: Tuple[Tuple[tuple, Any], ...] = ()
    options: Dict[str, Any] = field(default_factory=dict)
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
    # (on the kernel's identity) what numba reads live from library modules
    # (their attributes, read through the module as the rebound function is
    # given it), as the walk read them: (namespace, name, value, label)
    library_reads: Tuple[Tuple[Any, str, Any, str], ...] = ()

    @property
    def digest(self) -> str:
        return parts_digest(self.components)  # (what a device function's component carries parts for)


# Signatures declared for device functions the magic keeps lazy (numba would
# compile them at once, for the current GPU): dispatcher -> ((args, return type), ...)
_declared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def declare_signatures(dispatcher, signatures) -> None:
    """Record the signatures given to a lazy ``@cuda.jit(sig, device=True)``.

    As numba-cuda's decorator reads them: a signature without a return type
    (``"(int64, int64)"``) is recorded with None, its return type inferred
    when it is typed (`stages.DeviceProxy.compile_device`); of several that
    take the same argument types, the first alone counts (numba compiles it,
    then finds those arguments compiled and skips the others)."""
    from numba.cuda.core import sigutils

    declared = {}
    for sig in signatures:
        args, return_type = sigutils.normalize_signature(sig)
        declared.setdefault(tuple(args), return_type)
    _declared[dispatcher] = tuple(declared.items())


def shown_signature(args, return_type) -> str:
    """A declared signature as written: ``(int64, int64)`` without a return type."""
    shown = f"({', '.join(map(str, args))})"
    return shown if return_type is None else f"{return_type}{shown}"


def declared_signatures(dispatcher) -> Tuple[Tuple[tuple, Any], ...]:
    """The signatures a device function was declared with, as numba calls it
    with them (arguments and result cast; a return type None is inferred),
    one per argument types; () when it types per call."""
    found = _declared.get(dispatcher) if hasattr(dispatcher, "__weakref__") else None
    if found is not None:
        return found
    if is_device_dispatcher(dispatcher) and not getattr(dispatcher, "_can_compile", True):
        return tuple((tuple(sig.args), sig.return_type) for sig in dispatcher.nopython_signatures)
    return ()


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
    """The identity of `func` (a Python function or dispatcher), and the
    snapshot it was hashed from.

    Every variable the code reads (module globals, builtins, closure cells,
    defaults, module attribute chains, device functions and what they read)
    is read once; its description enters the components and the object read
    (a copy, for an array) enters the bindings, which `rebind` compiles from.
    So what is hashed is what is compiled, whatever changes meanwhile.

    With `freeze`, the bindings are what the simulator runs (it runs Python):
    library functions numba would compile become their Python functions, and
    simulator arrays stay themselves.
    """
    walker = _Walker(with_location, freeze)
    ident = walker.function(python_function(func))
    ident.referenced = tuple(walker.referenced)
    ident.library_reads = tuple(walker.library_reads)
    ident.links = linking.canonical(walker.links)
    ident.link_keys = frozenset(walker.link_keys)
    ident.unlinked = tuple(walker.unlinked.values())
    return ident


def def_line(pyfunc) -> Optional[int]:
    """The line of `def` numba-cuda writes into debug info (None when it finds
    no source), found as it finds it (`get_func_def_lineno`: the source text
    from linecache, parsed).  Memoised per code object and linecache entry:
    the text of a file edited on disk changes the answer, not the code."""
    from numba.cuda.misc.firstlinefinder import get_func_def_lineno

    code = pyfunc.__code__
    linecache.checkcache(code.co_filename)  # (as inspect does: a file changed on disk is read again)
    linecache.getlines(code.co_filename)
    entry = linecache.cache.get(code.co_filename)
    if entry is None or len(entry) != 4:  # no source at all: nothing to remember it by
        return get_func_def_lineno(pyfunc)
    key = (code, code.co_filename, id(entry[2]), entry[:2])
    found = _DEF_LINES.get(key, _MISSING)
    if found is _MISSING:
        found = get_func_def_lineno(pyfunc)
        if len(_DEF_LINES) > 4096:
            _DEF_LINES.clear()
        _DEF_LINES[key] = found
    return found


_DEF_LINES: Dict[Any, Optional[int]] = {}


def _value_key(value):
    """A key telling apart every plain value whose component can be memoised
    (exact scalars, by type and bits; numba types whose key holds no class),
    None for any other value."""
    kind = type(value)
    if kind is float:
        return (float, struct.pack(">d", value))
    if kind in _EXACT_SCALARS:
        return (kind, value)
    if _is_numba_type(value) and value in _TYPE_DATA:
        return ("numba type", value)
    return None


def _is_numba_type(value) -> bool:
    """``isinstance(value, numba.cuda.types.Type)`` by the class's bases: the
    ABC's own check walks every one of numba's type classes for each new
    class that is none (0.1 s on a first compile)."""
    kind = type(value)
    known = _NUMBA_TYPE_CLASSES.get(kind)
    if known is None:
        from numba.cuda import types as nbtypes

        known = _NUMBA_TYPE_CLASSES[kind] = nbtypes.Type in kind.__mro__
    return known


_NUMBA_TYPE_CLASSES: Dict[type, bool] = {}


_VALUE_COMPONENTS: Dict[Any, Component] = {}


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()
# The builtins as Python starts them: a name read from builtins that is still
# the same object is keyed by its name (Python's version is in the toolchain);
# anything a program put into builtins is keyed by its value, as a global is.
_PRISTINE_BUILTINS = dict(builtins.__dict__)


class _Walker:
    def __init__(self, with_location: bool, freeze: bool = False):
        self.with_location = with_location
        self.freeze = freeze
        self.referenced: List[Any] = []  # device arrays whose pointers compiled code holds
        self.library_reads: List[Tuple[Any, str, Any, str]] = []  # (`SourceIdentity.library_reads`)
        self.links: List[Any] = []  # LinkInputs: what external functions link
        self.link_keys: set = set()
        self.unlinked: Dict[str, str] = {}  # external functions without link=: name -> refusal
        self.active = []  # functions being walked (cycle guard)
        self.memo = {}

    def function(self, pyfunc, with_location: Optional[bool] = None) -> SourceIdentity:
        with_location = self.with_location if with_location is None else with_location
        key = (id(pyfunc), with_location)
        if key in self.memo:
            return self.memo[key]
        if pyfunc in self.active:
            raise UnsupportedKernelError(
                f"{pyfunc.__qualname__} is reached recursively through device functions; "
                "recursive device functions are not supported by the staged cache"
            )
        self.active.append(pyfunc)
        try:
            ident = self._function(pyfunc, with_location)
        finally:
            self.active.pop()
        self.memo[key] = ident
        return ident

    def _function(self, pyfunc, with_location: bool) -> SourceIdentity:
        # each attribute read once: what is hashed below is what rebind compiles
        code, namespace, closure = pyfunc.__code__, pyfunc.__globals__, pyfunc.__closure__
        defaults, kwdefaults = pyfunc.__defaults__, pyfunc.__kwdefaults__
        kwdefaults = dict(kwdefaults) if kwdefaults else None
        qualname = f"{pyfunc.__module__}.{pyfunc.__qualname__}"
        ident = SourceIdentity(qualname, pyfunc, {}, code=code, name=pyfunc.__name__, module=pyfunc.__module__,
                               func_qualname=pyfunc.__qualname__, namespace_name=namespace.get("__name__"),
                               defaults=defaults, kwdefaults=kwdefaults)
        parts = ident.components
        parts["function"] = component(qualname)
        parts["code"] = Component(_code_digest(code, with_location), "code")
        if with_location:
            # numba-cuda writes os.path.abspath(co_filename) into debug info:
            # for a cell or exec'd code, the working directory is an input
            ident.debug_filename = os.path.abspath(code.co_filename)
            # and the line of `def`, which it finds by parsing the source text
            ident.def_line = def_line(pyfunc)
            parts["location"] = component(
                [ident.debug_filename, code.co_firstlineno, ident.def_line],
                f"{_short(ident.debug_filename)}:{code.co_firstlineno}",
            )
        if defaults or kwdefaults:
            parts["defaults"] = Component(digest(self._data(
                (defaults, tuple(sorted((kwdefaults or {}).items()))), ident)[0]), "defaults")
        reads = code_reads(code)
        for name in sorted(reads.globals):
            value = namespace.get(name, _MISSING)
            kind = "global"
            if value is _MISSING:  # numba then reads the builtins module
                value, kind = builtins.__dict__.get(name, _MISSING), "builtin"
            if value is _MISSING:  # numba fails to type it; keyed, so defining it later is a change
                parts[f"global {name}"] = component(["undefined"], "undefined")
            elif kind == "builtin" and value is _PRISTINE_BUILTINS.get(name, _MISSING):
                parts[f"builtin {name}"] = _pristine_builtin(name)
                ident.bindings[("global", name)] = _Snapshot(value)
            else:
                self._variable(ident, kind, name, value, reads.globals[name], with_location)
        for name, cell in zip(code.co_freevars, closure or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                raise UnsupportedKernelError(
                    f"{qualname} reads closure variable {name!r} before it is assigned"
                ) from None
            self._variable(ident, "closure", name, value, reads.derefs.get(name, frozenset({()})), with_location)
        return ident

    def _variable(self, ident, kind, name, value, chains, with_location):
        label = f"{kind} {name}"
        if isinstance(value, pytypes.ModuleType):
            plan = self._module(ident, label, name, value, chains)
        else:
            plan = self._read(ident, label, name, value, with_location)
        ident.bindings[("closure" if kind == "closure" else "global", name)] = plan

    def _read(self, ident, component_name, where, value, with_location=None) -> _Plan:
        """Key one value the function reads (a device function keys itself, by
        its own identity); returns how the rebound function reads it."""
        memo_key = _value_key(value)
        found = _VALUE_COMPONENTS.get(memo_key) if memo_key is not None else None
        if found is not None:  # a plain value keyed before: its component, without describing it again
            ident.components[component_name] = found
            return _Snapshot(value)
        data, plan = self._data(value, ident, label=where, with_location=with_location)
        if not (isinstance(plan, _Device) and plan.dispatcher is value):
            ident.components[component_name] = part = Component(digest(data), _short(_shown(value)))
            if memo_key is not None and plan is None and len(_VALUE_COMPONENTS) < 8192:
                _VALUE_COMPONENTS[memo_key] = part
        return _Snapshot(value) if plan is None else plan

    def _module(self, ident, label, path, module, chains) -> _Plan:
        """Components for the attributes read through `module`, and how the
        rebound function reads it: a library module itself (numba knows its
        functions by the module object; keyed by its version, and the plain
        data read through it by value), a user module as a clone holding
        what was read."""
        version = library_version(module)
        if version is not None:
            ident.components[label] = library_module_component(module.__name__, version)
            for chain in chains:
                _check_library_chain(ident, label, path, module, chain, self.library_reads)
            return _Snapshot(module)
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
            value = getattr(module, attr, _MISSING)
            if value is _MISSING:
                # numba fails to type it; still keyed, so defining it later is a change
                ident.components[f"{label}.{attr}"] = component(["missing"], "missing")
            elif isinstance(value, pytypes.ModuleType):
                attrs[attr] = self._module(ident, f"{label}.{attr}", where, value, frozenset(rests[attr]))
            else:
                attrs[attr] = self._read(ident, f"{label}.{attr}", where, value)
        return _ModuleClone(module.__name__, module.__doc__, attrs)

    def _data_device(self, dispatcher, pyfunc, ident, label, with_location=None):
        """A device function (or one numba compiles as one): hashed by its own
        identity, and proxied in the rebound function."""
        # numba lowers a device function with its own options
        own = device_options(dispatcher)
        # its debug info holds its own file and lines (under the kernel's or its own debug or lineinfo)
        with_location = (self.with_location if with_location is None else with_location) \
            or own["debug"] or own["lineinfo"]
        dev = self.function(pyfunc, with_location)
        declared = declared_signatures(dispatcher)
        extra = {}
        if declared:  # the same function declared otherwise compiles otherwise
            extra["declared signatures"] = component(
                [[[type_data(t) for t in args], type_data(ret)] for args, ret in declared],
                "; ".join(shown_signature(args, ret) for args, ret in declared))
        options = {name: value for name, value in sorted(own.items()) if value not in (False, "never")}
        if options:
            extra["device options"] = component(repr(options))
        dev = dataclasses.replace(dev, components={**dev.components, **extra}, declared=declared, options=own)
        ident.devices.append((dispatcher, dev))
        # (with what it reads, so that a miss can name the change inside it)
        ident.components[f"device function {label}"] = Component(dev.digest, "device function",
                                                                 tuple(sorted(dev.components.items())))
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
            if isinstance(pyfunc, pytypes.FunctionType):  # (see `_library_function_data`)
                data.append(internal_function_digest(pyfunc))
            # the simulator runs Python: it calls the function numba would compile
            simulated = _Snapshot(pure_python(value)) if self.freeze and kind != "_Intrinsic" else None
            return data, simulated
        if kind == "_Intrinsic":
            # its typing and lowering are numba's extension tables, which every typing token
            # holds (`extensions`); the call names it by its definition
            return ["user intrinsic", pyfunc.__module__, pyfunc.__qualname__, self.function(pyfunc).digest], None
        if _cpu_compilation_disabled(value):
            # numba-cuda refuses it when a kernel calls it (its typing context's
            # resolve_value_type): compiled from itself, it fails as in numba
            return ["numba function, compilation disabled", pyfunc.__module__, pyfunc.__qualname__,
                    _code_digest(pyfunc.__code__, False)], None
        # numba.njit function: numba-cuda compiles its Python function as a device function
        return self._data_device(value, pyfunc, ident, label)

    # -- values -------------------------------------------------------------
    def _data(self, value, ident, label="", with_location=None) -> Tuple[Any, Optional[_Plan]]:
        """(JSON-able description of `value`, its rebinding plan or None).

        Exact: scalars by type and value (floats by their bits, so every NaN
        and -0.0; ints by value, whatever a subclass's __str__ says), enum
        members by class and name, named tuples with their class."""
        kind = type(value)
        if kind in _EXACT_SCALARS:
            return [kind.__name__, value], None
        if kind is complex:
            return ["complex", value.real, value.imag], None
        if isinstance(value, enum.Enum):
            return ["enum member", _class_data(kind), value.name], None
        if isinstance(value, _SCALAR_BASES):
            return _scalar_subclass(value, ident, label), None
        if isinstance(value, (tuple, list)):
            return self._sequence(value, ident, label)
        if is_device_dispatcher(value):
            return self._data_device(value, value.py_func, ident, label, with_location)
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
            return self._data_device(value, value.py_func, ident, label, with_location)
        if _is_numba_function(value):
            return self._numba_function(value, ident, label)
        if isinstance(value, pytypes.FunctionType):
            if _file_origin(value.__code__.co_filename) is not None:
                return _library_function_data(value), None
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

    def _sequence(self, value, ident, label):
        """A tuple (a named tuple with its class) or a list, item by item."""
        kind = type(value)
        # a named tuple's class by its fields; another subclass a library's, or refused
        described = kind.__name__ if kind in (tuple, list) else _class_data(kind)
        items = [self._data(v, ident, f"{label}[{i}]") for i, v in enumerate(value)]
        plans = [p for _, p in items]
        data = ["tuple" if isinstance(value, tuple) else "list", described, [d for d, _ in items]]
        if isinstance(value, list):  # a list can change after it is hashed: bind the items read now
            return data, _Sequence(list, list(value), plans)
        return data, (_Sequence(kind, value, plans) if any(p is not None for p in plans) else None)


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


def _cpu_compilation_disabled(dispatcher) -> bool:
    """A CPU dispatcher numba-cuda will not compile for a kernel: one given
    explicit signatures (``@jit("(i4, i4)")`` turns compiling off), unless
    numba-cuda already made its device dispatcher, which it then reuses
    (numba/cuda/target.py CUDATypingContext.resolve_value_type)."""
    return not getattr(dispatcher, "_can_compile", True) and \
        not hasattr(dispatcher, "_CUDATypingContext__dispatcher")


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
        # an @overload of it in user code: numba's extension tables, which every typing token
        # holds (`extensions`), decide the call; the function is keyed as itself
        return False
    return True


def _library_function_data(func) -> list:
    """A library's function as a kernel reads it: its place and its library's
    version, and its code and what its closure holds (functions there by
    their own code and closure), since a library makes functions too: a
    factory's closure over the caller's value (``make(2.0)``, ``make(3.0)``)
    or code generated from a template under the library's file name share
    the place and the version and differ in nothing else."""
    return ["library function", func.__module__, func.__qualname__, _class_version(func) or "stdlib",
            internal_function_digest(func)]


def library_identity_digest(pyfunc) -> Optional[str]:
    """A digest naming library function `pyfunc` (None for user code): its
    place, its code, its library's version and what its closure holds.  Used
    to name the proxies of library functions numba reaches on its own."""
    code = pyfunc.__code__
    if _file_origin(code.co_filename) is None:
        return None
    return digest(["library function", pyfunc.__module__, pyfunc.__qualname__,
                   _class_version(pyfunc) or "stdlib", _code_digest(code, False), _described_cells(pyfunc)])


def internal_function_digest(pyfunc, depth: int = 0) -> str:
    """A digest of a function numba compiles or inlines on its own inside a
    compile (a library helper such as ``int_power``, a closure it inlines, the
    branch table ``literal_unroll`` generates): its place, its code and what
    its closure holds, functions there by their own digest.  numba numbers
    such functions from a process-wide counter and puts the number in symbol
    and variable names; `stages` numbers them from this digest instead, so
    the names are the same in every process.  A closure value with no
    process-independent description is told apart by identity (`_describe`):
    unique, but not the same in another process."""

    def describe(value):
        # (a dispatcher by its Python function, an @intrinsic by its definition)
        inner = getattr(value, "py_func", None) or getattr(value, "_defn", None) or value
        if isinstance(inner, pytypes.FunctionType) and depth < 4:
            return ["function", internal_function_digest(inner, depth + 1)]
        return _describe(value)

    return digest(["numba-compiled function", pyfunc.__module__, pyfunc.__qualname__,
                   _code_digest(pyfunc.__code__, False), _described_cells(pyfunc, describe)])


def _described_cells(pyfunc, describe=None) -> list:
    """What a function's closure cells hold, each described ("empty" for an empty cell)."""
    described = []
    for cell in pyfunc.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            described.append("empty")
        else:
            described.append((describe or _describe)(value))
    return described


def _describe(value):
    """A process-independent description of a value a library closure holds
    (numbers, strings, numba types, functions and classes by name)."""
    if type(value) in _EXACT_SCALARS:
        return [type(value).__name__, value]
    if isinstance(value, enum.Enum):
        return ["enum member", type(value).__module__, type(value).__qualname__, value.name,
                _describe(value.value)]
    if type(value) is complex:
        return ["complex", value.real, value.imag]
    if type(value) in (tuple, list):
        return [type(value).__name__, [_describe(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted([repr(k), _describe(v)] for k, v in value.items())]
    pyfunc = getattr(value, "py_func", value)
    if isinstance(pyfunc, (pytypes.FunctionType, type, pytypes.BuiltinFunctionType)):
        return ["named", getattr(pyfunc, "__module__", None), getattr(pyfunc, "__qualname__", None)]
    if _is_numba_type(value):
        return ["numba type", type_data(value)]
    if type(value).__name__ == "FFI" and type(value).__module__.startswith("cffi"):
        # numba types every cffi FFI object alike (types.ffi: only
        # ffi.from_buffer), whatever it declares
        from numba.cuda.typing import cffi_utils

        if cffi_utils.is_ffi_instance(value):
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
    from numba.cuda.compiler import ExternFunction

    if isinstance(value, np.generic):
        return ["numpy scalar", value.dtype.str, value.tobytes().hex()]
    if isinstance(value, ExternFunction):
        return ["external function", value.name, str(value.sig)]
    if type(value).__name__ == "_Intrinsic" and isinstance(getattr(value, "_defn", None), pytypes.FunctionType):
        # made per call by numba's helpers (carray's): by its definition's content
        return ["intrinsic", internal_function_digest(value._defn)]
    return None


# Scalars described exactly by their type and value (tokens hash floats by
# their bits and ints by value)
_EXACT_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_SCALAR_BASES = (int, float, complex, str, bytes)


def _scalar_subclass(value, ident, label) -> list:
    """An instance of a subclass of int, float, complex, str or bytes that is
    not an enum: a library's by its class and exact base value; a user
    class's is refused (its own methods may change what numba reads)."""
    cls = type(value)
    base = next(b for b in _SCALAR_BASES if isinstance(value, b))
    if _class_version(cls) is None:
        raise UnsupportedKernelError(
            f"{ident.qualname} reads {label}, an instance of {cls.__qualname__} (a subclass of "
            f"{base.__name__} defined in user code): the cache cannot tell what its methods change "
            f"in what numba reads; pass {base.__name__}({label.split()[-1]}) instead, or an enum")
    exact = complex(value.real, value.imag) if base is complex else base.__new__(base, value)
    return ["library scalar", _class_data(cls), _describe(exact)]


@functools.lru_cache(maxsize=1024)
def library_module_component(name: str, version: str) -> Component:
    """The component of a library module a function reads (``np``, ``math``):
    its name and version."""
    return component(["module", name, version], f"module {name}")


@functools.lru_cache(maxsize=1024)
def _pristine_builtin(name: str) -> Component:
    """The component of a builtin read as Python started it (by name)."""
    return component(["builtin", name], f"builtin {name}")


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


_TYPE_DATA: Dict[Any, list] = {}


def signature_component(argtypes, shown: str) -> Component:
    """The typing token's component for argument types (`type_data` of each)."""
    found = _SIGNATURES.get((argtypes, shown))
    if found is None:
        data = [type_data(t) for t in argtypes]
        found = component(data, shown)
        if all(t in _TYPE_DATA for t in argtypes) and len(_SIGNATURES) < 4096:  # (no class among them)
            _SIGNATURES[(argtypes, shown)] = found
    return found


_SIGNATURES: Dict[Any, Component] = {}


def _key_data(part, whole, holds_class):
    if _is_numba_type(part):
        kind = type(part)
        key = part.key
        data = part.name if key is part else _key_data(key, whole, holds_class)
        return ["type", kind.__module__, kind.__qualname__, data]
    if type(part) in _EXACT_SCALARS:
        return [type(part).__name__, part]
    if isinstance(part, enum.Enum):
        holds_class.append(True)
        return ["enum member", _class_data(type(part)), part.name]
    if type(part) in (tuple, list):
        return [type(part).__name__, [_key_data(p, whole, holds_class) for p in part]]
    if isinstance(part, frozenset):
        return ["frozenset", sorted((_key_data(p, whole, holds_class) for p in part), key=repr)]
    if isinstance(part, type):
        holds_class.append(True)
        return _class_data(part)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(part, np.dtype):
        return ["dtype", _dtype_data(part)]
    raise UnsupportedKernelError(
        f"argument type {whole} holds a {type(part).__qualname__} ({_short(repr(part))}) that the "
        "cache cannot key exactly; pass the argument as an array, a number or a tuple of them")


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
    # any other user class: numba reads of it what the extension API registered for it (typeof_impl,
    # type_callable, data models), which every typing token holds (`extensions`); the class itself
    # is keyed by what it is made of
    return describe_class(cls)


def _plain_data(value, label) -> list:
    """An immutable value held by a class (an enum member's value, a field default)."""
    if type(value) in _EXACT_SCALARS:
        return [type(value).__name__, value]
    if type(value) is complex:
        return ["complex", value.real, value.imag]
    if isinstance(value, enum.Enum):
        return ["enum member", _class_data(type(value)), value.name]
    if type(value) is tuple:
        return ["tuple", [_plain_data(v, label) for v in value]]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic) and not value.dtype.hasobject:
        return ["numpy scalar", _dtype_data(value.dtype), np.asarray(value).tobytes()]
    raise UnsupportedKernelError(
        f"{label} holds a {type(value).__qualname__}; class attributes the cache can track are "
        "numbers, strings, tuples, enum members and numpy scalars"
    )


def _check_library_chain(ident, label, path, module, chain, reads):
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
        value, where = getattr(value, attr, _MISSING), f"{where}.{attr}"
        if value is _MISSING:
            return
        if isinstance(namespace, (dict, pytypes.MappingProxyType)) and attr in namespace:
            reads.append((namespace, attr, namespace[attr], where))
    if type(value) in _EXACT_SCALARS or type(value) is complex or (
            type(value) is tuple and all(type(v) in _EXACT_SCALARS for v in value)):
        ident.components[".".join((label, *chain))] = component(
            _describe(value), _short(repr(value)))
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
        elif type(value) in _EXACT_SCALARS and type(value) is not float:
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
        if namespace.get(attr, _MISSING) is not value:
            return label
    return None


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
        # hashed as it is (a hit copies nothing); copied when a compile needs it,
        # and the copy must hash the same (`_ArraySnapshot`)
        data = _array_data(value, _array_content(value))
        ident.snapshot_bytes += value.nbytes
        return data, _ArraySnapshot(value, data, ident.qualname)
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


def _array_content(array) -> str:
    """A digest of an array's elements, byte for byte (padding included).
    XXH3-128: a 64 MiB array in a few milliseconds, where SHA-256 takes
    around 200 (the token itself is SHA-256 over this and the rest)."""
    np = sys.modules["numpy"]
    contiguous = np.ascontiguousarray(array)
    return "xxh3-128:" + xxhash.xxh3_128_hexdigest(
        contiguous.view(np.uint8).reshape(-1) if contiguous.size else b"")


def _array_data(array, content: str) -> list:
    flags = array.flags
    return ["ndarray", _dtype_data(array.dtype), list(array.shape), list(array.strides),
            [bool(flags.c_contiguous), bool(flags.f_contiguous), bool(flags.writeable), bool(flags.aligned)],
            content]


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
    if _is_numba_type(value):
        return ["numba type", type_data(value)]
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
    """A function that reads the snapshot of `ident` and nothing live.

    Its code, name, defaults and closure are those `ident` hashed; its
    globals are a new namespace holding every name its code reads (builtins
    included: numba looks a name up in the function's globals first) bound
    to the object hashed for it: device functions become
    ``proxy_for(dispatcher, identity)`` objects, arrays their copies, user
    modules clones holding the attributes read.
    """
    namespace = {"__name__": ident.namespace_name, "__builtins__": builtins}
    cells = {}
    for (kind, name), plan in ident.bindings.items():
        value = plan.materialize(proxy_for)
        if kind == "closure":
            cells[name] = pytypes.CellType(value)
        else:
            namespace[name] = value
    code = ident.code
    closure = tuple(cells[n] for n in code.co_freevars) or None
    copy = pytypes.FunctionType(code, namespace, ident.name, ident.defaults, closure)
    copy.__kwdefaults__ = dict(ident.kwdefaults) if ident.kwdefaults else None
    copy.__qualname__ = ident.func_qualname
    copy.__module__ = ident.module
    copy.__doc__ = ident.pyfunc.__doc__
    return copy


def _copy_function(pyfunc, namespace, closure):
    """`pyfunc` reading its globals from `namespace` and its free variables from `closure`."""
    copy = pytypes.FunctionType(pyfunc.__code__, namespace, pyfunc.__name__, pyfunc.__defaults__, closure)
    copy.__kwdefaults__ = pyfunc.__kwdefaults__
    copy.__qualname__ = pyfunc.__qualname__
    copy.__module__ = pyfunc.__module__
    copy.__doc__ = pyfunc.__doc__
    return copy


# ---------------------------------------------------------------------------
# numba's extension tables (`extensions`): what user code registered, described


def describe_registration(value, depth: int = 0) -> Any:
    """A process-independent, exact description of `value` as numba's
    extension tables hold it (see the module's doc)."""
    if depth > DEPTH:
        return ["deep", type(value).__qualname__]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [describe_registration(v, depth + 1) for v in value]]
    if isinstance(value, frozenset):
        return ["frozenset", sorted((describe_registration(v, depth + 1) for v in value), key=repr)]
    if isinstance(value, pytypes.FunctionType):
        if user_function(value):
            return ["user function", value.__module__, value.__qualname__, identify(value, False).digest]
        return ["library function", value.__module__, value.__qualname__,
                libraries.class_version(value) or "stdlib",
                [describe_registration(cell_value(c), depth + 1) for c in value.__closure__ or ()]]
    if isinstance(value, (staticmethod, classmethod)):
        return [type(value).__name__, describe_registration(value.__func__, depth + 1)]
    if isinstance(value, property):
        return ["property", [describe_registration(f, depth + 1) for f in (value.fget, value.fset, value.fdel)]]
    if isinstance(value, type):
        return describe_class(value, depth)
    if numba_type(value):
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
        return ["module", value.__name__, libraries.library_version(value) or "stdlib"]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and numba_made(type(value)):
        if all(type(item) in (str, int, float, bool, type(None)) for item in state.values()):
            # numba's small records (InlineOptions), by what they hold
            return ["numba object", describe_class(type(value), depth + 1), sorted(state.items(), key=repr)]
        # numba's own machinery a closure holds (a data model manager): numba's, keyed by its version
        return ["numba's object", describe_class(type(value), depth + 1)]
    return _describe(value)


def describe_class(cls, depth: int = 0) -> list:
    """A class by what it is made of: a library's by name and version; a
    user's, or one numba made around user values (a template), by its bases
    and every attribute of its body, functions by their identity."""
    version = libraries.class_version(cls)
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
# what it built (emptied by `forget_stale_builds`), abc's bookkeeping
_NOT_STATE = frozenset({"_impl_cache", "_compiled_overloads", "_inline_overloads", "_abc_impl"})
