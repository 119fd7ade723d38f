"""Whether a launch's arguments fit a kernel's declared signatures, decided as
numba's dispatcher decides it, and said with the fix where they do not.

numba-cuda dispatches a kernel declared with a list of signatures: its C
dispatcher (``Dispatcher._cuda_call``, numba_cuda/numba/cuda/cext/
_dispatcher.cpp) types each argument (``typeof`` for an argument), and takes
the signature every argument converts to by the typing context's
``can_convert`` (typeconv's rules; unsafe conversions allowed, as compiling
is off), or calls ``_explain_matching_error``.  A kernel declared with one
signature (``@cuda.jit("sig")``, "specialized") it launches without looking
at the arguments: a float64 array given for a ``float32[:]`` parameter is
read as float32 bytes on a GPU.  `check_specialized` gives such a launch the
same matching, through that same C routine (about a microsecond a launch;
it caches its conversions per type), so exactly what a listed
signature would take passes: device arrays, a C array for an ``A``
signature, an int for a float64, records.  Two things only a specialized
launch takes are kept: an integer address for a ``CPointer`` parameter (the
launch passes it as it is), and any argument of a kernel with ``extensions``
(whose ``prepare_args`` rewrites the type and value before the launch reads
them: theirs to check).  `no_match_error` is the `LaunchError` for arguments
no signature accepts: the argument's position and name, its type, the type
expected and the fix.
"""

from __future__ import annotations

import ctypes
import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Tuple

from ....pipeline.results import short_signature, short_type
from .compiled import LaunchError, LaunchTypeError, LaunchValueError


class Dispatching(Protocol):
    """What the checks read of a `Kernel`: numba's dispatcher (its function,
    typing context, loaded variants, options and whether it compiles for its
    arguments) and the signatures it declared.  Declared here so that the
    checks are written against what they read, not against `Kernel`, which
    imports this module; numba's C dispatch is handed the kernel itself."""

    __name__: str
    py_func: Callable
    typingctx: Any
    overloads: Mapping[Tuple, Any]
    options: Mapping[str, Any]
    _can_compile: bool
    specialized: bool
    declared: Tuple[Tuple, ...]
    takes_addresses: bool


@dataclass(frozen=True)
class Mismatch:
    """The first argument a signature does not accept (`position` from 1)."""

    position: int
    name: str
    given: object  # a numba type
    expected: object
    fix: str

    def describe(self) -> str:
        return (f"argument {self.position} ({self.name}) is {shown_type(self.given)}, not "
                f"{short_type(self.expected)}; {self.fix}")


def shown_type(ty) -> str:
    """`short_type`, with a list as ``list of float64`` (not numba's
    ``reflected list(float64)<iv=None>``)."""
    from numba.cuda import types

    if isinstance(ty, (types.List, types.Set)):
        return f"{type(ty).__name__.lower()} of {short_type(ty.dtype)}"
    return short_type(ty)


def argument_type(value):
    """numba's type for `value` as an argument, ``pyobject`` where numba has
    none (as numba's CPU dispatcher types it; numba-cuda's raises): no
    signature accepts that."""
    from numba.cuda import types
    from numba.cuda.typing.typeof import Purpose, typeof

    try:
        found = typeof(value, Purpose.argument)
    except ValueError:  # (numba's NumbaValueError is one)
        return types.pyobject
    return types.pyobject if found is None else found


def check_specialized(kernel: Dispatching, args: Sequence) -> None:
    """Raise `LaunchError` where `kernel`'s one signature does not accept
    `args` as numba's dispatch would decide (see the module's docstring)."""
    from numba.cuda.cext import _dispatcher

    signature = kernel.declared[0]
    if len(args) != len(signature):
        raise LaunchTypeError(f"{kernel.__name__} takes {len(signature)} arguments {short_signature(signature)}, "
                          f"not {len(args)}")
    if kernel.options.get("extensions"):
        return
    if kernel.takes_addresses:
        if first_mismatch(kernel, signature, args, addresses=True) is not None:
            raise no_match_error(kernel, args)
        return
    # numba's own resolution; no match calls the kernel's _explain_matching_error (no_match_error)
    with untypeable_refused(kernel, args):
        try:
            _dispatcher.Dispatcher._cuda_call(kernel, *args)
        except LaunchError:
            # (numba's C dispatch matches by its type manager's conversion table, which has no rule
            # for some types its typing context converts, float16 arrays among them: what the typing
            # context accepts for every argument launches, as numba's one-signature launch does)
            if first_mismatch(kernel, signature, args) is not None:
                raise


