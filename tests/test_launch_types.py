"""A launch whose arguments no declared signature accepts is a `LaunchError`
naming the argument, its type, the type expected and the fix, also for a
kernel of one signature, which numba-cuda launches without looking at its
arguments; what numba's dispatch accepts still launches (on the simulator
here, and on the recording stand-in driver for device arrays and pointers)."""

import json
import textwrap

import numpy as np
import pytest
from numba import cuda

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError

from . import fakecuda


def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2


def scaled(r, a, n):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * n


def rows(r, m):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = m[i, 0]


def pick(r, rec):
    r[0] = rec.b


ACT = "void(float32[:], float32[:])"
RECORD = np.dtype([("a", np.int32), ("b", np.float64)], align=True)


@pytest.fixture(scope="module")
def cache():
    return KernelCache()


def declared(cache, func, *sigs, one=True):
    """A kernel of `sigs` on the simulator: one signature not in a list
    (`one`) launches without dispatch in numba, a list dispatches."""
    kernel = Kernel(func, list(sigs), CompileConfig(sm=80), cache, simulate=True, specialized=one and len(sigs) == 1)
    kernel.compile_declared()
    return kernel


def refused(kernel, *args, launch=(1, 4)):
    with pytest.raises(LaunchError) as raised:
        kernel[launch](*args)
    return str(raised.value)


def test_a_float64_array_for_a_float32_parameter_is_refused_with_astype(cache):
    kernel = declared(cache, act, ACT)
    r = np.zeros(4, np.float32)
    shown = refused(kernel, r, np.arange(4.0))
    assert shown == ("act: no signature accepts (float32[::1], float64[::1]); declared: (float32[:], float32[:]): "
                     "argument 2 (x) is float64[::1], not float32[:]; pass x.astype(np.float32)")
    assert not r.any()  # nothing ran


def test_a_list_is_refused_with_asarray(cache):
    shown = refused(declared(cache, act, ACT), np.zeros(4, np.float32), [1.0, 2.0, 3.0, 4.0])
    assert "argument 2 (x) is list of float64, not float32[:]; pass np.asarray(x, dtype=np.float32)" in shown


def test_the_wrong_number_of_dimensions_is_refused(cache):
    shown = refused(declared(cache, act, ACT), np.zeros(4, np.float32), np.zeros((2, 2), np.float32))
    assert "argument 2 (x) is float32[:, ::1], not float32[:]; pass a 1-dimensional array (x has 2 dimensions)" \
        in shown


def test_a_layout_numba_refuses_is_refused_and_one_it_converts_launches(cache):
    contiguous = declared(cache, act, "void(float32[::1], float32[::1])")
    r, x = np.zeros(4, np.float32), np.arange(8, dtype=np.float32)
    shown = refused(contiguous, r, x[::2])
    assert "argument 2 (x) is float32[:], not float32[::1]; pass np.ascontiguousarray(x)" in shown
    m = np.asfortranarray(np.ones((4, 2), np.float32))
    assert "pass np.ascontiguousarray(m)" in refused(declared(cache, rows, "void(float32[:], float32[:, ::1])"),
                                                     r, m)
    rows_any = declared(cache, rows, "void(float32[:], float32[:, :])")  # 'A' takes C and F, as numba's dispatch
    for layout in (m, np.ascontiguousarray(m) * 2):
        rows_any[1, 4](r, layout)
        assert list(r) == [layout[0, 0]] * 4


def test_a_readonly_array_for_a_writable_parameter_is_refused(cache):
    x = np.arange(4, dtype=np.float32)
    x.flags.writeable = False
    shown = refused(declared(cache, act, ACT), x, x.copy())
    assert "argument 1 (r) is readonly float32[::1], not float32[:]; pass a writable array (r.copy())" in shown


