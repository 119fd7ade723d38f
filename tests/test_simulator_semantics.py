"""The simulator runs what compiled code runs: scalar arguments arrive as the
kernel's compiled parameter types, device functions declared with a
signature cast their arguments and result as compiled code does, and float32
and float16 arithmetic is typed as numba types it.

Each expected value is what a GPU computes, worked out with numpy here.
"""

import re

import numpy as np
import pytest

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError, UnsupportedKernelError
from gpucache_ext.sources import declare_signatures

from .helpers import notebook_namespace, run_cell


def declared(*signatures):
    """``@cuda.jit(signatures, device=True)`` kept lazy, as the magic keeps it
    (numba would compile it at once, which needs a GPU)."""
    from numba import cuda

    def declare(func):
        dispatcher = cuda.jit(device=True)(func)
        declare_signatures(dispatcher, signatures)
        return dispatcher

    return declare


def kernel(source, name, signature):
    """`name` from `source` (run as a notebook cell), a Kernel on the simulator."""
    ns = notebook_namespace()
    ns["declared"] = declared
    run_cell(ns, source)
    return Kernel(ns[name], signatures=[signature], config=CompileConfig(sm=86), cache=KernelCache(), simulate=True)


STORE = """
def store(r, a, b):
    r[0] = a
    r[1] = a - b
"""


def test_a_python_float_for_a_float32_parameter_is_rounded():
    r = np.zeros(2)
    kernel(STORE, "store", "void(float64[:], float32, float64)")[1, 1](r, 0.1, 0.1)
    assert r[0] == np.float64(np.float32(0.1))
    assert r[1] == np.float32(0.1) - np.float64(0.1) == pytest.approx(1.49e-09, rel=1e-3)


def test_float_parameters_compute_at_their_compiled_width():
    source = """
def widths(r, a, b, c, x):
    r[0] = a * b      # float32 * float32: float32
    r[1] = c * x[0]   # float64 * float32: float64
"""
    r = np.zeros(2)
    x = np.array([0.3], np.float32)
    kernel(source, "widths", "void(float64[:], float32, float32, float64, float32[:])")[1, 1](r, 0.1, 0.3, 0.1, x)
    assert r[0] == np.float32(0.1) * np.float32(0.3)
    assert r[1] == np.float64(0.1) * np.float64(x[0])


def test_a_python_float_for_a_float16_parameter_is_rounded():
    r = np.zeros(2)
    kernel(STORE, "store", "void(float64[:], float16, float64)")[1, 1](r, 0.1, 0.1)
    assert r[0] == np.float64(np.float16(0.1)) != 0.1


def test_complex64_parameters_round_both_parts():
    r = np.zeros(2, np.complex128)
    kernel(STORE, "store", "void(complex128[:], complex64, complex128)")[1, 1](r, 0.1 + 0.2j, 0j)
    assert r[0] == np.complex128(np.complex64(0.1 + 0.2j)) != 0.1 + 0.2j


PAIR = """
def pair(r, a, b):
    r[0] = a
    r[1] = b
"""


def test_integer_parameters_wrap_as_numba_cudas_ctypes_conversion_does():
    source = """
def wrapped(r, a, b):
    r[0] = a
    r[1] = b
    r[2] = a * 2      # numba's integer arithmetic is 64-bit: no int32 wraparound here
"""
    r = np.zeros(3, np.int64)
    kernel(source, "wrapped", "void(int64[:], int32, uint8)")[1, 1](r, 2**31 + 5, -1)
    assert r[0] == np.array(2**31 + 5).astype(np.int32) == -(2**31) + 5
    assert r[1] == np.array(-1).astype(np.uint8) == 255
    assert r[2] == np.int64(r[0]) * 2


def test_a_float_for_an_integer_parameter_is_refused_as_numba_cuda_refuses_it():
    with pytest.raises(LaunchError, match=r"pair: argument 2 \(3\.7\) cannot be passed as int32"):
        kernel(PAIR, "pair", "void(int64[:], int32, int32)")[1, 1](np.zeros(2, np.int64), 3.7, 1)


def test_a_boolean_parameter_reads_the_lowest_byte_numba_cuda_passes():
    r = np.zeros(2, np.int64)
    launch = kernel(PAIR, "pair", "void(int64[:], boolean, boolean)")[1, 1]
    launch(r, 256, 2)  # a Python int goes as 8 bytes, and the kernel reads the first
    assert list(r) == [0, 1]
    launch(r, np.int16(512), True)
    assert list(r) == [0, 1]


def test_tuple_parameters_convert_each_element():
    source = """
def first(r, t):
    r[0] = t[0]
    r[1] = t[1]
"""
    r = np.zeros(2)
    kernel(source, "first", "void(float64[:], UniTuple(float32, 2))")[1, 1](r, (0.1, 0.2))
    assert list(r) == [np.float64(np.float32(0.1)), np.float64(np.float32(0.2))]


