"""The walk over what a function reads, which `identify` gives as one named
component per input and a binding per variable (`snapshot`).

It follows the globals and closure variables the bytecode loads (builtins
among them), the attribute chains read through modules (a library module
keyed by its version and the plain data read through it by value, a user
module by the attributes read), defaults, and every device function called,
with what it reads in turn.  Each value is described by content (`describe`,
`values`) or refused with `UnsupportedKernelError`; a device function by its
own identity, with the options it is lowered with."""

from __future__ import annotations

import builtins
import dataclasses
import enum
import os
import sys
import types as pytypes
from typing import Any, Dict, List, Optional, Tuple

from ..errors import UnsupportedKernelError
from ..importing import front_end_module, loaded_class
from .libraries import class_version, file_origin, library_version
from ..backends.numba_cuda.options import device_options
from ..toolchain import linking
from ..keys.tokens import Component, component, digest
from . import describe
from .code import code_digest, code_reads
from .describe import class_data, internal_function_digest, scalar_subclass, type_data, value_key
from .functions import (cpu_compilation_disabled, declared_signatures, def_line, is_device_dispatcher, is_dispatcher,
                        is_numba_function, pure_python, python_function, registered_jitable, shown_signature)
from .library import (check_library_chain, known_library_value, library_function_data, library_module_component,
                      library_value_component)
from .snapshot import (Binding, DeviceBinding, HostBuffer, ModuleClone, SequenceBinding, SourceIdentity,
                       ValueBinding, numpy_data)
from .values import EXACT_SCALARS, MISSING, SCALAR_BASES, is_numba_type, short, shown
from .. import memos


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


_VALUE_COMPONENTS: Dict[Any, Component] = memos.memo("sources.walk._VALUE_COMPONENTS", {})


# The builtins as Python starts them: a name read from builtins that is still
# the same object is keyed by its name (Python's version is in the toolchain);
# anything a program put into builtins is keyed by its value, as a global is.
_PRISTINE_BUILTINS = dict(builtins.__dict__)


