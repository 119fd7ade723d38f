"""Adversarial round 4 (issue 32): edit sequences in classes earlier rounds did not list.

Generated code (exec of a template, the same template in two namespaces, a
function rebuilt from a code object with other constants or other globals),
functions rebuilt by decorators of the user's own (``functools.wraps``),
values equal to Python that lower apart (numpy scalars of other dtypes, a
signed zero inside a tuple, dtypes and numba types held as globals, arrays
with the same bytes under another dtype or shape), enums whose members are
equal or aliases, arrays reached through a tuple, a closure or
``cuda.const.array_like``, modules changed through ``setattr``, a PEP 562
``__getattr__`` and a reload the bytecode cache cannot see, device functions
rebound or changed through ``__defaults__`` and ``__code__``, kernel
factories, ``nonlocal`` rebinding, a name falling back to builtins, two
threads compiling after an edit, a library's functions swapped or reloaded
while a kernel compiles, and the round's classes on a disk tier shared by
two processes.

Each compiles the edit sequence through one long-lived cache and must equal
a compile of the same final state in a brand-new `KernelCache` (and, where
the edit changes the code, differ from the first compile); one case also
asks a new process with its own GPUCACHE_DIR.  Cases that found stale
results are not here (see the issue's report).
"""

from __future__ import annotations

import builtins
import importlib
import os
import struct
import sys
import threading
import types

import numpy as np
import pytest
from numba.cuda import types as nbtypes

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

from .files import write_source
from .helpers import READ_K, artifacts, assert_fresh, cell, fresh, notebook_namespace, reading, run_cell, run_python

SM86 = CompileConfig(sm=86)
F32 = "void(float32[:])"
F64 = "void(float64[:])"
I64 = "void(int64[:])"


def check(cache, kernel, sig=F64, config=SM86, before=None):
    """The cache's compile equals a fresh one (and differs from `before`'s cubin)."""
    return assert_fresh(cache, kernel, sig, config, differs_from=before)


def same_again(cache, kernel, earlier, sig=F64, config=SM86):
    """Back to an earlier state: the earlier artifacts, which a fresh compile gives too."""
    again = cache.compile(kernel, sig, config)
    assert artifacts(again) == artifacts(earlier) == fresh(kernel, sig, config)


# ---------------------------------------------------------------------------
# Generated code

TEMPLATE = "def kernel(r):\n    r[0] = r[0] * {k}\n"


def from_template(k, filename="<string>"):
    ns = notebook_namespace()
    # (dont_inherit: not this module's `from __future__ import annotations`, a code flag the token keys)
    exec(compile(TEMPLATE.format(k=k), filename, "exec", dont_inherit=True), ns)
    return ns["kernel"]


@pytest.mark.parametrize("lineinfo", [False, True])
def test_a_kernel_generated_from_a_template_whose_constant_changes(lineinfo):
    """Same file name (<string>), name and line: only the constant differs."""
    config = SM86.replace(lineinfo=lineinfo)
    cache = KernelCache()
    before = cache.compile(from_template(2.0), F64, config)
    check(cache, from_template(3.0), config=config, before=before)
    same_again(cache, from_template(2.0), before, config=config)


def test_the_same_template_text_exec_d_in_two_namespaces():
    cache = KernelCache()
    first, second = notebook_namespace(), notebook_namespace()
    first["K"], second["K"] = 2.0, 3.0
    for ns in (first, second):
        exec(compile(READ_K, "<string>", "exec"), ns)
    before = cache.compile(first["kernel"], F64, SM86)
    check(cache, second["kernel"], before=before)
    same_again(cache, first["kernel"], before)


def test_a_function_built_from_a_code_object_with_other_constants():
    cache = KernelCache()
    _, kernel = reading("def kernel(r):\n    r[0] = 2.5\n")
    before = cache.compile(kernel, F64, SM86)
    code = kernel.__code__
    consts = tuple(3.5 if c == 2.5 else c for c in code.co_consts)
    other = types.FunctionType(code.replace(co_consts=consts), kernel.__globals__, "kernel")
    check(cache, other, before=before)
    same_again(cache, kernel, before)


def test_a_function_built_from_the_same_code_with_other_globals():
    cache = KernelCache()
    ns, kernel = reading(READ_K, K=2.0)
    before = cache.compile(kernel, F64, SM86)
    other = types.FunctionType(kernel.__code__, {**ns, "K": 3.0}, "kernel")
    check(cache, other, before=before)
    same_again(cache, kernel, before)