def test_a_scalar_for_an_array_and_an_array_for_a_scalar_are_refused(cache):
    assert "argument 2 (x) is int64, not float32[:]; pass a 1-dimensional float32 array, not one value" in \
        refused(declared(cache, act, ACT), np.zeros(4, np.float32), 3)
    kernel = declared(cache, scaled, "void(float64[:], float64, int32)")
    assert "argument 2 (a) is float64[::1], not float64; pass one float64 value, not an array (an element: a[0])" \
        in refused(kernel, np.zeros(4), np.ones(4), 1)


def test_too_few_and_too_many_arguments_are_refused(cache):
    kernel = declared(cache, act, ACT)
    r = np.zeros(4, np.float32)
    assert refused(kernel, r) == "act takes 2 arguments (float32[:], float32[:]), not 1"
    assert refused(kernel, r, r, r) == "act takes 2 arguments (float32[:], float32[:]), not 3"
    listed = declared(cache, act, ACT, one=False)
    assert "(float32[:], float32[:]): takes 2 arguments, not 1" in refused(listed, r)


def test_scalars_numba_converts_launch_converted(cache):
    kernel = declared(cache, scaled, "void(float64[:], float64, int32)")
    r = np.zeros(4)
    for a, n in ((2, 3), (np.float32(2), np.int64(3)), (2.0, np.int8(3)), (True, 3)):
        r[:] = 0
        kernel[1, 4](r, a, n)
        assert list(r) == [float(a) * 3] * 4
    narrow = declared(cache, scaled, "void(float32[:], float32, int32)")
    r32 = np.zeros(4, np.float32)
    narrow[1, 4](r32, 0.1, 1)  # (an unsafe conversion numba's dispatch takes)
    assert r32[0] == np.float32(0.1)
    assert "argument 2 (a) is complex128, not float32; pass a float32" in refused(narrow, r32, 1j, 1)


def test_records_launch_and_another_record_type_is_refused(cache):
    from numba.cuda import types
    from numba.cuda.np.numpy_support import from_dtype

    kernel = declared(cache, pick, (types.float64[:], from_dtype(RECORD)))
    records = np.zeros(1, RECORD)
    records[0]["b"] = 2.5
    r = np.zeros(1)
    kernel[1, 1](r, records[0])
    assert r[0] == 2.5
    other = np.zeros(1, np.dtype([("b", np.float64)]))
    shown = refused(kernel, r, other[0], launch=(1, 1))
    assert f"argument 2 (rec) is {from_dtype(other.dtype)}, not {from_dtype(RECORD)}; pass a record" in shown


def test_a_value_numba_cannot_type_is_a_launch_error_not_a_valueerror(cache):
    shown = refused(declared(cache, act, ACT), np.zeros(4, np.float32), object())
    assert "argument 2 (x) is pyobject, not float32[:]; numba cannot type a object" in shown
    listed = declared(cache, act, ACT, "void(int64[:], int64[:])", one=False)
    assert "numba cannot type a object" in refused(listed, np.zeros(4, np.float32), object())


def test_several_signatures_dispatch_and_a_refusal_says_why_each_one_refused(cache):
    kernel = declared(cache, act, ACT, "void(int64[:], int64[:])")
    assert not kernel.specialized
    ints = np.zeros(4, np.int64)
    kernel[1, 4](ints, np.arange(4))
    assert list(ints) == [0, 2, 4, 6]
    assert kernel.result_for(ints, ints).signature == kernel.declared[1]
    floats = np.zeros(4, np.float32)
    assert kernel.result_for(floats, floats).signature == kernel.declared[0]
    shown = refused(kernel, floats, np.zeros(4, np.complex64))
    assert shown.splitlines() == [
        "act: no signature accepts (float32[::1], complex64[::1]); declared: (float32[:], float32[:]); "
        "(int64[:], int64[:]):",
        "  (float32[:], float32[:]): argument 2 (x) is complex64[::1], not float32[:]; pass x.astype(np.float32)",
        "  (int64[:], int64[:]): argument 1 (r) is float32[::1], not int64[:]; pass r.astype(np.int64)"]


