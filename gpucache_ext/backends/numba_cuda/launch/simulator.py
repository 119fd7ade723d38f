"""What compiled code does to values, done for numba's CUDA simulator.

The simulator runs the kernel's Python code on Python values, so without help
it computes with values compiled code never sees: a Python float passed for a
``float32`` parameter stays a double, ``float32 - 0.1`` stays float32 under
numpy 2 where numba computes it in float64, and a device function declared
``int32(int32)`` returns 8.7 where compiled code returns 6.  Four things close
that gap:

* `launch_arguments`: each scalar argument as numba-cuda's launch hands it to
  the GPU (``_Kernel._prepare_args`` in numba_cuda/numba/cuda/dispatcher.py,
  then cuda.core's ``ParamHolder``), held as below.
* `DeclaredTwin`: the simulator twin of a device function declared with
  signatures, which picks the signature numba's typing would and casts the
  arguments and the result as compiled code does.
* `Float32` and `Float16`: the simulator's float32 and float16 values, whose
  arithmetic is typed as numba types it.
* `narrow_math`: a simulated function's ``math`` functions and ``min``/``max``
  computing a float32 or float16 argument at the width numba does.

How the simulator holds a value of each compiled type (`simulated_value`):

* float32, float16: a `Float32` / `Float16`, a Python float holding the
  exactly rounded value.
* int8 to uint32: an int subclass carrying its type (`NarrowInt`), whose own
  arithmetic is int's and returns plain ints; int64, uint64: a Python int.
  numba does integer arithmetic in 64 bits (its operator typing has int64 and
  uint64 cases only, typing/builtins.py ``machine_ints`` and
  ``integer_binop_cases``, lines 182-191), which Python ints follow and
  numpy's ``int32`` does not (it would wrap, or refuse ``int32 + 2**40``).
* boolean: a bool; float64 and complex: numpy scalars of their width.

What numba's typing decides, and the simulator mirrors, for an operation with
a float32 or float16 operand (a `Float32`/`Float16`, or a numpy float32 or
float16 scalar such as an array element, meeting a `Float32`/`Float16` or
passed to a math function).  The simulator does not restate the rules: it asks
numba-cuda's own typing context (``resolve_function_type``, once per function
and operand types), then computes at the chosen signature's types.  For the
record (paths under numba_cuda/numba/cuda/, numba-cuda 0.30):

* ``+ - * / // % divmod`` (typing/builtins.py ``BinOp`` 194-197,
  ``BinOpMod`` 220-223, ``BinOpTrueDiv`` 227-233, ``BinOpFloorDiv`` 238-240,
  ``DivMod`` 244-246): cases for int64/uint64, float32, float64 and complex
  only; an operand pair takes the case needing the fewest unsafe, then safe,
  then promoting conversions (typing/context.py ``resolve_overload`` 647-699),
  by the conversions of typeconv/rules.py 18-60.  So float32 op float32 is
  float32; float32 op float64 (a Python float too) is float64; float32 op an
  int64 (a Python int, a literal too), int32, uint16 or uint32 is float64
  (int32 -> float32 is unsafe, int32 -> float64 safe); float32 op int16,
  int8, uint8 or bool is float32 (int16 -> float32 is safe).  float16 op
  float16, int8 or bool is float16 (_internal/cuda_fp16.py
  ``_fp16_binary_operator`` 7882-7912, the others through float32: float16
  promotes to it): float16 op int16, uint8 or float32 is float32, float16 op
  float64 or int64 float64.  Computed at that type, rounded to nearest as
  the GPU's ``sub.f32`` and ``div.rn.f32`` (numba-cuda compiles with
  prec_div): ``+ - * /`` in double, rounded once to float32 or float16 (the
  same, as a double has over twice their precision), the rest with numpy at
  that type; numba's floor division and modulo follow CPython's
  ``float_divmod`` in the operand type (cpython/numbers.py
  ``real_divmod_func_body`` 692-800), as numpy's do.
* ``**`` (``BinOpPower`` 249-263): float32 ** an integer is float32, computed
  as numba's ``int_power_impl`` (cpython/numbers.py 223-265) does, by
  repeated squaring in float32 (`_integer_power`); float32 ** float32 is
  float32 (libdevice ``powf``), float32 ** float64 float64.
* unary ``-``, ``+`` and ``abs`` keep the type (``UnaryOp`` 354-364,
  ``Abs`` 56-66; float16 in cuda_fp16.py 7923-7926).
* comparisons convert both sides as for arithmetic, then compare
  (``OrderedCmpOp``, ``UnorderedCmpOp`` 393-409): ``float32 < int64``
  compares doubles.
* ``math`` functions (cudamath.py): of a float32 argument float32 (numba
  calls ``sinf``...), of float16 float16 for ``sin``, ``sqrt``... and float32
  for the rest; ``math.floor`` of a float32 is a float32.  ``min``/``max``
  convert every argument to the result type: ``max(float32, 0.0)`` is
  float64; of two float32 or float64 arguments they are libdevice's
  ``fmax``/``fmin``, which return the other operand of a NaN (cudaimpl.py
  ``ptx_max_f4`` to ``ptx_min_f8``, 432-480), else Python's algorithm
  (cpython/builtins.py ``do_minmax`` 224-244).
* the results are held as above; a float32 or float16 result stored into an
  array is cast by numpy, as by the compiled store.

Not mirrored (the simulator's values may differ there):

* math functions are computed in double by Python's ``math`` and rounded to
  float32 (a float ``**`` a float by numpy's power at the type): libdevice's
  ``sinf``, ``expf``, ``powf``... may differ from that in the last place
  (``sqrt``, ``floor``, ``fabs``, ``fmod``, ``frexp``... are exact), and
  Python raises for a domain error (``math.log(0.0)``) where the
  GPU returns inf or nan, as it does for a double already.
* arithmetic between values that are not `Float32`/`Float16`: a float32
  array's elements are numpy float32 scalars, so ``x[i] - 0.1`` and
  ``x[i] / (j + 1)`` stay float32 (numba: float64) and ``x[i] + x[j]``
  follows numpy; a Python float and a numpy float64 follow Python and numpy
  (float64 either way, but ``y ** 3`` is libm's pow where numba squares).
* a variable's type: numba gives a variable the unified type of all it is
  assigned (after ``acc = a`` and ``acc = acc * a + 0.5`` acc is float64
  throughout, ``a`` converted at the first), the simulator each value's own.
* ``float(x)`` of a float32 is a plain float (numba keeps float32: Python
  requires ``__float__`` to return a float), ``round(x, ndigits)`` is
  computed in double, and numpy ufuncs (``np.sqrt(x)``) follow numpy.
* multiply-add contraction: NVVM fuses ``a * b + c`` into one ``fma.rn``
  (libNVVM's default -fma=1; numba-cuda's PTX has it without fastmath too),
  rounding once where the simulator rounds twice, float32 and float64 alike.
* explicit casts in the kernel (``np.float32(x)``) give numpy scalars, which
  follow numpy as array elements do.
* fastmath (approximate division and ``__sinf``, flushed subnormals), and a
  float division by zero gives inf or nan, as compiled code without debug
  (with debug it raises ZeroDivisionError).
"""