def with_constant(func, old, new):
    code = func.__code__
    consts = tuple(new if type(c) is type(old) and c == old else c for c in code.co_consts)
    assert any(c is new for c in consts)
    return types.FunctionType(code.replace(co_consts=consts), func.__globals__, func.__name__)


def test_code_constants_that_are_numpy_nans_of_other_payloads():
    """repr() shows both as nan: the constant must be keyed by its bits."""
    _, kernel = reading("def kernel(r):\n    r[0] = 2.5\n")
    one, two = (np.frombuffer(struct.pack("<Q", bits), np.float64)[0] for bits in (0x7FF8000000000001,
                                                                                  0x7FF8000000000002))
    assert repr(one) == repr(two)
    cache = KernelCache()
    before = cache.compile(with_constant(kernel, 2.5, one), F64, SM86)
    check(cache, with_constant(kernel, 2.5, two), before=before)


def test_code_constants_that_are_float32_nans_of_other_payloads():
    """np.float32 is no float subclass: its repr is 'np.float32(nan)' for every payload."""
    _, kernel = reading("def kernel(r):\n    r[0] = 2.5\n")
    one, two = (np.frombuffer(struct.pack("<I", bits), np.float32)[0] for bits in (0x7FC00001, 0x7FC00002))
    assert repr(one) == repr(two)
    cache = KernelCache()
    before = cache.compile(with_constant(kernel, 2.5, one), F64, SM86)
    check(cache, with_constant(kernel, 2.5, two), before=before)


def test_a_code_constant_that_is_a_large_array_edited_past_its_repr():
    """A generator puts an array into the code's constants: repr() elides
    the middle of a 2,000-element array, its bytes do not."""
    _, reader = reading("def kernel(r):\n    t = (1.0, 2.0, 3.0)\n    r[0] = t[1000]\n")
    table = np.arange(2000.0)
    edited = table.copy()
    edited[1000] = 99.0
    assert repr(table) == repr(edited)
    cache = KernelCache()
    before = cache.compile(with_constant(reader, (1.0, 2.0, 3.0), table), F64, SM86)
    check(cache, with_constant(reader, (1.0, 2.0, 3.0), edited), before=before)


def test_a_code_constant_that_is_a_numpy_scalar_of_another_dtype():
    """2.5 and np.float64(2.5) are equal; float32 * float64 widens the product."""
    _, kernel = reading("def kernel(r):\n    r[0] = r[0] * 2.5\n")
    cache = KernelCache()
    before = cache.compile(with_constant(kernel, 2.5, np.float32(2.5)), F32, SM86)
    check(cache, with_constant(kernel, 2.5, np.float64(2.5)), sig=F32, before=before)


# ---------------------------------------------------------------------------
# Functions rebuilt by the user's own decorators

SCALED = """
import functools

def scaled(k):
    def decorate(f):
        inner = cuda.jit(device=True)(f)
        @functools.wraps(f)
        def wrapper(x):
            return inner(x) * k
        return cuda.jit(device=True)(wrapper)
    return decorate
"""


def test_a_decorator_closing_over_a_value_applied_again_with_another():
    """functools.wraps gives both wrappers base's name, qualname and module."""
    ns, _ = reading(SCALED, name="scaled")

    def rebuild(k):
        run_cell(ns, f"def base(x):\n    return x + 1.0\n\nF = scaled({k})(base)\n\n"
                     "def kernel(r):\n    r[0] = F(r[0])\n")
        return ns["kernel"]

    cache = KernelCache()
    before = cache.compile(rebuild(2.0), F64, SM86)
    assert ns["F"].py_func.__qualname__ == "base"
    check(cache, rebuild(3.0), before=before)
    same_again(cache, rebuild(2.0), before)


def test_functools_wraps_of_a_dispatcher_copies_its_py_func():
    """wraps(dispatcher) copies the dispatcher's __dict__ (its py_func) onto
    the wrapper, so numba's jit compiles the wrapped function: whatever k is,
    the cache must say what a fresh compile says."""
    ns, _ = reading("import functools\n\ndef scaled(k):\n    def decorate(f):\n        @functools.wraps(f)\n"
                    "        def wrapper(x):\n            return f(x) * k\n"
                    "        return cuda.jit(device=True)(wrapper)\n"
                    "    return decorate\n", name="scaled")
    cache = KernelCache()
    for k in (2.0, 3.0):
        run_cell(ns, f"@cuda.jit(device=True)\ndef base(x):\n    return x + 1.0\n\nF = scaled({k})(base)\n\n"
                     "def kernel(r):\n    r[0] = F(r[0])\n")
        check(cache, ns["kernel"])