@memos.cached("sources.walk._pristine_builtin", maxsize=1024)
def _pristine_builtin(name: str) -> Component:
    """The component of a builtin read as Python started it (by name)."""
    return component(["builtin", name], f"builtin {name}")


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
        parts["code"] = Component(code_digest(code, with_location), "code")
        if with_location:
            # numba-cuda writes os.path.abspath(co_filename) into debug info:
            # for a cell or exec'd code, the working directory is an input
            ident.debug_filename = os.path.abspath(code.co_filename)
            # and the line of `def`, which it finds by parsing the source text
            ident.def_line = def_line(pyfunc)
            parts["location"] = component(
                [ident.debug_filename, code.co_firstlineno, ident.def_line],
                f"{short(ident.debug_filename)}:{code.co_firstlineno}",
            )
        if defaults or kwdefaults:
            parts["defaults"] = Component(digest(self._data(
                (defaults, tuple(sorted((kwdefaults or {}).items()))), ident)[0]), "defaults")
        reads = code_reads(code)
        if reads.imports:
            _refuse_user_imports(qualname, reads.imports, namespace)
        for name in sorted(reads.globals):
            value = namespace.get(name, MISSING)
            kind = "global"
            if value is MISSING:  # numba then reads the builtins module
                value, kind = builtins.__dict__.get(name, MISSING), "builtin"
            if value is MISSING:  # numba fails to type it; keyed, so defining it later is a change
                parts[f"global {name}"] = component(["undefined"], "undefined")
            elif kind == "builtin" and value is _PRISTINE_BUILTINS.get(name, MISSING):
                parts[f"builtin {name}"] = _pristine_builtin(name)
                ident.bindings[("global", name)] = ValueBinding(value)
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

    def _read(self, ident, component_name, where, value, with_location=None) -> Binding:
        """Key one value the function reads (a device function keys itself, by
        its own identity); returns how the rebound function reads it."""
        memo_key = value_key(value)
        found = _VALUE_COMPONENTS.get(memo_key) if memo_key is not None else None
        if found is not None:  # a plain value keyed before: its component, without describing it again
            ident.components[component_name] = found
            return ValueBinding(value)
        data, plan = self._data(value, ident, label=where, with_location=with_location)
        if not (isinstance(plan, DeviceBinding) and plan.dispatcher is value):
            ident.components[component_name] = part = Component(digest(data), short(shown(value)))
            if memo_key is not None and plan is None and len(_VALUE_COMPONENTS) < 8192:
                _VALUE_COMPONENTS[memo_key] = part
        return ValueBinding(value) if plan is None else plan

    def _module(self, ident, label, path, module, chains) -> Binding:
        """Components for the attributes read through `module`, and how the
        rebound function reads it: a library module itself (numba knows its
        functions by the module object; keyed by its version, and the plain
        data read through it by value), a user module as a clone holding
        what was read."""
        version = library_version(module)
        if version is not None:
            ident.components[label] = library_module_component(module_name(module), version)
            for chain in chains:
                found = check_library_chain(ident, label, path, module, chain, self.library_reads)
                if found is not None:
                    self._library_value(ident, ".".join((label, *chain)), *found)
            return ValueBinding(module)
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
            value = getattr(module, attr, MISSING)
            if value is MISSING:
                # numba fails to type it; still keyed, so defining it later is a change
                ident.components[f"{label}.{attr}"] = component(["missing"], "missing")
            elif isinstance(value, pytypes.ModuleType):
                attrs[attr] = self._module(ident, f"{label}.{attr}", where, value, frozenset(rests[attr]))
            else:
                attrs[attr] = self._read(ident, f"{label}.{attr}", where, value)
        return ModuleClone(module.__name__, module.__doc__, attrs)

    def _library_value(self, ident, name, value, where) -> None:
        """Key what a chain through a library module reached, as it is now:
        data (numpy arrays and scalars, enum members, sequences of such) by
        content, as a global is, and the rest by `library_value_component`
        (which leaves a library's own descriptors to its version).  numba
        reads the value live through the module, so nothing is bound.  A
        user's function put there (``lib.dev = dev``, a device function or
        one numba compiles) is keyed by its whole identity, the globals it
        reads included, as numba compiles it from them."""
        known = known_library_value(value)  # (numba's stubs, builtins: by identity, at once)
        if known is not MISSING:
            if known is not None:
                ident.components[name] = known
            return
        pyfunc = value if isinstance(value, pytypes.FunctionType) else (
            getattr(value, "py_func", None) or getattr(value, "_defn", None))
        if isinstance(pyfunc, pytypes.FunctionType) and file_origin(pyfunc.__code__.co_filename) is None:
            ident.components[name] = Component(digest(["user function", type(value).__name__,
                                                       self.function(pyfunc).digest]), short(shown(value)))
            return
        if _library_data(value):
            data, _ = self._data(value, ident, label=where)
            ident.components[name] = Component(digest(data), short(shown(value)))
            return
        part = library_value_component(value)
        if part is not None:
            ident.components[name] = part

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
        return ["device function", dev.digest], DeviceBinding(dispatcher, dev)

    def _extern(self, value, ident, label):
        """cuda.declare_device: keyed by name and signature; what it links is
        read now and keys the cubin stage alone (see `linking`)."""
        if not isinstance(value, loaded_class("numba.cuda.compiler", "ExternFunction")):
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
        interface = (HostBuffer(value._ary) if simulated else value).__cuda_array_interface__
        if interface.get("mask") is not None:
            raise UnsupportedKernelError(f"{ident.qualname} reads a masked device array")
        typing = front_end_module("typing.typeof")

        self.referenced.append(value)
        data = ["device array", list(interface["data"]), list(interface["shape"]),
                list(interface.get("strides") or ()), interface["typestr"],
                str(typing.typeof(value, typing.Purpose.constant))]
        if simulated and not self.freeze:
            return data, ValueBinding(HostBuffer(value._ary))
        return data, None

    def _numba_function(self, value, ident, label):
        kind = type(value).__name__
        pyfunc = getattr(value, "py_func", None) or getattr(value, "_defn", None)
        if pyfunc is None or file_origin(pyfunc.__code__.co_filename) is not None:
            data = ["library " + kind, getattr(pyfunc, "__module__", "?"),
                    getattr(pyfunc, "__qualname__", repr(value)), class_version(pyfunc) or "?"]
            if isinstance(pyfunc, pytypes.FunctionType):  # (see `library_function_data`)
                data.append(internal_function_digest(pyfunc))
            # the simulator runs Python: it calls the function numba would compile
            simulated = ValueBinding(pure_python(value)) if self.freeze and kind != "_Intrinsic" else None
            return data, simulated
        if kind == "_Intrinsic":
            # its typing and lowering are numba's extension tables, which every typing token
            # holds (`extensions`); the call names it by its definition
            return ["user intrinsic", pyfunc.__module__, pyfunc.__qualname__, self.function(pyfunc).digest], None
        if cpu_compilation_disabled(value):
            # numba-cuda refuses it when a kernel calls it (its typing context's
            # resolve_value_type): compiled from itself, it fails as in numba
            return ["numba function, compilation disabled", pyfunc.__module__, pyfunc.__qualname__,
                    code_digest(pyfunc.__code__, False)], None
        # numba.njit function: numba-cuda compiles its Python function as a device function
        return self._data_device(value, pyfunc, ident, label)

    # -- values -------------------------------------------------------------
    def _data(self, value, ident, label="", with_location=None) -> Tuple[Any, Optional[Binding]]:
        """(JSON-able description of `value`, its rebinding plan or None).

        Exact: scalars by type and value (floats by their bits, so every NaN
        and -0.0; ints by value, whatever a subclass's __str__ says), enum
        members by class and name, named tuples with their class."""
        kind = type(value)
        if kind in EXACT_SCALARS:
            return [kind.__name__, value], None
        if kind is complex:
            return ["complex", value.real, value.imag], None
        if isinstance(value, enum.Enum):
            return ["enum member", class_data(kind), value.name], None
        if isinstance(value, SCALAR_BASES):
            return scalar_subclass(value, ident, label), None
        if isinstance(value, (tuple, list)):
            return self._sequence(value, ident, label)
        if is_device_dispatcher(value):
            return self._data_device(value, value.py_func, ident, label, with_location)
        device_data = self._device_array(value, ident)
        if device_data is not None:
            return device_data
        numpy_value_data = numpy_data(value, ident)
        if numpy_value_data is not None:
            return numpy_value_data
        extern_data = self._extern(value, ident, label)
        if extern_data is not None:
            return extern_data, None
        numba_data = _numba_data(value, ident.qualname, label)
        if numba_data is not None:
            return numba_data, None
        if is_dispatcher(value):  # a kernel called from a kernel: numba compiles it as a device function
            return self._data_device(value, value.py_func, ident, label, with_location)
        if is_numba_function(value):
            return self._numba_function(value, ident, label)
        if isinstance(value, pytypes.FunctionType):
            if file_origin(value.__code__.co_filename) is not None:
                return library_function_data(value), None
            jitable = registered_jitable(value, ident.qualname, label)
            if jitable:
                return self._data_device(value, value, ident, label)
            return ["function", self.function(value).digest], None
        if isinstance(value, type):
            return class_data(value), None
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
            return ["module", module_name(value), version], None
        raise UnsupportedKernelError(
            f"{ident.qualname} reads {label} of type {type(value).__qualname__} "
            f"({short(repr(value))}), which cannot be hashed into the cache token, so a change "
            "to it could not be detected; pass it to the kernel as an argument or use a number, "
            "tuple, enum or numpy array"
        )

    def _sequence(self, value, ident, label):
        """A tuple (a named tuple with its class) or a list, item by item."""
        kind = type(value)
        # a named tuple's class by its fields; another subclass a library's, or refused
        described = kind.__name__ if kind in (tuple, list) else class_data(kind)
        items = [self._data(v, ident, f"{label}[{i}]") for i, v in enumerate(value)]
        plans = [p for _, p in items]
        data = ["tuple" if isinstance(value, tuple) else "list", described, [d for d, _ in items]]
        if isinstance(value, list):  # a list can change after it is hashed: bind the items read now
            return data, SequenceBinding(list, list(value), plans)
        return data, (SequenceBinding(kind, value, plans) if any(p is not None for p in plans) else None)