from __future__ import annotations

import builtins
import ctypes
import functools
import logging
import math
import operator
import sys
import threading
import types as pytypes
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .. import numba_compat
from ....errors import UnsupportedKernelError
from .... import memos

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ....keys.config import CompileConfig

__all__ = ["launch_arguments", "DeclaredTwin", "Float32", "Float16", "NarrowInt", "simulated_value", "narrow_math",
           "simulated_kernel", "simulate_memory", "notice_simulator"]


# -- kernel arguments -------------------------------------------------------------


def launch_arguments(argtypes: Sequence, args: Sequence) -> tuple:
    """`args` as a launch with compiled parameter types `argtypes` passes them.

    Raises TypeError (or OverflowError) where numba-cuda's launch raises it,
    with the argument's position and type in the message.
    """
    converted = []
    for position, (ty, value) in enumerate(zip(argtypes, args), start=1):
        try:
            converted.append(_launch_value(ty, value))
        except (TypeError, OverflowError, ValueError) as exc:
            raise type(exc)(f"argument {position} ({value!r}) cannot be passed as {ty}: {exc}; numba-cuda "
                            "refuses it on a GPU too (convert it on the host)") from None
    return tuple(converted)


def _launch_value(ty, value):
    """One argument as ``_Kernel._prepare_args`` passes it: through the same
    ctypes or numpy constructor, so that the value (wrapped, rounded or
    refused) is the one the GPU gets.  Arrays, records and other types pass
    as they are: the simulator gives them their own device semantics."""
    from numba.cuda import types

    if isinstance(ty, types.BaseTuple) and isinstance(value, tuple):  # element by element, as numba's
        return _same_tuple(value, [_launch_value(t, v) for t, v in zip(ty, value)])
    if isinstance(ty, types.Integer):  # ctypes.c_int32(value): wraps ints, refuses floats
        return simulated_value(ty, getattr(ctypes, f"c_{'' if ty.signed else 'u'}int{ty.bitwidth}")(value).value)
    if ty == types.float16:
        return simulated_value(ty, np.float16(value))
    if ty in (types.float32, types.float64):
        return simulated_value(ty, getattr(ctypes, "c_float" if ty == types.float32 else "c_double")(value).value)
    if ty in (types.complex64, types.complex128):  # each part through c_float or c_double
        part = ctypes.c_float if ty == types.complex64 else ctypes.c_double
        return simulated_value(ty, complex(part(value.real).value, part(value.imag).value))
    if ty == types.boolean:
        return _launched_boolean(value)
    return value