# ---------------------------------------------------------------------------
# Equal to Python, apart on the GPU


@pytest.mark.parametrize("first, second, sig, body", [
    (np.float32(1.5), 1.5, F32, "r[0] = r[0] * K"),  # float32 product vs a float64 one
    (np.uint64(3), np.int64(3), I64, "r[0] = r[0] + K"),  # uint64 + int64 is float64 in numba
    (np.int32(7), 7, I64, "r[0] = r[0] // K"),
    (np.bool_(True), True, I64, "r[0] = K"),
    ((0.0, 1.0), (-0.0, 1.0), F64, "r[0] = K[0]"),  # a signed zero inside a tuple
    ((1, 2.0), (1.0, 2.0), F64, "r[0] = K[0] / 3"),  # a heterogeneous tuple vs a uniform one
], ids=["f32-vs-float", "u64-vs-i64", "i32-vs-int", "np.bool_-vs-bool", "tuple-signed-zero", "tuple-int-vs-float"])
def test_globals_equal_to_python_that_type_apart(first, second, sig, body):
    assert first == second
    cache = KernelCache()
    ns, kernel = reading(f"def kernel(r):\n    {body}\n", K=first)
    before = cache.compile(kernel, sig, SM86)
    ns["K"] = second
    check(cache, kernel, sig=sig)
    ns["K"] = first
    same_again(cache, kernel, before, sig=sig)


def test_a_numpy_dtype_held_as_a_global():
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    a = cuda.local.array(4, DT)\n    a[0] = r[0] / 3\n    r[0] = a[0]\n",
                         DT=np.float32)
    before = cache.compile(kernel, F64, SM86)
    ns["DT"] = np.float64
    check(cache, kernel, before=before)


def test_a_numba_type_held_as_a_global():
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = DT(r[0] / 3)\n", DT=nbtypes.float32)
    before = cache.compile(kernel, F64, SM86)
    ns["DT"] = nbtypes.float64
    check(cache, kernel, before=before)


def test_a_global_array_viewed_as_another_dtype():
    """Same buffer, same bytes: other element type."""
    cache = KernelCache()
    base = np.arange(4, dtype=np.int64)
    ns, kernel = reading("def kernel(r):\n    r[0] = A[1]\n", A=base)
    before = cache.compile(kernel, F64, SM86)
    ns["A"] = base.view(np.float64)
    check(cache, kernel, before=before)


def test_a_global_array_reshaped_over_the_same_bytes():
    cache = KernelCache()
    base = np.arange(6.0)
    ns, kernel = reading("def kernel(r):\n    r[0] = A.shape[0] + A[1, 0]\n", A=base.reshape(2, 3))
    before = cache.compile(kernel, F64, SM86)
    ns["A"] = base.reshape(3, 2)
    check(cache, kernel, before=before)


# ---------------------------------------------------------------------------
# Enums whose members are equal


def test_an_enum_member_whose_value_becomes_an_equal_float():
    cache = KernelCache()
    source = "import enum\nclass Mode(enum.Enum):\n    FAST = {v}\n\ndef kernel(r):\n    r[0] = Mode.FAST.value // 3\n"
    _, kernel = reading(source.format(v="7"))
    cache.compile(kernel, F64, SM86)
    _, kernel = reading(source.format(v="7.0"))
    check(cache, kernel)


def test_an_alias_member_that_becomes_a_member_of_its_own():
    cache = KernelCache()
    source = "import enum\nclass Mode(enum.IntEnum):\n    A = 1\n    B = {b}\n\ndef kernel(r):\n    r[0] = Mode.B\n"
    _, kernel = reading(source.format(b="1"))  # B is A
    before = cache.compile(kernel, I64, SM86)
    _, kernel = reading(source.format(b="2"))
    check(cache, kernel, sig=I64, before=before)


def test_equal_members_of_two_int_enums():
    """A.X == B.X (both IntEnum 1), but they are other types to numba."""
    cache = KernelCache()
    ns, kernel = reading("import enum\nclass A(enum.IntEnum):\n    X = 1\nclass B(enum.IntEnum):\n    X = 1\n"
                         "K = A.X\n\ndef kernel(r):\n    r[0] = K == A.X\n")
    before = cache.compile(kernel, I64, SM86)
    ns["K"] = ns["B"].X
    check(cache, kernel, sig=I64)
    ns["K"] = ns["A"].X
    same_again(cache, kernel, before, sig=I64)


# ---------------------------------------------------------------------------
# Arrays reached indirectly, written in place


