"""The snapshot a kernel is typed and lowered from: a function's
`SourceIdentity` (its named components and, per variable its code reads,
the `Binding` the rebound function reads instead of the live object), and
`rebind`, which makes that function.

What is hashed is what is compiled: an array is hashed live and copied
when a compile needs it (the copy must hash the same), user modules become
clones holding the attributes read, device functions the pipeline's
proxies."""

from __future__ import annotations

import builtins
import sys
import types as pytypes
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from ..errors import SnapshotChanged, UnsupportedKernelError
from ..importing import front_end_module
from ..keys.tokens import Component, parts_digest
from .values import array_content, array_data, dtype_data


class Binding:
    """How one variable is bound in the rebound function."""

    def materialize(self, proxy_for):
        raise NotImplementedError


@dataclass
class ValueBinding(Binding):
    """A value bound as it was read."""

    value: Any

    def materialize(self, proxy_for):
        return self.value


@dataclass
class ArrayBinding(Binding):
    """A numpy array, hashed live (cheap: a hit never copies it) and copied
    when a compile needs it; the copy must hash as the array did, or the
    array changed meanwhile (`SnapshotChanged`)."""

    array: Any
    data: list  # its description as hashed (`array_data`)
    qualname: str
    copy: Any = None

    def materialize(self, proxy_for):
        if self.copy is None:
            copy = _snapshot_array(self.array, self.qualname)
            # (the copy's own buffer may be aligned where the array was not: compared apart from flags)
            same = array_data(copy, array_content(copy))
            if same[:4] != self.data[:4] or same[5] != self.data[5] or same[4][2] != self.data[4][2]:
                raise SnapshotChanged(f"an array {self.qualname} reads changed while it was being compiled")
            self.copy = copy
        return self.copy


@dataclass
class DeviceBinding(Binding):
    dispatcher: Any
    identity: "SourceIdentity"

    def materialize(self, proxy_for):
        return proxy_for(self.dispatcher, self.identity)


@dataclass
class SequenceBinding(Binding):
    """A tuple or list as it was read, its items bound by their own plans."""

    kind: type
    original: Any  # the items as read (a list: a copy)
    items: List[Optional[Binding]]

    def materialize(self, proxy_for):
        values = [old if plan is None else plan.materialize(proxy_for)
                  for old, plan in zip(self.original, self.items)]
        if self.kind is list:
            return values
        return self.kind._make(values) if hasattr(self.kind, "_make") else self.kind(values)


@dataclass
class ModuleClone(Binding):
    """A user module as the function read it: a new module holding only the
    attributes read, each as it was hashed (numba types a module's attribute
    by reading it from the module object it is given)."""

    name: str
    doc: Optional[str]
    attrs: Dict[str, Binding]

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
    bindings: Dict[Tuple[str, str], Binding] = field(default_factory=dict)
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


def numpy_data(value, ident):
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
        # and the copy must hash the same (`ArrayBinding`)
        data = array_data(value, array_content(value))
        ident.snapshot_bytes += value.nbytes
        return data, ArrayBinding(value, data, ident.qualname)
    if isinstance(value, np.generic):
        if value.dtype.hasobject:
            raise UnsupportedKernelError(
                f"{ident.qualname} reads a numpy scalar holding Python objects ({value.dtype}); "
                "numba cannot compile it into a kernel"
            )
        # a record (np.void) can be a view into an array: hash and compile a copy
        snapshot = value.copy() if isinstance(value, np.void) else value
        data = ["numpy scalar", dtype_data(value.dtype), np.asarray(snapshot).tobytes()]
        return data, (ValueBinding(snapshot) if snapshot is not value else None)
    if isinstance(value, np.dtype):
        return ["dtype", dtype_data(value)], None
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
    typing = front_end_module("typing.typeof")
    if typing.typeof(copy, typing.Purpose.constant) != typing.typeof(array, typing.Purpose.constant):
        raise UnsupportedKernelError(
            f"{qualname} reads an array ({array.dtype}, shape {array.shape}, strides "
            f"{array.strides}) whose layout the cache cannot copy exactly; pass a copy "
            "made with numpy.ascontiguousarray"
        )
    return copy


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


def host_array_interface(array) -> dict:
    """The CUDA Array Interface of a numpy array's host buffer: what a
    simulator array stands for (a device array, by its pointer)."""
    interface = array.__array_interface__
    return {"shape": interface["shape"], "strides": interface.get("strides"),
            "typestr": interface["typestr"], "data": interface["data"], "version": 3}


class HostBuffer:
    """A simulator array's host buffer, presented as a device array (by its
    pointer) so numba compiles a kernel reading it as it would on a GPU."""

    def __init__(self, array):
        self._array = array

    @property
    def __cuda_array_interface__(self):
        return host_array_interface(self._array)