def _launched_boolean(value):
    """numba-cuda hands a boolean's value to cuda.core unconverted: cuda.core
    stores it at its own width (a Python int as 8 bytes, a float as a double,
    a numpy scalar at its width) and the kernel's one-byte parameter reads the
    first byte, true when not zero (datamodel/cuda_models.py BooleanModel)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raw = value if isinstance(value, np.generic) else np.asarray(value)
    return np.asarray(raw).tobytes()[:1] != b"\0"


@memos.cached("backends.numba_cuda.launch.simulator._numpy_scalar", maxsize=None)
def _numpy_scalar(ty):
    from numba.cuda.np import numpy_support

    return numpy_support.as_dtype(ty).type


def _same_tuple(original: tuple, items) -> tuple:
    """`items` as a tuple of `original`'s kind (a named tuple stays one)."""
    return type(original)(*items) if hasattr(original, "_fields") else tuple(items)


# -- scalars that carry their compiled type ----------------------------------------


def _binary(function):
    """The forward and reflected operator methods computing `function` as compiled code does."""
    def forward(self, other):
        return _apply(function, (self, other))

    def reflected(self, other):
        return _apply(function, (other, self))

    return forward, reflected


class NarrowFloat(float):
    """A float32 or float16 value: a Python float holding the exactly rounded
    value, whose operators are typed as numba types them (module docstring)."""

    __slots__ = ()
    dtype: np.dtype  # the compiled width, set by each subclass
    # numpy scalars (a float32 array's elements) defer to the reflected operators below
    __array_priority__ = 1000.0

    def __new__(cls, value=0.0):
        return super().__new__(cls, cls._rounded(value))

    @staticmethod
    def _rounded(value) -> float:
        raise NotImplementedError

    __add__, __radd__ = _binary(operator.add)
    __sub__, __rsub__ = _binary(operator.sub)
    __mul__, __rmul__ = _binary(operator.mul)
    __truediv__, __rtruediv__ = _binary(operator.truediv)
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv)
    __mod__, __rmod__ = _binary(operator.mod)
    __divmod__, __rdivmod__ = _binary(divmod)
    __lt__ = _binary(operator.lt)[0]  # (Python reflects `a < b` as `b > a`)
    __le__ = _binary(operator.le)[0]
    __gt__ = _binary(operator.gt)[0]
    __ge__ = _binary(operator.ge)[0]
    __eq__ = _binary(operator.eq)[0]
    __ne__ = _binary(operator.ne)[0]
    __hash__ = float.__hash__

    def __pow__(self, other, modulo=None):
        return NotImplemented if modulo is not None else _apply(operator.pow, (self, other))

    def __rpow__(self, other, modulo=None):
        return NotImplemented if modulo is not None else _apply(operator.pow, (other, self))

    def __neg__(self):
        return _apply(operator.neg, (self,))

    def __pos__(self):
        return _apply(operator.pos, (self,))

    def __abs__(self):
        return _apply(abs, (self,))