def test_an_array_inside_a_global_tuple_written_in_place():
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = T[0][1] + T[1]\n", T=(np.array([1.0, 2.0, 3.0]), 4.0))
    before = cache.compile(kernel, F64, SM86)
    ns["T"][0][1] = 7.0
    check(cache, kernel, before=before)


def test_a_const_array_like_of_a_global_written_in_place():
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    c = cuda.const.array_like(A)\n    r[0] = c[1]\n",
                         A=np.array([1.0, 2.0, 3.0]))
    before = cache.compile(kernel, F64, SM86)
    ns["A"][1] = 7.0
    check(cache, kernel, before=before)


def test_an_array_captured_by_a_closure_written_in_place():
    cache = KernelCache()
    ns, _ = reading("import numpy as np\n\ndef make():\n    A = np.array([1.0, 2.0])\n"
                    "    def kernel(r):\n        r[0] = A[1]\n    return kernel, A\n", name="make")
    kernel, array = ns["make"]()
    before = cache.compile(kernel, F64, SM86)
    array[1] = 5.0
    check(cache, kernel, before=before)


# ---------------------------------------------------------------------------
# Modules


def test_a_submodule_rebound_with_setattr_on_its_package(user_package):
    write_source(user_package / "rpkg" / "__init__.py", "from . import a, b\n")
    write_source(user_package / "rpkg" / "a.py", "K = 2.0\n")
    write_source(user_package / "rpkg" / "b.py", "K = 3.0\n")
    import rpkg

    cache = KernelCache()
    _, kernel = reading("import rpkg\n\ndef kernel(r):\n    r[0] = rpkg.a.K\n")
    before = cache.compile(kernel, F64, SM86)
    original = rpkg.a
    rpkg.a = rpkg.b
    check(cache, kernel, before=before)
    rpkg.a = original
    same_again(cache, kernel, before)


def test_a_module_attribute_served_by_a_module_getattr(user_package):
    """PEP 562: the value comes from a function of the module's state."""
    write_source(user_package / "lazyk.py", "STATE = [2.0]\n\ndef __getattr__(name):\n    if name == 'K':\n"
                                            "        return STATE[0]\n    raise AttributeError(name)\n")
    import lazyk

    cache = KernelCache()
    _, kernel = reading("import lazyk\n\ndef kernel(r):\n    r[0] = lazyk.K\n")
    before = cache.compile(kernel, F64, SM86)
    lazyk.STATE[0] = 3.0
    check(cache, kernel, before=before)


def test_a_library_module_alias_rebound_to_a_user_module(user_package):
    """``m`` was math; now a user module with a device function of the same name."""
    import math

    write_source(user_package / "mymath.py", "from numba import cuda\n\n@cuda.jit(device=True)\ndef sqrt(x):\n"
                                             "    return x * 0.5\n")
    import mymath

    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = m.sqrt(r[0])\n", m=math)
    before = cache.compile(kernel, F64, SM86)
    ns["m"] = mymath
    check(cache, kernel, before=before)
    ns["m"] = math
    same_again(cache, kernel, before)


@pytest.mark.parametrize("lineinfo", [False, True])
def test_a_reload_the_bytecode_cache_does_not_see(user_package, lineinfo):
    """The file keeps its size and mtime: reload() runs the stale .pyc, while
    numba-cuda (under lineinfo) parses the new text for the def line.  The
    cache must agree with a fresh compile of what is live."""
    path = user_package / f"samesize{int(lineinfo)}.py"
    old = "from numba import cuda\nK = 3.0\n#\n@cuda.jit(device=True)\ndef d(x):\n    return x * K\n"
    new = "from numba import cuda\nK = 5.0\n@cuda.jit(device=True)\n#\ndef d(x):\n    return x * K\n"
    assert len(old) == len(new)
    path.write_text(old)
    stat = path.stat()
    module = importlib.import_module(path.stem)
    config = SM86.replace(lineinfo=lineinfo)
    cache = KernelCache()
    _, kernel = reading(f"import {path.stem}\n\ndef kernel(r):\n    r[0] = {path.stem}.d(r[0])\n")
    cache.compile(kernel, F64, config)
    path.write_text(new)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    importlib.reload(module)
    check(cache, kernel, config=config)


# ---------------------------------------------------------------------------
# Device functions changed in place or rebound