@contextlib.contextmanager
def untypeable_refused(kernel: Dispatching, args: Sequence):
    """Around numba's dispatch of `args`: its ValueError for an argument it
    has no type for is a `LaunchError` naming it where `refuse_untypeable` says so."""
    try:
        yield
    except ValueError:
        refuse_untypeable(kernel, args)
        raise


def refuse_untypeable(kernel: Dispatching, args: Sequence) -> None:
    """Called where a launch raised ValueError: numba's dispatch raises it for
    an argument it has no type for, which, where only declared signatures
    launch, is a `LaunchError` naming the argument.  Returns (the caller
    raises the ValueError again) for a kernel that compiles for its
    arguments or has extensions (numba's error, as numba gives it), and
    where every argument has a type (the error is another)."""
    from numba.cuda import types

    if kernel._can_compile or kernel.options.get("extensions"):
        return
    if any(argument_type(value) == types.pyobject for value in args):
        raise no_match_error(kernel, args) from None


def first_mismatch(kernel: Dispatching, signature: Sequence, args: Sequence,
                   addresses: bool = False) -> Optional[Mismatch]:
    """The first of `args` that `signature` does not accept (None: all are
    accepted); `addresses`: a ``CPointer`` parameter takes an integer address."""
    names = parameter_names(kernel.py_func, len(args))
    for position, (expected, value) in enumerate(zip(signature, args), start=1):
        if addresses and _is_address(expected, value):
            continue
        given = argument_type(value)
        if kernel.typingctx.can_convert(given, expected) is None:
            return Mismatch(position, names[position - 1], given, expected,
                            fix_for(names[position - 1], value, given, expected, addresses))
    return None


def no_match_error(kernel: Dispatching, args: Sequence) -> LaunchError:
    """The error for arguments that no declared signature accepts (a
    `TypeError` too, as numba's is): per
    signature, the first argument it refuses and how to pass it instead."""
    given = tuple(argument_type(value) for value in args)
    declared = list(kernel.overloads) or list(kernel.declared)
    head = (f"{kernel.__name__}: no signature accepts ({', '.join(map(shown_type, given))}); declared: "
            + "; ".join(short_signature(d) for d in declared))
    reasons = [(signature, _refusal(kernel, signature, args)) for signature in declared]
    reasons = [(signature, why) for signature, why in reasons if why]
    if len(reasons) == 1 and len(declared) == 1:
        return LaunchTypeError(f"{head}: {reasons[0][1]}")
    return LaunchTypeError("\n".join([head + ":", *(f"  {short_signature(s)}: {why}" for s, why in reasons)])
                       if reasons else head)


def _refusal(kernel: Dispatching, signature, args) -> Optional[str]:
    if len(args) != len(signature):
        return f"takes {len(signature)} arguments, not {len(args)}"
    mismatch = first_mismatch(kernel, signature, args, addresses=kernel.specialized)
    return None if mismatch is None else mismatch.describe()


def parameter_names(func, count: int) -> list:
    """The names of `func`'s first `count` parameters (``arg5`` past its own)."""
    code = getattr(func, "__code__", None)
    names = list(code.co_varnames[:code.co_argcount]) if code is not None else []
    return names[:count] + [f"arg{i}" for i in range(len(names) + 1, count + 1)]


def _is_address(expected, value) -> bool:
    """An integer (or ctypes pointer) given for a ``CPointer`` parameter:
    numba's launch passes it to the GPU as it is, as the address."""
    import numpy as np
    from numba.cuda import types

    if not isinstance(expected, types.CPointer):
        return False
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (int, np.integer, ctypes.c_void_p, ctypes._Pointer))