class Float32(NarrowFloat):
    """A float32 value on the simulator."""

    __slots__ = ()
    dtype = np.dtype(np.float32)

    @staticmethod
    def _rounded(value) -> float:
        return ctypes.c_float(value).value  # C's double -> float: to nearest, inf past the range


class Float16(NarrowFloat):
    """A float16 value on the simulator."""

    __slots__ = ()
    dtype = np.dtype(np.float16)

    @staticmethod
    def _rounded(value) -> float:
        with np.errstate(over="ignore"):  # inf past the range, as on the GPU
            return float(np.float16(value))


class NarrowInt(int):
    """An integer of a compiled type narrower than 64 bits: an int carrying
    its type, which decides what a float32 operand makes of it (float32 +
    int16 is float32, float32 + int32 float64).  Its own arithmetic is int's,
    64-bit as numba's, and returns plain ints."""

    __slots__ = ()
    dtype: np.dtype


_NARROW_INTS = {
    np.dtype(t): type(name, (NarrowInt,), {"__slots__": (), "dtype": np.dtype(t), "__module__": __name__,
                                           "__doc__": f"An {np.dtype(t).name} value on the simulator."})
    for name, t in (("Int8", np.int8), ("Int16", np.int16), ("Int32", np.int32),
                    ("UInt8", np.uint8), ("UInt16", np.uint16), ("UInt32", np.uint32))
}
_NARROW_FLOATS = {Float32.dtype: Float32, Float16.dtype: Float16}


def simulated_value(ty, value):
    """A value of compiled type `ty` as the simulator holds it (module
    docstring): `value` cast to `ty` as numpy's C cast does (for an integer
    type `value` must already be in range).  Other types (arrays, records)
    pass as they are."""
    return _holder(ty)(value)


@memos.cached("backends.numba_cuda.launch.simulator._holder", maxsize=None)
def _holder(ty):
    """The function making a value of compiled type `ty` the simulator's (`simulated_value`)."""
    from numba.cuda import types

    if isinstance(ty, types.BaseTuple):
        holders = [_holder(t) for t in ty]
        return lambda value: _same_tuple(value, [hold(v) for hold, v in zip(holders, value)]) \
            if isinstance(value, tuple) else value
    if not isinstance(ty, (types.Integer, types.Float, types.Boolean, types.Complex)):
        return lambda value: value
    dtype = np.dtype(_numpy_scalar(ty))
    if dtype.kind == "b":
        return bool
    if dtype.kind in "iu":
        return _NARROW_INTS.get(dtype, int)
    if dtype in _NARROW_FLOATS:
        return _NARROW_FLOATS[dtype]
    if dtype == np.float64:
        return np.float64
    return functools.partial(_numpy_cast, dtype.type)


def _numpy_cast(kind, value):
    with np.errstate(over="ignore"):  # a double too large for complex64 becomes inf, as on the GPU
        return kind(value)


@memos.cached("backends.numba_cuda.launch.simulator._from_dtype", maxsize=None)
def _from_dtype(dtype: np.dtype):
    from numba.cuda.np import numpy_support

    return numpy_support.from_dtype(dtype)


# the class of a simulator scalar -> its numba type, where the class decides it
_class_types: dict = memos.memo("backends.numba_cuda.launch.simulator._class_types", {})


def scalar_type(value):
    """The numba type compiled code gives the simulator scalar `value`, or None (not a scalar)."""
    ty = _class_types.get(type(value))
    return ty if ty is not None else _scalar_type(value)