def _refuse_user_imports(qualname: str, imports, namespace) -> None:
    """A function that imports a user module in its body (an ``@overload``
    generator running ``import cfg`` as numba types): what it reads there
    is no global and is not keyed, so it is refused, with the fix.  Library
    modules (``from numba.cuda.typing import signature``) are keyed by their
    versions."""
    import importlib.util

    for name, level in sorted(imports):
        try:
            full = importlib.util.resolve_name("." * level + name, namespace.get("__package__") or
                                               namespace.get("__name__") or "") if level else name
            module = sys.modules.get(full)
            if module is not None:
                origin = getattr(module, "__file__", None)
            else:  # (not imported yet: where a top-level module would come from; found without importing it)
                spec = importlib.util.find_spec(full) if "." not in full else None
                origin = getattr(spec, "origin", None)
        except (ImportError, ValueError, AttributeError):
            continue  # (numba fails where Python fails)
        if module is not None and library_version(module) is not None:
            continue
        if isinstance(origin, str) and origin not in ("built-in", "frozen") and file_origin(origin) is None:
            raise UnsupportedKernelError(
                f"{qualname} imports user module {full} in its body, and what it reads there is not "
                f"keyed (numba runs it as it compiles: an @overload generator, an @intrinsic); import "
                f"{full} at the top of the cell or file and read {full.split('.')[-1]}.name there: a "
                f"module read through a global is keyed by the attributes read")


