"""Adversarial round 5 (issue 53): classes of edits earlier rounds did not list.

What a kernel reads through a library module, keyed by what it is now
(a builtin rebound, a numpy scalar or array of an installed package
reassigned or written in place, a class, a numba type or an enum member
rebound) ...

Each compiles the edit sequence through one long-lived cache and must equal
a compile of the same final state in a brand-new `KernelCache` (and, where
the edit changes the code, differ from the first compile).  Every case here
failed on main before this round's fixes.
"""

from __future__ import annotations

import importlib
import math
import sys

import numpy as np
import pytest

from gpucache_ext import CompileConfig, KernelCache

from .files import write_source
from .helpers import assert_fresh, reading

SM86 = CompileConfig(sm=86)
F32 = "void(float32[:])"
F64 = "void(float64[:])"


def check(cache, kernel, sig=F32, config=SM86, before=None):
    """The cache's compile equals a fresh one (and differs from `before`'s cubin)."""
    return assert_fresh(cache, kernel, sig, config, differs_from=before)


# ---------------------------------------------------------------------------
# Values reached through a library module: keyed by what they are now

@pytest.fixture
def patched(monkeypatch):
    """Rebind a library module's attribute for one test (undone after it)."""
    return monkeypatch.setattr


def test_a_builtin_of_a_library_module_rebound(patched):
    """``math.sin = math.cos`` in a cell: the kernel calls another libdevice function."""
    _, kernel = reading("import math\ndef kernel(r):\n    r[0] = math.sin(r[0])\n")
    cache = KernelCache()
    before = cache.compile(kernel, F32, SM86)
    patched(math, "sin", math.cos)
    check(cache, kernel, before=before)


def test_a_library_float_replaced_by_numpy_scalars(patched):
    """``math.e = np.float32(math.e)``, then another numpy scalar: each is the value compiled."""
    _, kernel = reading("import math\ndef kernel(r):\n    r[0] = math.e\n")
    cache = KernelCache()
    patched(math, "e", np.float32(math.e))
    before = cache.compile(kernel, F64, SM86)
    patched(math, "e", np.float32(2.5))
    check(cache, kernel, sig=F64, before=before)


def test_a_numpy_ufunc_of_numpy_rebound(patched):
    _, kernel = reading("import numpy as np\ndef kernel(r):\n    r[0] = np.sin(r[0])\n")
    cache = KernelCache()
    before = cache.compile(kernel, F32, SM86)
    patched(np, "sin", np.cos)
    check(cache, kernel, before=before)


CONFIG_LIBRARY = """\
import enum
import numpy as np
from numba.cuda import types

SCALE = np.float32(2.5)
TABLE = np.arange(4, dtype=np.float32)
PAIR = (np.float32(1.5), 2)
KIND = types.float32
CAST = np.float32

class Mode(enum.IntEnum):
    FAST = 1
    SLOW = 2

MODE = Mode.FAST
"""


@pytest.fixture
def cfglib(site_library, request):
    """An installed configuration module (a library's file): constants, a table, a type."""
    name = "cfglib_r5_" + request.node.name.split("[")[0][-10:]
    write_source(site_library / name / "__init__.py", CONFIG_LIBRARY)
    yield name, importlib.import_module(name)
    sys.modules.pop(name, None)


def compiled_reading(name, expression, sig=F32):
    _, kernel = reading(f"import {name} as lib\ndef kernel(r):\n    r[0] = {expression}\n")
    cache = KernelCache()
    return cache, kernel, cache.compile(kernel, sig, SM86)


def test_a_librarys_numpy_scalar_reassigned(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] * lib.SCALE")
    lib.SCALE = np.float32(3.25)
    check(cache, kernel, before=before)


def test_a_librarys_table_written_in_place(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] + lib.TABLE[1]")
    lib.TABLE[1] = 3.25
    before = check(cache, kernel, before=before)
    lib.TABLE = lib.TABLE.astype(np.float64)  # (the same values, another dtype)
    check(cache, kernel, before=before)


def test_a_librarys_tuple_of_numpy_scalars_reassigned(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "r[0] * lib.PAIR[0]")
    lib.PAIR = (np.float32(4.5), 2)
    check(cache, kernel, before=before)


def test_a_librarys_class_rebound(cfglib):
    """``lib.CAST = np.float64``: the kernel converts to another type."""
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "lib.CAST(r[0]) / 3", sig=F64)
    lib.CAST = np.float16
    check(cache, kernel, sig=F64, before=before)


def test_a_librarys_numba_type_rebound(cfglib):
    from numba.cuda import types

    name, lib = cfglib
    _, kernel = reading(f"import {name} as lib\nfrom numba import cuda\n"
                        "def kernel(r):\n    a = cuda.local.array(2, lib.KIND)\n    a[0] = r[0] / 3\n"
                        "    r[0] = a[0]\n")
    cache = KernelCache()
    before = cache.compile(kernel, F64, SM86)
    lib.KIND = types.float64
    check(cache, kernel, sig=F64, before=before)


def test_a_librarys_enum_member_rebound(cfglib):
    name, lib = cfglib
    cache, kernel, before = compiled_reading(name, "1.0 if lib.MODE == lib.Mode.FAST else 2.0")
    lib.MODE = lib.Mode.SLOW
    check(cache, kernel, before=before)
