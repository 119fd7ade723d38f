"""An adversarial pass of our own over the snapshot design (issue 20).

Cases in classes the issue did not list, written the way a user or an
attacker would try them: values that compare equal but compile apart, a
function's own attributes and a device function's options changed while a
kernel compiles, cells rebound mid-compile, numba's settings set directly on
its config module, argument types whose printed names agree.  Each compiles
through a long-lived cache and must equal a compile of the same final state
in a new cache (and, where the change matters, differ from the first).
`tests/test_hermetic.py` holds the issue's own cases; conftest.py and helpers.py the fixtures and helpers.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from numba import cuda
from numba.cuda.typing.typeof import typeof

from gpucache_ext import CompileConfig, KernelCache

from .files import write_source
from .helpers import READ_K, artifacts, assert_fresh, fresh, reading

SM80 = CompileConfig(sm=80)
F64 = "void(float64[:])"
I64 = "void(int64[:])"


# ---------------------------------------------------------------------------
# Values that compare equal (or print alike) but compile apart


@pytest.mark.parametrize("first, second, sig", [
    (True, 1, I64),  # True == 1, and hash alike: typed bool vs int64
    (2, 2.0, F64),  # 2 == 2.0: int64 vs float64
    (np.float32(np.nan), -np.float32(np.nan), F64),  # numpy NaNs of either sign
    (complex(1.0, 0.0), complex(1.0, -0.0), F64),  # a signed zero inside a complex
    (np.float64(0.0), np.float64(-0.0), F64),
])
def test_values_equal_to_python_but_not_to_the_gpu(first, second, sig):
    source = READ_K if sig == I64 or not isinstance(first, complex) else "def kernel(r):\n    r[0] = K.imag\n"
    cache = KernelCache()
    ns, kernel = reading(source, K=first)
    before = cache.compile(kernel, sig, SM80)
    ns["K"] = second
    assert_fresh(cache, kernel, sig, SM80, differs_from=before)


def test_code_constants_of_either_zero_sign():
    cache = KernelCache()
    _, plus = reading("def kernel(r):\n    r[0] = 0.0\n")
    _, minus = reading("def kernel(r):\n    r[0] = -0.0\n")
    before = cache.compile(plus, F64, SM80)
    assert_fresh(cache, minus, F64, SM80, differs_from=before)


def test_a_named_tuple_value_whose_class_is_redefined_with_its_fields_swapped():
    cache = KernelCache()
    source = "from collections import namedtuple\nP = namedtuple('P', '{fields}')\nT = P(1.0, 2.0)\n" \
             "def kernel(r):\n    r[0] = T.a\n"
    _, kernel = reading(source.format(fields="a b"))
    before = cache.compile(kernel, F64, SM80)
    _, kernel = reading(source.format(fields="b a"))
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


def test_tuple_arguments_of_arrays_in_other_layouts():
    cache = KernelCache()
    _, kernel = reading("def kernel(r, t):\n    r[0] = t[0][1] + t[1][1]\n")
    c_layout = (cuda.types.float64[:], typeof((np.zeros(4), np.zeros(4))))
    any_layout = (cuda.types.float64[:], typeof((np.zeros(8)[::2], np.zeros(4))))
    assert c_layout[1] != any_layout[1]
    cache.compile(kernel, c_layout, SM80)
    assert_fresh(cache, kernel, any_layout, SM80)


def test_a_float32_global_nan_payload():
    cache = KernelCache()
    quiet = struct.unpack("<f", struct.pack("<I", 0x7FC00000))[0]
    payload = np.frombuffer(struct.pack("<I", 0x7FC00123), np.float32)[0]
    ns, kernel = reading(READ_K, K=np.float32(quiet))
    before = cache.compile(kernel, F64, SM80)
    ns["K"] = payload
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


# ---------------------------------------------------------------------------
# What a compile reads, changed while it compiles (after it was hashed)


def test_a_closure_cell_rebound_during_the_compile(change_while_typing):
    cache = KernelCache()
    ns, _ = reading("def make():\n    K = 2.0\n    def kernel(r):\n        r[0] = K\n"
                    "    def set_k(v):\n        nonlocal K\n        K = v\n    return kernel, set_k\n", name="make")
    kernel, set_k = ns["make"]()
    change_while_typing(lambda: set_k(3.0))
    during = cache.compile(kernel, F64, SM80)
    set_k(2.0)
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)
    set_k(3.0)
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)


def test_the_kernels_qualified_name_reassigned_during_the_compile(change_while_typing):
    """The name reaches the symbol in the PTX: read once, like the rest."""
    cache = KernelCache()
    _, kernel = reading("def kernel(r):\n    r[0] = 1.0\n")
    change_while_typing(lambda: setattr(kernel, "__qualname__", "renamed"))
    during = cache.compile(kernel, F64, SM80)
    _, original = reading("def kernel(r):\n    r[0] = 1.0\n")
    assert artifacts(during) == fresh(original, F64, SM80)
    assert_fresh(cache, kernel, F64, SM80)  # now under the new name


def test_a_device_functions_options_changed_during_the_compile(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading("@cuda.jit(device=True)\ndef helper(x):\n    return x / 3.0\n\n"
                         "def kernel(r):\n    r[0] = helper(r[0])\n")
    options = ns["helper"].targetoptions
    change_while_typing(lambda: options.__setitem__("fastmath", True))
    during = cache.compile(kernel, F64, SM80)
    del options["fastmath"]
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)
    options["fastmath"] = True
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)


def test_a_global_device_function_rebound_during_the_compile(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading("@cuda.jit(device=True)\ndef double(x):\n    return x * 2.0\n\n"
                         "@cuda.jit(device=True)\ndef triple(x):\n    return x * 3.0\n\n"
                         "D = double\n\ndef kernel(r):\n    r[0] = D(r[0])\n")
    change_while_typing(lambda: ns.__setitem__("D", ns["triple"]))
    during = cache.compile(kernel, F64, SM80)
    ns["D"] = ns["double"]
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)
    ns["D"] = ns["triple"]
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)


def test_an_enum_class_rebound_during_the_compile(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading("import enum\nclass Shade(enum.IntEnum):\n    K = 3\nclass Other(enum.IntEnum):\n"
                         "    K = 7\n\ndef kernel(r):\n    r[0] = Shade.K\n")
    original = ns["Shade"]
    change_while_typing(lambda: ns.__setitem__("Shade", ns["Other"]))
    during = cache.compile(kernel, I64, SM80)
    ns["Shade"] = original
    assert artifacts(cache.compile(kernel, I64, SM80)) == artifacts(during) == fresh(kernel, I64, SM80)
    ns["Shade"] = ns["Other"]
    after = assert_fresh(cache, kernel, I64, SM80, differs_from=during)
    assert after.ptx != during.ptx


def test_a_submodule_attribute_changed_during_the_compile(user_package, change_while_typing):
    write_source(user_package / "knobpkg" / "__init__.py", "")
    write_source(user_package / "knobpkg" / "inner.py", "K = 2.0\n")
    import knobpkg.inner

    cache = KernelCache()
    _, kernel = reading("import knobpkg.inner\n\ndef kernel(r):\n    r[0] = knobpkg.inner.K\n")
    change_while_typing(lambda: setattr(knobpkg.inner, "K", 3.0))
    during = cache.compile(kernel, F64, SM80)
    knobpkg.inner.K = 2.0
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)


def test_a_module_array_written_during_the_compile(user_package, change_while_typing):
    write_source(user_package / "tables.py", "import numpy as np\nT = np.array([1.0, 2.0, 3.0])\n")
    import tables

    cache = KernelCache()
    _, kernel = reading("import tables\n\ndef kernel(r):\n    r[0] = tables.T[2]\n")
    change_while_typing(lambda: tables.T.__setitem__(2, 9.0))
    during = cache.compile(kernel, F64, SM80)
    assert artifacts(during) == fresh(kernel, F64, SM80)  # compiled again from 9.0, filed under 9.0
    assert cache.compile(kernel, F64, SM80).hit


def test_numbas_settings_set_on_its_config_during_the_compile(monkeypatch, change_while_typing):
    """numba reads its settings from its config module as it lowers; one set
    there directly (not through the environment) mid-compile is seen."""
    from numba.cuda.core import config

    cache = KernelCache()
    _, kernel = reading("def kernel(r, x):\n    r[0] = x[5]\n")
    sig, debug = "void(float64[:], float64[:])", SM80.replace(debug=True, opt=0)
    monkeypatch.setattr(config, "OPT", 3)
    change_while_typing(lambda: setattr(config, "OPT", 0))
    during = cache.compile(kernel, sig, debug)
    assert artifacts(during) == fresh(kernel, sig, debug)  # lowered again under the setting it ends with
    config.OPT = 3
    after = assert_fresh(cache, kernel, sig, debug)
    assert after.llvm_ir != during.llvm_ir


def test_a_closure_device_function_made_by_a_factory():
    """Two device functions from one factory share their code and differ in a cell."""
    cache = KernelCache()
    ns, _ = reading("def scaler(k):\n    @cuda.jit(device=True)\n    def scale(x):\n        return x * k\n"
                    "    return scale\n", name="scaler")
    _, kernel = reading("def kernel(r):\n    r[0] = S(r[0])\n", S=ns["scaler"](2.0))
    before = cache.compile(kernel, F64, SM80)
    _, kernel = reading("def kernel(r):\n    r[0] = S(r[0])\n", S=ns["scaler"](3.0))
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)