DEVICE = """
@declared("int32(int32)")
def triple(x):
    return x * 3

@declared("float32(float32)")
def narrow(x):
    return x

@declared("int32(int32)", "float32(float32)")
def either(x):
    return x

def calls(r, v, x):
    r[0] = triple(v)
    r[1] = triple(-v)
    r[2] = narrow(v) - v
    r[3] = either(v)        # float64: both unsafe, a tie: numba takes the first declared
    r[4] = either(x[0])     # float32: an exact match
"""


def test_declared_device_functions_cast_arguments_and_result():
    r = np.zeros(5)
    x = np.array([2.5], np.float32)
    kernel(DEVICE, "calls", "void(float64[:], float64, float32[:])")[1, 1](r, 2.9, x)
    assert r[0] == np.int32(2) * 3 == 6  # 2.9 truncates to 2 on its way in
    assert r[1] == -6
    assert r[2] == np.float32(2.9) - np.float64(2.9) != 0
    assert r[3] == 2.0
    assert r[4] == 2.5


def test_a_value_no_declared_type_holds_is_refused_by_name():
    with pytest.raises(UnsupportedKernelError, match=r"triple.*1e\+20.*int32"):
        kernel(DEVICE, "calls", "void(float64[:], float64, float32[:])")[1, 1](
            np.zeros(5), 1e20, np.zeros(1, np.float32))


def test_the_magic_runs_compiled_semantics(ip):
    result = ip.run_cell('''%%gpukernel --sm 86 --quiet
import re

import numpy as np
from numba import cuda

@cuda.jit("float32(float32)", device=True)
def narrow(x):
    return x

@cuda.jit("void(float64[:], float32, float64)")
def store(r, a, b):
    r[0] = a - b
    r[1] = narrow(b) - b

r = np.zeros(2)
store[1, 1](r, 0.1, 0.1)
''')
    result.raise_error()
    expected = np.float32(0.1) - np.float64(0.1)
    assert list(ip.user_ns["r"]) == [expected, expected]


# -- float32 and float16 arithmetic typed as numba types it ---------------------------
#
# Each rule is confirmed in the kernel's own LLVM IR (numba's typing decides the
# instruction: ``fsub double`` is float64 arithmetic, ``fmul float`` float32),
# and each expected value is worked out with numpy at those types.  No result
# here goes through a multiply-add, which NVVM would fuse into one fma.


def assert_ir(k, *patterns):
    """Each regular expression matches a line of `k`'s LLVM IR."""
    lines = k.llvm_ir.splitlines()
    for pattern in patterns:
        assert any(re.search(pattern, line) for line in lines), f"no {pattern!r} in the IR"


def test_float32_minus_a_python_float_is_float64_as_numba_types_it():
    source = """
def issue(r, a):
    r[0] = a - 0.1
"""
    r = np.zeros(1)
    k = kernel(source, "issue", "void(float64[:], float32)")
    k[1, 1](r, 0.1)
    assert_ir(k, r'fpext float %"a" to double', r"fsub double %\S+, 0x3fb999999999999a")  # 0x3fb9...: 0.1
    compiled = np.float64(np.float32(0.1)) - 0.1
    assert r[0] == compiled == 1.4901161138336505e-09
    assert np.float32(0.1) - 0.1 == 0  # numpy 2 (NEP 50) keeps it float32: what the simulator must not do


def test_float32_times_float32_stays_float32():
    source = """
def product(r, a, b):
    r[0] = a * b
    r[1] = a * b - 0.1    # the float32 product, then a float64 subtraction
"""
    r = np.zeros(2)
    k = kernel(source, "product", "void(float64[:], float32, float32)")
    k[1, 1](r, 0.1, 0.3)
    assert_ir(k, r'fmul float %"a", %"b"', r"fsub double %\S+, 0x3fb999999999999a")
    a, b = np.float32(0.1), np.float32(0.3)
    assert r[0] == a * b != np.float64(a) * np.float64(b)  # rounded to float32
    assert r[1] == np.float64(a * b) - 0.1


def test_float32_with_integers_follows_numbas_conversions():
    source = """
def mixed(r, a, i, j, k):
    r[0] = a * i    # int16 -> float32 is a safe conversion: float32
    r[1] = a * j    # int32 -> float32 is unsafe, int32 -> float64 safe: float64
    r[2] = a * k    # int64: float64
    r[3] = a * 3    # an integer literal is an int64: float64
"""
    r = np.zeros(4)
    k = kernel(source, "mixed", "void(float64[:], float32, int16, int32, int64)")
    k[1, 1](r, 0.1, 3, 3, 3)
    assert_ir(k, r'sitofp i16 %"i" to float', r'sitofp i32 %"j" to double', r'sitofp i64 %"k" to double',
              r"sitofp i64 3 to double")
    a = np.float32(0.1)
    assert r[0] == a * np.float32(3)
    assert list(r[1:]) == [np.float64(a) * 3.0] * 3 != [np.float64(a * np.float32(3))] * 3