def _scalar_type(value):
    from numba.cuda import types

    if isinstance(value, (NarrowFloat, NarrowInt, np.number, np.bool_)):
        ty = _from_dtype(value.dtype)
    elif isinstance(value, bool):
        ty = types.boolean
    elif isinstance(value, int):  # by its value, as numba's typeof: int64, or uint64 past it
        return types.int64 if -2**63 <= value < 2**63 else types.uint64 if 0 <= value < 2**64 else None
    elif isinstance(value, float):
        ty = types.float64
    elif isinstance(value, complex):
        ty = types.complex128
    else:
        return None
    _class_types[type(value)] = ty
    return ty


class _Plan(NamedTuple):
    """How compiled code computes a function of operands of given types."""

    signature: Any  # numba-cuda's signature for it
    hold: Callable  # the result as the simulator holds it
    # the result is the double result, rounded once to the result type (`_apply`)
    in_double: bool


# operators whose result at a float width is their double result rounded once to it: exactly so
# where the operands hold values of that width, a double having more than twice the precision
# of a float32 (53 >= 2 * 24 + 2 bits; Figueroa, "When is double rounding innocuous?", 1995)
_ROUNDED_ONCE = frozenset({operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pos,
                           abs, operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne})
_plans: dict = memos.memo("backends.numba_cuda.launch.simulator._plans", {})
_typing_lock = threading.Lock()


def _plan(function, operands) -> Optional[_Plan]:
    """How compiled code computes `function` of `operands`, or None where
    numba-cuda has no signature for it (or an operand is no scalar)."""
    argtypes = tuple(map(scalar_type, operands))
    if None in argtypes:
        return None
    key = (function, argtypes)
    try:
        return _plans[key]
    except KeyError:
        pass
    from numba.cuda.core.compiler_lock import global_compiler_lock

    # numba's typing context is not thread-safe: simulator threads type
    # concurrently, and a compile (a background audit) may be running
    with _typing_lock, global_compiler_lock:
        if key not in _plans:
            _plans[key] = _make_plan(function, argtypes)
        return _plans[key]


def _make_plan(function, argtypes) -> Optional[_Plan]:
    from numba.cuda import types
    from numba.cuda.core.errors import NumbaError
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.typing_context
    context.refresh()
    try:
        signature = context.resolve_function_type(context.resolve_value_type(function), argtypes, {})
    except (NumbaError, TypeError, ValueError):
        signature = None
    if signature is None:
        return None
    in_double = function in _ROUNDED_ONCE and all(
        isinstance(target, types.Float) and _exact_in_double(actual, target)
        for actual, target in zip(argtypes, signature.args))
    return _Plan(signature, _holder(signature.return_type), in_double)


def _exact_in_double(actual, target) -> bool:
    """True when Python's ``float()`` of a value of type `actual` is its
    conversion to float type `target` (numba's sitofp/fpext): exact, or
    rounded once to a double as LLVM rounds it."""
    from numba.cuda import types

    if isinstance(actual, types.Boolean):
        return True
    if isinstance(actual, types.Integer):  # exact below the target's precision; rounded to nearest into a double
        return target.bitwidth == 64 or actual.bitwidth <= {16: 11, 32: 24}[target.bitwidth]
    return isinstance(actual, types.Float) and actual.bitwidth <= target.bitwidth


def _apply(function, operands):
    """An operator on `operands` as compiled code computes it, or NotImplemented
    where numba does not type it (Python then raises as for a float)."""
    from numba.cuda import types

    plan = _plan(function, operands)
    if plan is None:
        return NotImplemented
    if plan.in_double:  # the fast way: Python's floats
        try:
            return plan.hold(function(*map(float, operands)))
        except ZeroDivisionError:  # numpy's division below gives inf or nan, as compiled code
            pass
    argtypes, result_type = plan.signature.args, plan.signature.return_type
    with np.errstate(all="ignore"):  # inf and nan, as compiled code (numba's numpy error model)
        if function is operator.pow and isinstance(argtypes[0], types.Float) \
                and isinstance(argtypes[1], types.Integer):
            result = _integer_power(_as_numpy(operands[0], result_type), int(operands[1]))
        else:
            result = function(*(_as_numpy(value, ty) for value, ty in zip(operands, argtypes)))
    return plan.hold(result)