def test_a_lazy_kernel_compiles_for_what_it_is_given(cache):
    lazy = Kernel(act, [], CompileConfig(sm=80), cache, simulate=True)
    r = np.zeros(4)
    lazy[1, 4](r, np.arange(4.0))
    assert list(r) == [0, 2, 4, 6] and len(lazy.results) == 1
    with pytest.raises(ValueError, match="Cannot determine Numba type"):  # numba's, unchanged
        lazy[1, 4](r, object())


def test_a_kernel_with_extensions_leaves_its_arguments_to_them(cache):
    class Wrapped:
        def __init__(self, array):
            self.array = array

    class Unwrap:
        """numba's extension protocol: the launch passes what prepare_args returns."""

        def prepare_args(self, ty, val, **kwargs):
            return ty, (val.array if isinstance(val, Wrapped) else val)

    kernel = Kernel(act, [ACT], CompileConfig(sm=80), cache, {"extensions": [Unwrap()]}, simulate=True,
                    specialized=True)
    kernel.compile_declared()
    r = np.zeros(4, np.float32)
    kernel[1, 4](r, Wrapped(np.arange(4, dtype=np.float32)))
    assert list(r) == [0, 2, 4, 6]


def test_simulated_device_arrays_launch_and_a_wrong_dtype_is_refused(ip):
    from .helpers import cell

    cell(ip, "--sm 80 --simulate --quiet", textwrap.dedent("""
        import numpy as np
        from numba import cuda

        @cuda.jit("void(float32[:], float32[:])")
        def act(r, x):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = x[i] * 2

        r = cuda.device_array(4, np.float32)
        act[1, 4](r, cuda.to_device(np.arange(4, dtype=np.float32)))
        """))
    assert list(ip.user_ns["r"].copy_to_host()) == [0, 2, 4, 6]
    result = ip.run_cell("act[1, 4](r, cuda.to_device(np.arange(4.0)))")
    assert isinstance(result.error_in_exec, LaunchError)
    assert "argument 2 (x) is float64[::1], not float32[:]; pass cuda.to_device(x.copy_to_host().astype(" \
           "np.float32))" in str(result.error_in_exec)


ON_THE_DRIVER = """
import json
import numpy as np
from numba import cuda
import gpucache_ext
from gpucache_ext import LaunchError

def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2

def store(p, n):
    p[0] = n

one = gpucache_ext.jit("void(float32[:], float32[:])")(act)
r = cuda.device_array(8, np.float32)
x = cuda.to_device(np.arange(8, dtype=np.float32))
one[1, 8](r, x)
one[1, 8](r, np.arange(8, dtype=np.float32))
seen = {}
try:
    one[1, 8](r, cuda.to_device(np.arange(8.0)))
except LaunchError as exc:
    seen["float64"] = str(exc)
pointer = gpucache_ext.jit("void(CPointer(float32), int32)")(store)
pointer[1, 1](x.device_ctypes_pointer.value, 8)
try:
    pointer[1, 1](1.5, 8)
except LaunchError as exc:
    seen["pointer"] = str(exc)
print(json.dumps(seen))
"""