def test_a_device_function_redefined_by_rerunning_its_cell_with_another_body():
    cache = KernelCache()
    ns = notebook_namespace()
    run_cell(ns, "@cuda.jit(device=True)\ndef f(x):\n    return x * 2.0\n", filename="<cell-1>")
    run_cell(ns, "def kernel(r):\n    r[0] = f(r[0])\n", filename="<cell-2>")
    before = cache.compile(ns["kernel"], F64, SM86)
    run_cell(ns, "@cuda.jit(device=True)\ndef f(x):\n    return x * 3.0\n", filename="<cell-1>")
    check(cache, ns["kernel"], before=before)


def test_a_device_functions_defaults_reassigned_between_compiles():
    cache = KernelCache()
    ns, kernel = reading("@cuda.jit(device=True)\ndef h(x, k=2.0):\n    return x * k\n\n"
                         "def kernel(r):\n    r[0] = h(r[0])\n")
    before = cache.compile(kernel, F64, SM86)
    ns["h"].py_func.__defaults__ = (3.0,)
    check(cache, kernel, before=before)
    ns["h"].py_func.__defaults__ = (2.0,)
    same_again(cache, kernel, before)


def test_a_device_functions_code_replaced_by_one_reading_a_global():
    cache = KernelCache()
    ns, kernel = reading("@cuda.jit(device=True)\ndef h(x):\n    return x * 2.0\n\n"
                         "def kernel(r):\n    r[0] = h(r[0])\n")
    other, _ = reading("def h(x):\n    return x * G\n", name="h")
    before = cache.compile(kernel, F64, SM86)
    ns["h"].py_func.__code__ = other["h"].__code__
    ns["G"] = 5.0  # read through the new code, in the device function's own globals
    after = check(cache, kernel, before=before)
    ns["G"] = 6.0
    check(cache, kernel, before=after)


def test_the_kernels_own_code_replaced_between_compiles():
    cache = KernelCache()
    _, kernel = reading("def kernel(r):\n    r[0] = 2.0\n")
    before = cache.compile(kernel, F64, SM86)
    original = kernel.__code__
    kernel.__code__ = reading("def kernel(r):\n    r[0] = 3.0\n")[1].__code__
    check(cache, kernel, before=before)
    kernel.__code__ = original
    same_again(cache, kernel, before)


def test_a_device_function_made_by_a_factory_in_a_library_file():
    """A device function (cuda.jit) closing over a value, defined under an
    installed package's file name: walked like the user's own."""
    ns = {"__name__": "numpy._round4_factory"}
    exec(compile("from numba import cuda\n\ndef make(k):\n    @cuda.jit(device=True)\n    def scale(x):\n"
                 "        return x * k\n    return scale\n", np.__file__, "exec"), ns)
    cache = KernelCache()
    _, k2 = reading("def kernel(r):\n    r[0] = S(r[0])\n", S=ns["make"](2.0))
    _, k3 = reading("def kernel(r):\n    r[0] = S(r[0])\n", S=ns["make"](3.0))
    before = cache.compile(k2, F64, SM86)
    check(cache, k3, before=before)
    same_again(cache, k2, before)


# ---------------------------------------------------------------------------
# Closures


def test_a_kernel_factory_called_twice_each_kernel_stays_its_own():
    cache = KernelCache()
    ns, _ = reading("def make(k):\n    def kernel(r):\n        r[0] = r[0] * k\n    return kernel\n", name="make")
    two, three = ns["make"](2.0), ns["make"](3.0)
    first = cache.compile(two, F64, SM86)
    second = check(cache, three, before=first)
    assert artifacts(cache.compile(two, F64, SM86)) == artifacts(first) == fresh(two, F64, SM86)
    assert artifacts(cache.compile(three, F64, SM86)) == artifacts(second)


def test_a_closure_device_function_rebound_with_nonlocal():
    cache = KernelCache()
    ns, _ = reading("@cuda.jit(device=True)\ndef two(x):\n    return x * 2.0\n"
                    "@cuda.jit(device=True)\ndef three(x):\n    return x * 3.0\n"
                    "def make():\n    f = two\n    def kernel(r):\n        r[0] = f(r[0])\n"
                    "    def use(g):\n        nonlocal f\n        f = g\n    return kernel, use\n", name="make")
    kernel, use = ns["make"]()
    before = cache.compile(kernel, F64, SM86)
    use(ns["three"])
    check(cache, kernel, before=before)
    use(ns["two"])
    same_again(cache, kernel, before)


# ---------------------------------------------------------------------------
# Name resolution and process state


@pytest.fixture
def builtin_r4():
    builtins.R4SCALE = 2.5
    yield
    del builtins.R4SCALE