def _as_numpy(value, ty):
    """`value` converted to `ty` as numba's implicit conversion does, as a numpy scalar."""
    return np.dtype(_numpy_scalar(ty)).type(value)


def _integer_power(base, exponent: int):
    """``base ** exponent`` as numba's ``int_power_impl`` computes a float to
    an integer power (cpython/numbers.py 223-265; ``static_power_impl`` 268-332
    for a literal exponent unrolls the same loop): repeated squaring in the result
    type (`base`'s), a negative exponent inverting the result with ``1.0 /``
    (a double division, rounded back), a huge one by ``math.pow``."""
    kind = type(base)
    if abs(exponent) > 0x10000:
        return kind(math.pow(float(base), float(exponent)))
    result, remaining = kind(1), abs(exponent)
    while remaining:
        if remaining & 1:
            result = result * base
        remaining >>= 1
        base = base * base
    return kind(np.float64(1.0) / np.float64(result)) if exponent < 0 else result


# -- math functions at numba's widths ---------------------------------------------------


def narrow_math(function):
    """`function`, a rebound simulator copy (its globals and closure cells are
    its own), with the ``math`` module, the ``math`` functions and the
    ``min``/``max`` it reads replaced by versions that compute a float32 or
    float16 argument as numba types it (module docstring).  Returns it."""
    namespace = function.__globals__
    for name, value in list(namespace.items()):
        replacement = _narrowed(value)
        if replacement is not None:
            namespace[name] = replacement
    for cell in function.__closure__ or ():
        try:
            replacement = _narrowed(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
        if replacement is not None:
            cell.cell_contents = replacement
    return function


def _narrowed(value):
    """The narrowing replacement of `value`, or None where it has none."""
    if value is math:
        return _narrow_math_module()
    if isinstance(value, pytypes.BuiltinFunctionType) and (
            value is builtins.min or value is builtins.max or getattr(math, value.__name__, None) is value):
        return _narrowing(value)
    return None


@memos.cached("backends.numba_cuda.launch.simulator._narrow_math_module", maxsize=None)
def _narrow_math_module():
    module = pytypes.ModuleType("math", math.__doc__)
    for name, value in vars(math).items():
        if not name.startswith("_"):
            setattr(module, name, _narrowing(value) if callable(value) else value)
    return module


@memos.cached("backends.numba_cuda.launch.simulator._narrowing", maxsize=None)
def _narrowing(function):
    """`function` (a ``math`` function, ``min`` or ``max``) computing as numba
    does where an argument is a float32 or float16; as itself elsewhere."""
    @functools.wraps(function)
    def narrowed(*args, **kwargs):
        if not kwargs and any(isinstance(arg, (NarrowFloat, np.float32, np.float16)) for arg in args):
            plan = _plan(function, args)
            if plan is not None:
                return plan.hold(_narrow_call(function, args, plan.signature))
        return function(*args, **kwargs)

    return narrowed


def _narrow_call(function, args, signature):
    """`function` of `args` as compiled code computes it with `signature`."""
    from numba.cuda import types

    if function is builtins.min or function is builtins.max:
        values = [_as_numpy(arg, signature.return_type) for arg in args]  # each converted to the result type
        if len(args) == 2 and all(ty in (types.float32, types.float64) for ty in signature.args):
            # cudaimpl.py ptx_max_f4...ptx_min_f8: libdevice fmax/fmin, which return the other operand of a NaN
            return (np.fmax if function is builtins.max else np.fmin)(*values)
        return function(*(value.item() for value in values))  # cpython/builtins.py do_minmax: Python's algorithm
    # a math function: computed in double by Python's math, rounded to the result type by the caller
    return function(*(_as_numpy(arg, ty).item() for arg, ty in zip(args, signature.args)))


# -- device functions declared with signatures ---------------------------------------


def _fake_kernel_class():
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    return FakeCUDAKernel


class DeclaredTwin(_fake_kernel_class()):
    """The simulator twin of ``@cuda.jit(signatures, device=True)``.

    Compiled code types each call against the declared signatures alone
    (numba compiled those and turned compiling off) and casts the arguments
    to the chosen signature's types and the result to its return type; this
    does the same with the simulator's values.
    """

    def __init__(self, fn, declared: Sequence[Tuple[tuple, Any]], **options):
        super().__init__(fn, device=True, **options)
        self.declared = tuple(declared)
        self._chosen = {}  # the simulator's argument types -> the declared signature they select

    def __call__(self, *args):
        argtypes, return_type = self._select(args)
        cast = [_cast(self.__qualname__, value, ty) for value, ty in zip(args, argtypes)]
        return _cast(self.__qualname__, super().__call__(*cast), return_type)

    def _select(self, args) -> Tuple[tuple, Any]:
        """The declared signature numba's typing picks for a call with `args`."""
        candidates = [d for d in self.declared if len(d[0]) == len(args)]
        if len(candidates) == 1:  # the kernel compiled, so numba took this one
            return candidates[0]
        actual = tuple(_simulated_type(value) for value in args)
        if actual not in self._chosen:
            self._chosen[actual] = _resolve(self.__qualname__, candidates, actual)
        return self._chosen[actual]


def _resolve(name: str, candidates, actual: tuple) -> Tuple[tuple, Any]:
    """As numba types a call against a concrete template (typing/templates.py
    ``ConcreteTemplate.apply`` -> typing/context.py ``resolve_overload``): the
    fewest unsafe, then safe, then promoting conversions; a tie goes to the
    first declared."""
    from numba.cuda import typing
    from numba.cuda.descriptor import cuda_target

    chosen = None
    if candidates and None not in actual:
        cases = [typing.signature(return_type, *argtypes) for argtypes, return_type in candidates]
        chosen = cuda_target.typing_context.resolve_overload(name, cases, actual, {})
    if chosen is None:
        shown = ", ".join("?" if ty is None else str(ty) for ty in actual)
        raise UnsupportedKernelError(
            f"the simulator cannot tell which declared signature of {name} a call with ({shown}) takes; "
            f"declare one signature per arity, or drop the signatures so that it types per call")
    return tuple(chosen.args), chosen.return_type


def _simulated_type(value):
    """The numba type of a simulator value, or None (what numba would take a
    simulator array for is its host array's type)."""
    from numba.cuda.typing.typeof import Purpose, typeof

    scalar = scalar_type(value)
    if scalar is not None:
        return scalar
    value = getattr(value, "_item", value)  # FakeWithinKernelCUDAArray -> FakeCUDAArray
    value = getattr(value, "_ary", value)  # FakeCUDAArray -> its numpy array
    try:
        return typeof(value, Purpose.argument)
    except Exception:
        log.debug("numba has no type for a %s", type(value).__name__, exc_info=True)
        return None


def _cast(name: str, value, ty):
    """`value` cast to `ty` as numba's implicit conversions lower it: numpy's
    C casts are LLVM's (ints wrap, floats round to nearest, floats truncate
    toward zero into ints, anything not zero is true), and held as the
    simulator holds `ty` (`simulated_value`).  Other types (arrays, records,
    none) are passed as they are."""
    from numba.cuda import types

    if isinstance(ty, types.BaseTuple) and isinstance(value, tuple):
        return _same_tuple(value, [_cast(name, v, t) for v, t in zip(value, ty)])
    if not isinstance(ty, (types.Integer, types.Float, types.Boolean, types.Complex)):
        return value
    target = np.dtype(_numpy_scalar(ty))
    try:
        source = np.asarray(value)  # a Python value as the type numba gives it: int64, float64...
    except OverflowError:
        source = np.asarray(value, dtype=object)
    if source.ndim or source.dtype.kind not in "biufc" or (source.dtype.kind == "c" and target.kind != "c") \
            or (source.dtype.kind == "f" and target.kind in "iu" and not _fits(source.item(), target)):
        raise UnsupportedKernelError(
            f"{name} is declared to take or return {ty}, and the simulator met {value!r}, which compiled "
            f"code cannot convert to {ty} with a defined result; convert it explicitly in the kernel "
            f"(clamp or round it first), or drop the signature so that {name} types per call")
    with np.errstate(over="ignore"):  # a double too large for float32 becomes inf, as on the GPU
        cast = source.astype(target)[()]
    return simulated_value(ty, cast)


def _fits(number: float, target: np.dtype) -> bool:
    """True when a float truncated toward zero fits the integer type (else LLVM's fptosi is undefined)."""
    info = np.iinfo(target)
    return math.isfinite(number) and info.min <= math.trunc(number) <= info.max


# -- running a kernel on the simulator ---------------------------------------------


@memos.cached("backends.numba_cuda.launch.simulator._simulated_array_class", maxsize=1)
def _simulated_array_class():
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from ....sources.snapshot import host_array_interface

    class SimulatedDeviceArray(FakeCUDAArray):
        """The simulator's device array, with the CUDA Array Interface a real
        one has (its data pointer is the host buffer's)."""

        @property
        def __cuda_array_interface__(self):
            return host_array_interface(self._ary)

    return SimulatedDeviceArray


def _with_interface(factory):
    """`factory`, its simulator arrays given the CUDA Array Interface."""
    if not callable(factory) or isinstance(factory, type):
        return factory
    simulated = _simulated_array_class()

    @functools.wraps(factory)
    def make(*args, **kwargs):
        made = factory(*args, **kwargs)
        if type(made).__name__ == "FakeCUDAArray":
            made.__class__ = simulated
        return made

    return make


def simulate_memory(enable: bool = True) -> None:
    """Give ``numba.cuda``'s memory and stream API (``to_device``,
    ``device_array``, ``stream``, ``synchronize``...) the simulator's objects,
    or numba's own back (`enable` False).  The magic does this when there is
    no GPU, so that cells written for a GPU run on the simulator as written:
    kernels launched there accept the simulator's arrays (the names:
    `numba_compat.MEMORY_API`).
    """
    from numba.cuda import simulator

    def replacement_for(name):
        replacement = getattr(simulator, name, None) or getattr(simulator.devicearray, name, None)
        return None if replacement is None else _with_interface(replacement)

    numba_compat.simulator_memory_api(enable, replacement_for)


_notice_shown = False


def notice_simulator(asked: bool) -> None:
    """Say once per process that launches run on the simulator (unless asked for)."""
    global _notice_shown
    if not _notice_shown and not asked:
        print("gpucache_ext: no GPU found, kernels run on numba's CUDA simulator "
              "(compiled artifacts are still cached and inspectable)", file=sys.stderr)
    _notice_shown = True


def simulated_kernel(pyfunc, config: "CompileConfig", extensions=()):
    """numba's simulator kernel for `pyfunc`, its device functions replaced by
    simulator twins (those declared with signatures cast their arguments and
    result as compiled code does), and the math functions they read computing
    float32 arguments at numba's widths (simulator.narrow_math).  Like compiled
    code, it keeps the values its globals, closure variables and module
    attributes had when it was made (numba's simulator would read them anew at
    every launch)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from ....sources.functions import declared_signatures
    from ....sources.snapshot import rebind
    from ....sources.walk import identify

    def simulated(identity):
        return narrow_math(rebind(identity, twin))

    def twin(dispatcher, identity):
        refuse_externs(identity)
        declared = declared_signatures(dispatcher)
        if declared:  # compiled code casts to the declared types: so must the twin
            return DeclaredTwin(simulated(identity), declared, fastmath=config.fastmath)
        return FakeCUDAKernel(simulated(identity), device=True, fastmath=config.fastmath)

    def refuse_externs(identity):
        if identity.externs:
            raise UnsupportedKernelError(
                f"{identity.qualname} calls {', '.join(sorted(set(identity.externs)))}, declared with "
                "cuda.declare_device: external code cannot run on the simulator, it needs a GPU "
                "(the kernel compiles: its .ptx, .cubin and resources are there to inspect)"
            )

    identity = identify(pyfunc, with_location=False, freeze=True)
    refuse_externs(identity)
    return FakeCUDAKernel(simulated(identity), device=False, fastmath=config.fastmath,
                          debug=config.debug, extensions=extensions)