def module_name(module) -> str:
    """The name of the module `module` is: a redirect numba leaves under an
    old name (``numba.types``, which ``from numba import types`` binds once
    numba's compiler has loaded, ``numba.core.types`` before) is the module
    it redirects to, whose attributes it holds."""
    if type(module).__name__ == "_RedirectSubpackage":
        target = getattr(module, "_RedirectSubpackage__new_module", None)
        if isinstance(target, str):
            return target
    return module.__name__


def _library_data(value) -> bool:
    """Whether `value`, read through a library module, is data the walk keys
    by content: numpy arrays, scalars and dtypes, enum members, scalars of
    subclasses, and tuples and lists of these and plain scalars."""
    kind = type(value)
    if kind in EXACT_SCALARS or kind is complex:
        return False  # (by `library_value_component`, memoised)
    if kind in (tuple, list):
        return any(_library_data(v) for v in value) and all(
            type(v) in EXACT_SCALARS or type(v) is complex or _library_data(v) for v in value)
    if isinstance(value, (enum.Enum, SCALAR_BASES)):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.ndarray, np.generic, np.dtype))


def _numba_data(value, qualname, label):
    if is_numba_type(value):
        return ["numba type", type_data(value)]
    if type(value).__name__ == "FFI" and type(value).__module__.startswith("cffi"):
        # numba types every cffi FFI object alike (types.ffi: only
        # ffi.from_buffer), whatever it declares
        if front_end_module("typing.cffi_utils").is_ffi_instance(value):
            return ["cffi FFI object"]
    return None


def _function_digest(func) -> str:
    return identify(func, False).digest


describe.function_digest = _function_digest