def test_a_global_deleted_so_the_name_falls_back_to_builtins(builtin_r4):
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = R4SCALE\n", R4SCALE=4.0)
    before = cache.compile(kernel, F64, SM86)
    del ns["R4SCALE"]
    check(cache, kernel, before=before)


def test_two_threads_compiling_after_an_edit():
    cache = KernelCache()
    ns, kernel = reading(READ_K, K=2.0)
    before = cache.compile(kernel, F64, SM86)
    ns["K"] = 3.0
    configs = (SM86, SM86.replace(launch_bounds=(128,)))  # one typing entry, two lowerings
    results, errors = [None, None], []
    barrier = threading.Barrier(2)

    def work(i):
        try:
            barrier.wait()
            results[i] = cache.compile(kernel, F64, configs[i])
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for result, config in zip(results, configs):
        assert artifacts(result) == fresh(kernel, F64, config)
    assert results[0].ptx != before.ptx


TEMPLATE_CELL = '''
from numba import cuda
K = {k}
exec("def body(r):\\n    r[0] = r[0] * K\\n")
kernel = cuda.jit("void(float64[:])")(body)
'''


def test_a_magic_cell_that_generates_its_kernel_with_exec_rerun_with_another_constant(ip):
    first = cell(ip, "--sm 86", TEMPLATE_CELL.format(k=2.0), kernel="kernel", quiet=True)
    second = cell(ip, "--sm 86", TEMPLATE_CELL.format(k=3.0), kernel="kernel", quiet=True)
    assert second.cubin != first.cubin
    assert artifacts(second) == fresh(ip.user_ns["kernel"].py_func, F64, SM86)


GENERATED_SCRIPT = """
import json, sys
from gpucache_ext import CompileConfig, KernelCache

ns = {"__name__": "__main__"}
exec(compile("def kernel(r):\\n    r[0] = r[0] * " + sys.argv[2] + "\\n", "<string>", "exec"), ns)
res = KernelCache(directory=sys.argv[1]).compile(ns["kernel"], "void(float64[:])", CompileConfig(sm=86))
print(json.dumps({"hit": res.hit, "ptx": res.ptx}))
"""


@pytest.mark.slow
def test_generated_kernels_on_a_disk_tier_agree_with_a_new_process(tmp_path):
    """In-process: a disk-tier cache sees the template's constant change; a
    new process on its own empty GPUCACHE_DIR compiles the final state alike."""
    cache = KernelCache(directory=tmp_path / "shared")
    cache.compile(from_template(2.0), F64, SM86)
    here = cache.compile(from_template(3.0), F64, SM86)
    there = run_python(GENERATED_SCRIPT, tmp_path / "own", "3.0", json_line=True,
                       env={"GPUCACHE_DIR": str(tmp_path / "own")})
    assert not there["hit"] and here.ptx == there["ptx"]
    again = run_python(GENERATED_SCRIPT, tmp_path / "shared", "2.0", json_line=True)
    assert again["hit"] and again["ptx"] != here.ptx


# ---------------------------------------------------------------------------
# What is refused or fails as in numba


def test_an_instance_attribute_read_by_a_kernel_is_refused_with_the_fix():
    _, kernel = reading("class Cfg:\n    def __init__(self):\n        self.k = 2.0\n\nC = Cfg()\n\n"
                        "def kernel(r):\n    r[0] = C.k\n")
    with pytest.raises(UnsupportedKernelError, match=r"reads C of type Cfg.*pass it to the kernel as an argument"):
        KernelCache().compile(kernel, F64, SM86)


# ---------------------------------------------------------------------------
# A library's functions made at run time (a factory's closure, a template):
# the same place and version, other code


FACTORIES = {
    "njit closure": "import numba\n\ndef make(k):\n    @numba.njit\n    def scale(x):\n        return x * k\n"
                    "    return scale\n",
    "njit from a template": "import numba\n\ndef make(k):\n    ns = {'numba': numba}\n"
                            "    source = f'@numba.njit\\ndef scale(x):\\n    return x * {k}\\n'\n"
                            "    exec(compile(source, __file__, 'exec'), ns)\n"
                            "    return ns['scale']\n",
}
USES_S = "def kernel(r):\n    r[0] = S(r[0])\n"


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_a_librarys_function_factory_called_with_another_value(site_library, kind):
    name = "scalelib_r4_" + kind.replace(" ", "_")
    write_source(site_library / name / "__init__.py", FACTORIES[kind])
    library = importlib.import_module(name)
    try:
        cache = KernelCache()
        _, two = reading(USES_S, S=library.make(2.0))
        _, three = reading(USES_S, S=library.make(3.0))
        before = cache.compile(two, F64, SM86)
        check(cache, three, before=before)
    finally:
        sys.modules.pop(name, None)  # (only the library's own module: numba's stay loaded)