def fix_for(name: str, value, given, expected, addresses: bool = False) -> str:
    """How to pass `value` (an argument called `name`, of numba type `given`)
    for a parameter of type `expected`."""
    from numba.cuda import types

    if given == types.pyobject:
        return (f"numba cannot type a {type(value).__name__}: pass a numpy array, a device array or a "
                f"scalar ({short_type(expected)})")
    if isinstance(expected, types.CPointer):
        if addresses:
            return f"pass the device address as an int ({name}.device_ctypes_pointer.value for a device array)"
        return ("numba's dispatch takes no address for a pointer: declare the kernel with this one "
                "signature (not in a list) to pass one as an int")
    if isinstance(expected, types.Array):
        return _array_fix(name, value, given, expected)
    if isinstance(given, types.Array):
        return f"pass one {short_type(expected)} value, not an array (an element: {name}[0])"
    if isinstance(expected, types.Record):
        return f"pass a record of the signature's dtype (an element of a numpy array of dtype {expected})"
    return f"pass a {short_type(expected)}"


def _array_fix(name: str, value, given, expected) -> str:
    from numba.cuda import types

    dtype = _numpy_name(expected.dtype)
    if isinstance(given, (types.List, types.BaseTuple, types.Sequence, types.Set)):
        return f"pass np.asarray({name}, dtype={dtype})"
    if not isinstance(given, types.Array):
        return f"pass a {expected.ndim}-dimensional {expected.dtype} array, not one value"
    if given.ndim != expected.ndim:
        return (f"pass a {expected.ndim}-dimensional array ({name} has {given.ndim} dimensions), "
                f"or declare the parameter as {short_type(given.copy(dtype=expected.dtype))}")
    if given.dtype != expected.dtype:
        if hasattr(value, "copy_to_host"):  # (numba's device arrays have no astype)
            return f"pass cuda.to_device({name}.copy_to_host().astype({dtype}))"
        if hasattr(value, "astype"):
            return f"pass {name}.astype({dtype})"
        return f"pass {name} converted to {dtype}"
    if expected.mutable and not given.mutable:
        return f"pass a writable array ({name}.copy()), or declare the parameter readonly"
    if expected.layout == "C":
        return (f"pass np.ascontiguousarray({name}), or declare the parameter as "
                f"{short_type(expected.copy(layout='A'))}")
    if expected.layout == "F":
        return (f"pass np.asfortranarray({name}), or declare the parameter as "
                f"{short_type(expected.copy(layout='A'))}")
    return f"pass a {short_type(expected)}"


def _numpy_name(dtype) -> str:
    """How numpy spells numba's `dtype` in code: ``np.float32``, ``np.dtype('M8[s]')``."""
    import numpy as np
    from numba.cuda.np.numpy_support import as_dtype

    try:
        numpy_dtype = as_dtype(dtype)
    except NotImplementedError:
        return str(dtype)
    if numpy_dtype.names is not None:
        return f"the record dtype {dtype}"
    if numpy_dtype == np.bool_:
        return "np.bool_"
    if getattr(np, numpy_dtype.name, None) is not None and np.dtype(numpy_dtype.name) == numpy_dtype:
        return f"np.{numpy_dtype.name}"
    return f"np.dtype({numpy_dtype.str[1:]!r})"



def launch_configuration(name: str, launch) -> tuple:
    """Kernel `name`'s launch configuration `launch`, other than a tuple of 2
    to 4 items, as numba takes it: any sequence of 2 to 4 items; else numba's
    exception types, a TypeError where it has no length, a ValueError for
    another length."""
    try:
        count = len(launch)
    except TypeError:
        raise LaunchTypeError(
            f"launch {name} as kernel[blocks, threads] or "
            f"kernel[blocks, threads, stream, shared_bytes], not kernel[{launch!r}]") from None
    if count not in (2, 3, 4):
        raise LaunchValueError(
            f"launch {name} as kernel[blocks, threads] or "
            "kernel[blocks, threads, stream, shared_bytes]"
        )
    return tuple(launch)


__all__ = ["Mismatch", "argument_type", "shown_type", "check_specialized", "first_mismatch", "no_match_error",
           "parameter_names", "fix_for", "refuse_untypeable", "launch_configuration"]