def test_float16_arithmetic_follows_numba_cudas_fp16_typing():
    source = """
def halves(r, h, g):
    r[0] = h + g      # float16 + float16: float16 (cuda_fp16's __half operator+)
    r[1] = h - 0.1    # float16 - float64: float64
"""
    r = np.zeros(2)
    k = kernel(source, "halves", "void(float64[:], float16, float16)")
    k[1, 1](r, 0.1, 0.2)
    assert_ir(k, r"call .*cuda_fp16.*_ZplRK6__half", r"fsub double %\S+, 0x3fb999999999999a")
    assert r[0] == np.float16(0.1) + np.float16(0.2)
    assert r[1] == np.float64(np.float16(0.1)) - 0.1


def test_unary_operators_and_comparisons_are_typed_as_numba_types_them():
    source = """
def signs(r, a):
    r[0] = -a - 0.1       # float32 negation, then float64
    r[1] = abs(a) - 0.1
    r[2] = a > 0.1        # compared as doubles: float32(0.1) > 0.1
    r[3] = a == 0.1
"""
    r = np.zeros(4)
    k = kernel(source, "signs", "void(float64[:], float32)")
    k[1, 1](r, 0.1)
    assert_ir(k, r'fsub float -?0x[08]0*, %"a"', r'call float @"__nv_fabsf"\(float %"a"\)',
              r"fcmp ogt double %\S+, 0x3fb999999999999a", r"fcmp oeq double %\S+, 0x3fb999999999999a")
    a = np.float64(np.float32(0.1))
    assert list(r) == [-a - 0.1, a - 0.1, 1.0, 0.0]


def test_float32_to_an_integer_power_squares_in_float32_as_numba_does():
    source = """
def powers(r, a, n):
    r[0] = a ** 3     # numba's int_power_impl: a * (a * a) in float32
    r[1] = a ** n
    r[2] = a ** -2    # 1.0 / (a * a), divided as doubles, rounded to float32
"""
    r = np.zeros(3)
    k = kernel(source, "powers", "void(float64[:], float32, int64)")
    k[1, 1](r, 2.9, 3)
    assert_ir(k, r"call .*int_power_impl.*\(float\* %\S+, float %\"a\", i64 3\)",
              r"fdiv double 0x3ff0000000000000, %\S+", r"fmul float")
    a = np.float32(2.9)
    cube = a * (a * a)
    assert list(r) == [cube, cube, np.float32(1.0 / np.float64(a * a))]
    assert cube != a ** 3  # (numpy's powf rounds once)


def test_math_functions_of_a_float32_compute_in_float32():
    source = """
import math
from math import sqrt

def roots(r, a, b):
    r[0] = math.sqrt(a) - 0.1     # sqrtf: a float32 result
    r[1] = sqrt(b) - 0.1
    r[2] = math.floor(a) * b      # floorf: a float32 (not an int), so a float32 product
    r[3] = max(b, 0.0) * b        # max(float32, float64): float64 (libdevice fmax)
"""
    r = np.zeros(4)
    k = kernel(source, "roots", "void(float64[:], float32, float32)")
    k[1, 1](r, 3.5, 0.1)
    assert_ir(k, r'call float @"__nv_sqrtf"\(float %"a"\)', r'call float @"__nv_sqrtf"\(float %"b"\)',
              r'call float @"__nv_floorf"\(float %"a"\)', r"fmul float %\S+, %\"b\"", r'call double @"__nv_fmax"',
              r"fmul double")
    a, b = np.float32(3.5), np.float32(0.1)  # (sqrtf is correctly rounded, as numpy's float32 sqrt)
    assert list(r) == [np.float64(np.sqrt(a)) - 0.1, np.float64(np.sqrt(b)) - 0.1, np.float32(3) * b,
                       np.float64(b) ** 2]
    assert r[0] != np.sqrt(3.5) - 0.1 and r[2] != 3 * np.float64(b) and r[3] != np.float64(b * b)


def test_a_device_function_declared_to_return_float32_returns_a_float32():
    source = """
@declared("float32(float64)")
def to32(x):
    return x

def narrowed(r, v):
    r[0] = to32(v) - 0.1
    r[1] = to32(v) * to32(v) - 0.1   # the float32 product, then float64
"""
    r = np.zeros(2)
    k = kernel(source, "narrowed", "void(float64[:], float64)")
    k[1, 1](r, 0.1)
    assert_ir(k, r"fmul float", r"fsub double %\S+, 0x3fb999999999999a")
    a = np.float32(0.1)
    assert list(r) == [np.float64(a) - 0.1, np.float64(a * a) - 0.1]


def test_the_magic_types_float32_arithmetic_as_numba(ip):
    result = ip.run_cell('''%%gpukernel --sm 86 --quiet
import re

import numpy as np
from numba import cuda

@cuda.jit("void(float64[:], float32)")
def issue(r, a):
    r[0] = a - 0.1

r = np.zeros(1)
issue[1, 1](r, 0.1)
''')
    result.raise_error()
    assert ip.user_ns["r"][0] == np.float64(np.float32(0.1)) - 0.1