@pytest.mark.slow  # an interpreter (the quick suite's sample: a library's factories, above)
def test_a_register_jitable_function_generated_under_a_library_file_name():
    # (in a process of its own: numba's tables keep the registration, which, made by code under a
    # library's file name at run time, is keyed by its code in every later typing token)
    same = run_python("""
        import numpy as np
        from numba.extending import register_jitable
        from gpucache_ext import CompileConfig, KernelCache
        from tests.helpers import artifacts, fresh, reading

        def make(k):
            ns = {"register_jitable": register_jitable, "__name__": "numpy._generated"}
            exec(compile(f"@register_jitable\\ndef scale(x):\\n    return x * {k}\\n", np.__file__, "exec"), ns)
            return ns["scale"]

        cache, sig, config = KernelCache(), "void(float64[:])", CompileConfig(sm=86)
        _, two = reading("def kernel(r):\\n    r[0] = S(r[0])\\n", S=make(2.0))
        _, three = reading("def kernel(r):\\n    r[0] = S(r[0])\\n", S=make(3.0))
        before = cache.compile(two, sig, config)
        after = cache.compile(three, sig, config)
        print(artifacts(after) == fresh(three, sig, config) and after.cubin != before.cubin)
        """)
    assert same.strip().splitlines()[-1] == "True"


# ---------------------------------------------------------------------------
# A library's code replaced while a kernel compiles (another thread, a
# reload): numba reads a library module's attributes live as it types, so
# what it reads must be what was hashed, or the compile starts again

SWAPLIB = "import numba\n\n@numba.njit\ndef f(x):\n    return x * {f}\n\n@numba.njit\ndef g(x):\n    return x * {g}\n"
USES_SWAPLIB = "import {name}\n\ndef kernel(r):\n    r[0] = {name}.f(r[0]) * 10.0 + {name}.g(r[0])\n"


@pytest.fixture
def swaplib(site_library, request):
    name = "swaplib_r4_" + request.node.name.split("[")[0][-12:]
    write_source(site_library / name / "__init__.py", SWAPLIB.format(f=2.0, g=3.0))
    library = importlib.import_module(name)
    _, kernel = reading(USES_SWAPLIB.format(name=name))
    yield site_library / name / "__init__.py", library, kernel
    sys.modules.pop(name, None)


def test_a_librarys_functions_swapped_while_the_kernel_is_typed(swaplib, change_while_typing):
    _, library, kernel = swaplib
    f, g = library.f, library.g

    def swap():
        library.f, library.g = library.g, library.f

    cache = KernelCache()
    change_while_typing(swap)
    during = cache.compile(kernel, F64, SM86)
    assert artifacts(during) == fresh(kernel, F64, SM86)  # compiled again from what is there now
    library.f, library.g = f, g
    check(cache, kernel, before=during)  # and filed under it: the state before is not that entry
    swap()
    assert cache.compile(kernel, F64, SM86).hit


def test_a_library_reloaded_while_the_kernel_is_typed(swaplib, change_while_typing):
    path, library, kernel = swaplib
    cache = KernelCache()

    def reload_edited():
        write_source(path, SWAPLIB.format(f=5.0, g=3.0))
        importlib.reload(library)

    change_while_typing(reload_edited)
    during = cache.compile(kernel, F64, SM86)
    assert artifacts(during) == fresh(kernel, F64, SM86)
    write_source(path, SWAPLIB.format(f=2.0, g=3.0))
    importlib.reload(library)
    check(cache, kernel, before=during)


def test_a_library_function_reassigned_between_compiles_is_keyed_by_its_code(swaplib):
    """``lib.f = other`` in a cell: read through the module as through a global, by its code."""
    _, library, kernel = swaplib
    cache = KernelCache()
    before = cache.compile(kernel, F64, SM86)
    library.f = library.g
    check(cache, kernel, before=before)


# ---------------------------------------------------------------------------
# The round's classes against a disk tier, across processes: what one process
# filed, another reads back as it would compile it itself