@pytest.mark.skipif(bool(fakecuda.skip_reason()), reason=fakecuda.skip_reason() or "")
def test_on_the_stand_in_driver_device_arrays_and_addresses_launch(tmp_path):
    script = tmp_path / "on_the_driver.py"
    script.write_text(ON_THE_DRIVER)
    done = fakecuda.run(script, env={"GPUCACHE_DIR": str(tmp_path / "cache"), "GPUCACHE_REDIS_URL": "off"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "argument 2 (x) is float64[::1], not float32[:]; pass cuda.to_device(x.copy_to_host().astype(" \
           "np.float32))" in seen["float64"]
    assert "argument 1 (p) is float64, not float32*; pass the device address as an int" in seen["pointer"]
    launches = [c for c in done.calls if c["call"].startswith("cuLaunchKernel")]
    assert len(launches) == 3  # two of act, one of store: nothing launched for a refused one


# ---------------------------------------------------------------------------
# numba's exception types: a cell that catches the type numba raises for a
# launch catches ours too (ours is a `LaunchError` and of numba's type)

def _raised(launch):
    try:
        launch()
    except Exception as exc:  # noqa: BLE001  (the type is what is compared)
        return exc
    raise AssertionError("the launch should have failed")


CONFIGURATIONS = {
    "no configuration": lambda k, r: k(r),
    "one number": lambda k, r: k[1](r),
    "five items": lambda k, r: k[1, 2, 3, 4, 5](r),
    "a string": lambda k, r: k["x"](r),
}


@pytest.mark.parametrize("case", sorted(CONFIGURATIONS))
def test_a_launch_configuration_error_is_of_numbas_type(case):
    numbas = _raised(lambda: CONFIGURATIONS[case](cuda.jit(act), np.zeros(4, np.float32)))
    kernel = Kernel(act, [ACT], CompileConfig(sm=80), KernelCache(), simulate=True)
    ours = _raised(lambda: CONFIGURATIONS[case](kernel, np.zeros(4, np.float32)))
    assert isinstance(ours, LaunchError)
    assert isinstance(ours, type(numbas)), (type(ours).__mro__, type(numbas))
    assert not isinstance(numbas, ValueError) or not isinstance(ours, TypeError) or isinstance(numbas, TypeError)


def test_a_list_launch_as_numba_takes_it():
    """numba takes any sequence of 2 to 4 items as a configuration (``k[[1, 4]]``)."""
    kernel = Kernel(act, [ACT], CompileConfig(sm=80), KernelCache(), simulate=True)
    r = np.zeros(4, np.float32)
    kernel[[1, 4]](r, np.arange(4, dtype=np.float32))
    assert list(r) == [0, 2, 4, 6]


NUMBAS_LAUNCH_ERRORS = """
import json, sys
import numpy as np
from numba import cuda
import gpucache_ext

def act(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] * 2

SIGS = ["void(float32[:], float32[:])", "void(int32[:], int32[:])"]
r, x = np.zeros(4, np.float32), np.arange(4, dtype=np.float32)
CASES = {
    "no configuration": lambda k: k(r, x),
    "one number": lambda k: k[1](r, x),
    "five items": lambda k: k[1, 2, 3, 4, 5](r, x),
    "no signature takes float64": lambda k: k[1, 4](r, x.astype(np.float64)),
    "one argument": lambda k: k[1, 4](r),
    "mixed dtypes": lambda k: k[1, 4](r, x.astype(np.int32)),
}
seen = {}
for name, launch in CASES.items():
    for who, decorate in (("numba", cuda.jit), ("ours", gpucache_ext.jit)):
        try:
            launch(decorate(SIGS)(act))
            seen[name, who] = None
        except Exception as exc:
            seen[name, who] = [c.__module__ + "." + c.__qualname__ for c in type(exc).__mro__]
print(json.dumps({f"{n}|{w}": v for (n, w), v in seen.items()}))
"""


@pytest.mark.slow
@pytest.mark.skipif(bool(fakecuda.skip_reason()), reason=fakecuda.skip_reason() or "")
def test_numbas_launch_errors_and_ours_are_of_numbas_types_on_the_driver(tmp_path):
    script = tmp_path / "launch_errors.py"
    script.write_text(NUMBAS_LAUNCH_ERRORS)
    done = fakecuda.run(script, cc=("8.0",), env={"GPUCACHE_DIR": str(tmp_path / "cache"),
                                                  "GPUCACHE_REDIS_URL": "off", "GPUCACHE_SM": "80"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    cases = {key.split("|")[0] for key in seen}
    assert len(cases) == 6
    for case in cases:
        numbas, ours = seen[f"{case}|numba"], seen[f"{case}|ours"]
        assert numbas is not None, case
        assert ours is not None and numbas[0] in ours, (case, numbas, ours)
        assert "gpucache_ext.backends.numba_cuda.launch.compiled.LaunchError" in ours, (case, ours)