SWEEP_SCRIPT = r'''
import hashlib, json, sys, types
import numpy as np
from numba import cuda
from gpucache_ext import CompileConfig, KernelCache

sys.path.insert(0, sys.argv[2])
import sweeplib_r4 as lib

SIG, SM86 = "void(float64[:])", CompileConfig(sm=86)


def cell(source, **values):
    ns = {"cuda": cuda, "np": np, "lib": lib, "__name__": "__main__", **values}
    exec(compile(source, "<cell>", "exec", dont_inherit=True), ns)
    return ns["kernel"]


def kernels(state):
    b = state == "b"
    k = 3.0 if b else 2.0
    template = cell(f"def kernel(r):\n    r[0] = r[0] * {k}\n")
    lib.f = lib.make(k)  # a library attribute reassigned in memory, read through the module
    through_module = cell("def kernel(r):\n    r[0] = lib.f(r[0])\n")
    factory = cell("def kernel(r):\n    r[0] = S(r[0])\n", S=lib.make(k))
    scalar = cell("def kernel(r):\n    r[0] = r[0] / X\n", X=(np.float32 if b else np.float64)(3.0))
    signed = cell("def kernel(r):\n    r[0] = 1.0 / T[0]\n", T=(-0.0 if b else 0.0, 1.0))
    same_bytes = np.arange(2, dtype=np.int64)
    array = cell("def kernel(r):\n    r[0] = A[1]\n", A=same_bytes.view(np.float64) if b else same_bytes)
    base = cell("def kernel(r):\n    r[0] = r[0] + 7.0\n")
    code = base.__code__.replace(co_consts=tuple(k if c == 7.0 else c for c in base.__code__.co_consts))
    rebuilt = types.FunctionType(code, base.__globals__, "kernel")
    return {"template": template, "through module": through_module, "factory": factory, "scalar": scalar,
            "signed zero": signed, "same bytes": array, "rebuilt code": rebuilt}


def digest(result):
    return hashlib.sha256(result.ptx.encode() + result.cubin).hexdigest()


shared = KernelCache(directory=sys.argv[1])
out = {}
for state in sys.argv[3:]:
    for name, kernel in kernels(state).items():
        got = shared.compile(kernel, SIG, SM86)
        own = KernelCache().compile(kernel, SIG, SM86)  # (memory only: this process's own compile)
        out[f"{name} {state}"] = [got.hit, digest(got), digest(own)]
print(json.dumps(out))
'''
SWEEPLIB = "import numba\n\ndef make(k):\n    @numba.njit\n    def scale(x):\n        return x * k\n" \
           "    return scale\n\nf = make(1.0)\n"


@pytest.mark.slow
def test_the_rounds_classes_on_a_shared_disk_tier_agree_across_processes(tmp_path):
    """One process compiles each case's two states into a disk folder; a new
    process on that folder gets every state back as a hit equal to its own
    compile, and the two states apart."""
    site = tmp_path / "site-packages"
    write_source(site / "sweeplib_r4.py", SWEEPLIB)
    shared = tmp_path / "shared"
    first = run_python(SWEEP_SCRIPT, shared, site, "a", "b", json_line=True)
    second = run_python(SWEEP_SCRIPT, shared, site, "b", "a", json_line=True)
    assert set(first) == set(second) and len(first) == 14
    for case, (_, got, own) in first.items():
        assert got == own, case
    for case, (hit, got, own) in second.items():
        assert hit and got == own == first[case][1], case
    for name in {case.rsplit(" ", 1)[0] for case in first}:
        assert first[f"{name} a"][1] != first[f"{name} b"][1], f"{name}: the two states should compile apart"



WRAPPED = ("def helper(x):\n    return x * 2.0\n\n"
           "def wrap(function, n):\n    def f(x):\n        return function(x) + n\n    return f\n\n"
           "f = wrap(helper, 1)\n")


def test_a_library_functions_key_follows_its_closure_past_the_memo(site_library):
    """`lib.f` read through its module is keyed by its code and closure, and
    that key is memoised: the function its closure holds given other code,
    or the closure's int, must each give another key (the memo keys on them)."""
    from gpucache_ext.sources import identify

    name = "wrapped_r4"
    write_source(site_library / name / "__init__.py", WRAPPED)
    library = importlib.import_module(name)
    try:
        _, kernel = reading(f"import {name}\n\ndef kernel(r):\n    r[0] = {name}.f(r[0])\n")

        def key():
            return identify(kernel, False).components[f"global {name}.f"].digest

        first = key()
        assert key() == first  # (memoised: the same)
        original = library.helper.__code__
        library.helper.__code__ = (lambda x: x * 3.0).__code__
        assert key() != first
        library.helper.__code__ = original
        assert key() == first
        library.f = library.wrap(library.helper, 2)
        assert key() != first
    finally:
        sys.modules.pop(name, None)
