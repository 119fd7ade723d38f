"""What is hashed is what is compiled: the cases of issue 20 (holes 1 to 3).

Each test changes what a kernel reads in a way an earlier design hashed
lossily, resolved differently from numba, or read twice (once to hash, once
to compile), then compiles through a long-lived cache and compares every
artifact with a compile of the same final state in a brand-new cache, and
checks that the change reached the code (a stale cache would give the old
bytes, equal to nothing fresh).
"""

from __future__ import annotations

import builtins
import math
import struct
import sys
import textwrap
import threading
from collections import namedtuple

import numpy as np
import pytest
from numba import cuda
from numba.cuda.typing.typeof import typeof

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

from .files import write_source
from .helpers import (DEVICE_READS_G, READ_K, artifacts, assert_fresh, fresh, in_new_processes, notebook_namespace,
                      reading, run_cell)

SM80 = CompileConfig(sm=80)
F64 = "void(float64[:])"


def nan_with(sign: int = 0, payload: int = 1 << 51) -> float:
    """A float64 NaN with this sign bit and mantissa (quiet bit included)."""
    bits = (sign << 63) | (0x7FF << 52) | payload
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


# ---------------------------------------------------------------------------
# 1. Values hashed exactly


@pytest.mark.parametrize("first, second", [
    (nan_with(0), nan_with(1)),  # the sign of a NaN
    (nan_with(0), nan_with(0, (1 << 51) | 12345)),  # its payload
    (0.0, -0.0),
])
def test_float_globals_are_keyed_by_their_bits(first, second):
    cache = KernelCache()
    ns, kernel = reading(READ_K, K=first)
    before = cache.compile(kernel, F64, SM80)
    ns["K"] = second
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


def test_the_sign_of_a_complex_nan_part_is_keyed():
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = C.imag\n", C=complex(1.0, nan_with(0)))
    before = cache.compile(kernel, F64, SM80)
    ns["C"] = complex(1.0, nan_with(1))
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


def test_code_differing_only_in_the_sign_of_a_nan_constant():
    """`1e309 - 1e309` and `-(1e309 - 1e309)` fold to NaNs of opposite signs in
    the code's constants; both kernels have one name, file and line."""
    cache = KernelCache()
    _, plus = reading("def kernel(r):\n    r[0] = 1e309 - 1e309\n")
    _, minus = reading("def kernel(r):\n    r[0] = -(1e309 - 1e309)\n")
    signs = {math.copysign(1, c) for code in (plus.__code__, minus.__code__) for c in code.co_consts
             if isinstance(c, float) and math.isnan(c)}
    assert signs == {1.0, -1.0}
    before = cache.compile(plus, F64, SM80)
    assert_fresh(cache, minus, F64, SM80, differs_from=before)


INT_ENUM_WITH_STR = """
import enum

class Mode(enum.IntEnum):
    FAST = {value}

    def __str__(self):
        return self.name.lower()

K = Mode.FAST

def kernel(r):
    r[0] = K
"""


def test_int_enum_member_with_its_own_str_is_keyed_by_value():
    cache = KernelCache()
    _, kernel = reading(INT_ENUM_WITH_STR.format(value=3))
    before = cache.compile(kernel, "void(int64[:])", SM80)
    _, kernel = reading(INT_ENUM_WITH_STR.format(value=5))
    assert_fresh(cache, kernel, "void(int64[:])", SM80, differs_from=before)


def test_user_subclasses_of_numbers_are_refused_by_name():
    source = "class Scale(float):\n    pass\n\nK = Scale(2.0)\n" + READ_K
    _, kernel = reading(source)
    with pytest.raises(UnsupportedKernelError, match=r"reads K, an instance of Scale.*subclass of float.*float\(K\)"):
        KernelCache().compile(kernel, F64, SM80)


READ_FIELD_A = """
def kernel(r, p):
    r[0] = p.a
"""


def test_named_tuple_argument_types_are_keyed_by_their_class():
    """Both classes print as P(float64 x 2); the second's first field is b."""
    cache = KernelCache()
    _, kernel = reading(READ_FIELD_A)
    first = namedtuple("P", "a b")
    second = namedtuple("P", "b a")
    assert str(typeof(first(1.0, 2.0))) == str(typeof(second(1.0, 2.0)))
    sig = lambda cls: (cuda.types.float64[:], typeof(cls(1.0, 2.0)))  # noqa: E731
    before = cache.compile(kernel, sig(first), SM80)
    after = assert_fresh(cache, kernel, sig(second), SM80)
    assert after.stages["typing"].token != before.stages["typing"].token


def test_record_argument_types_with_other_field_offsets_differ():
    cache = KernelCache()
    _, kernel = reading("def kernel(r, rec):\n    r[0] = rec[0].b\n")
    near, far = (np.dtype({"names": ["a", "b"], "formats": [np.int32, np.float64], "offsets": [0, offset],
                           "itemsize": offset + 8}) for offset in (8, 16))
    sig = lambda dtype: (cuda.types.float64[:], typeof(np.zeros(1, dtype)))  # noqa: E731
    before = cache.compile(kernel, sig(near), SM80)
    assert_fresh(cache, kernel, sig(far), SM80, differs_from=before)


NAMED_TUPLE_CELL = """
from collections import namedtuple
from numba import cuda

P = namedtuple("P", "{fields}")

@cuda.jit
def pick(r, p):
    r[0] = p.a
"""


def test_named_tuple_redefined_between_cells_is_typed_anew_at_launch(ip):
    """Through the magic: a lazy kernel compiled at its first launch."""
    ip.run_cell("import numpy as np").raise_error()
    results = []
    for fields in ("a b", "b a"):
        ip.run_cell(f"%%gpukernel --sm 80\n{NAMED_TUPLE_CELL.format(fields=fields)}").raise_error()
        ip.run_cell("out = np.zeros(1)\npick[1, 1](out, P(1.0, 2.0))").raise_error()
        assert ip.user_ns["out"][0] == ip.user_ns["P"](1.0, 2.0).a
        results.append(ip.user_ns["pick"].last)
    first, second = results
    assert first.ptx != second.ptx, "the second class reads its second field"
    assert artifacts(second) == fresh(ip.user_ns["pick"].py_func, second.signature, SM80)


# ---------------------------------------------------------------------------
# 2. Names resolved as numba resolves them


@pytest.fixture
def builtin_scale():
    yield
    if hasattr(builtins, "SCALE"):
        del builtins.SCALE


def test_a_name_read_from_builtins_is_keyed_by_its_value(builtin_scale):
    cache = KernelCache()
    builtins.SCALE = 2.5
    _, kernel = reading("def kernel(r):\n    r[0] = SCALE\n")
    before = cache.compile(kernel, F64, SM80)
    builtins.SCALE = 3.25
    after = assert_fresh(cache, kernel, F64, SM80, differs_from=before)
    assert any("builtin SCALE 2.5 -> 3.25" in why for why in after.stages["typing"].reasons)


BUILTIN_SCRIPT = """
import builtins, json, sys
from gpucache_ext import CompileConfig, KernelCache

builtins.SCALE = float(sys.argv[2])

def kernel(r):
    r[0] = SCALE

res = KernelCache(directory=sys.argv[1]).compile(kernel, "void(float64[:])", CompileConfig(sm=80))
json.dump({"hit": res.hit, "ptx": res.ptx}, sys.stdout)
"""


@pytest.mark.slow
def test_a_builtin_changed_in_another_process_misses_the_disk_tier(tmp_path):
    first, second, third = in_new_processes(BUILTIN_SCRIPT, tmp_path, (2.5, 3.25, 2.5))
    assert not first["hit"] and not second["hit"] and third["hit"]
    assert first["ptx"] != second["ptx"] and third["ptx"] == first["ptx"]


def test_the_working_directory_reaches_debug_info_of_cells(tmp_path, monkeypatch):
    """numba-cuda names os.path.abspath(the cell's file name) in debug info."""
    config = CompileConfig(sm=80, lineinfo=True)
    ns = notebook_namespace()
    run_cell(ns, "def kernel(r):\n    r[0] = 1.0\n", filename="cell-7.py")
    cache = KernelCache(directory=tmp_path / "disk")
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        result = cache.compile(ns["kernel"], F64, config)
        assert str(tmp_path / folder) in result.ptx
        assert artifacts(result) == fresh(ns["kernel"], F64, config)
    # a new process's cache on the same disk, back in the first folder
    monkeypatch.chdir(tmp_path / "first")
    again = KernelCache(directory=tmp_path / "disk").compile(ns["kernel"], F64, config)
    assert again.hit and str(tmp_path / "first") in again.ptx


# ---------------------------------------------------------------------------
# 3. One snapshot: hashed once, typed from what was hashed


def test_a_global_changed_during_the_compile_is_not_what_is_compiled(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading(READ_K, K=2.0)
    change_while_typing(lambda: ns.__setitem__("K", 3.0))
    during = cache.compile(kernel, F64, SM80)
    assert ns["K"] == 3.0
    assert during.hit is False and "3.0" not in during.llvm_ir
    after = assert_fresh(cache, kernel, F64, SM80, differs_from=during)  # K is 3.0: not the 2.0 entry
    ns["K"] = 2.0
    assert artifacts(cache.compile(kernel, F64, SM80)) == fresh(kernel, F64, SM80)
    assert after.ptx != during.ptx


def test_a_module_attribute_changed_during_the_compile(user_package, change_while_typing):
    write_source(user_package / "knobs.py", "K = 2.0\n")
    import knobs

    cache = KernelCache()
    _, kernel = reading("import knobs\n\ndef kernel(r):\n    r[0] = knobs.K\n")
    change_while_typing(lambda: setattr(knobs, "K", 3.0))
    during = cache.compile(kernel, F64, SM80)
    knobs.K = 2.0
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)
    knobs.K = 3.0
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)



def test_a_device_functions_global_changed_during_the_compile(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading(DEVICE_READS_G, G=2.0)
    change_while_typing(lambda: ns.__setitem__("G", 3.0))
    during = cache.compile(kernel, F64, SM80)
    ns["G"] = 2.0
    assert artifacts(cache.compile(kernel, F64, SM80)) == artifacts(during) == fresh(kernel, F64, SM80)
    ns["G"] = 3.0
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)


def test_an_array_written_during_the_compile_compiles_again(change_while_typing):
    """An array is hashed as it is and copied for the compile: a write in
    between is seen, and the compile starts again from a new snapshot."""
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = A[1]\n", A=np.array([1.0, 2.0, 3.0]))
    change_while_typing(lambda: ns["A"].__setitem__(1, 7.0))
    during = cache.compile(kernel, F64, SM80)
    assert artifacts(during) == fresh(kernel, F64, SM80)  # compiled from 7.0, filed under 7.0
    assert cache.compile(kernel, F64, SM80).hit


MUTATORS = {
    "global": lambda ns, value: ns.__setitem__("K", value),
    "device global": lambda ns, value: ns.__setitem__("G", value),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(MUTATORS))
def test_a_thread_writing_what_the_kernel_reads_never_files_a_wrong_entry(what):
    """A real thread flips the value while the main thread compiles with
    changing flags; afterwards, each value compiles to what a fresh cache
    gives (a wrong entry filed under one value's token would be served)."""
    source = READ_K + "\n" + DEVICE_READS_G.replace("def kernel", "def other") if what == "global" \
        else DEVICE_READS_G
    ns, kernel = reading(source, K=2.0, G=2.0)
    cache, stop = KernelCache(), threading.Event()

    def flip():
        value = 2.0
        while not stop.is_set():
            value = 5.0 - value
            MUTATORS[what](ns, value)

    writer = threading.Thread(target=flip)
    writer.start()
    try:
        for step in range(16):
            cache.compile(kernel, F64, SM80.replace(launch_bounds=32 * (step % 4 + 1)))
    finally:
        stop.set()
        writer.join()
    for value in (2.0, 3.0):
        MUTATORS[what](ns, value)
        for step in range(4):
            config = SM80.replace(launch_bounds=32 * (step + 1))
            assert artifacts(cache.compile(kernel, F64, config)) == fresh(kernel, F64, config), (value, step)


TWIN = """
from numba import cuda

K = {k}

@cuda.jit(device=True)
def d(x):
    return x * K
"""


def import_twin(folder, k):
    """Import module `twin` anew (as a notebook user does after deleting it from sys.modules)."""
    sys.modules.pop("twin", None)
    write_source(folder / "twin.py", TWIN.format(k=k))
    import importlib

    importlib.invalidate_caches()
    return importlib.import_module("twin")


USES_D = """
def kernel(r):
    r[0] = D(r[0])
"""


def test_module_twins_each_compile_their_own_device_function(user_package):
    """Two modules of one name (a module imported again after deleting it from
    sys.modules), each with its own `d`: equal identities, two function
    objects.  A device function typed for one must never stand for the other."""
    cache = KernelCache()
    old = import_twin(user_package, 2.0)
    _, old_kernel = reading(USES_D, D=old.d)
    new = import_twin(user_package, 2.0)
    _, new_kernel = reading(USES_D, D=new.d)
    assert old.d is not new.d
    first = cache.compile(new_kernel, F64, SM80)
    new.K = 3.0  # the new module moves on; the old one keeps 2.0
    f32 = "void(float32[:])"  # the device function typed for other arguments
    assert artifacts(cache.compile(old_kernel, f32, SM80)) == fresh(old_kernel, f32, SM80)
    for config in (SM80, SM80.replace(launch_bounds=64)):  # typed IR lowered again
        assert artifacts(cache.compile(old_kernel, F64, config)) == fresh(old_kernel, F64, config)
    changed = assert_fresh(cache, new_kernel, F64, SM80, differs_from=first)
    assert cache.compile(old_kernel, F64, SM80).ptx != changed.ptx


WITH_DEFAULT = """
@cuda.jit(device=True)
def helper(x, k=2.0):
    return x * k{extra}

def kernel(r):
    r[0] = helper(r[0])
"""


def test_a_functions_code_or_defaults_reassigned_after_hashing_are_not_compiled(change_while_typing):
    """A function's own attributes are read once, like its globals."""
    cache = KernelCache()
    ns, kernel = reading(WITH_DEFAULT.format(extra=""))
    other, _ = reading(WITH_DEFAULT.format(extra=" + 1.0"))
    helper = ns["helper"].py_func
    change_while_typing(lambda: setattr(helper, "__defaults__", (5.0,)))
    change_while_typing(lambda: setattr(helper, "__code__", other["helper"].py_func.__code__))
    during = cache.compile(kernel, F64, SM80)
    _, original = reading(WITH_DEFAULT.format(extra=""))
    assert artifacts(during) == fresh(original, F64, SM80)
    assert_fresh(cache, kernel, F64, SM80, differs_from=during)


def test_a_builtin_shadowed_later_by_a_global(builtin_scale):
    cache = KernelCache()
    builtins.SCALE = 2.5
    ns, kernel = reading("def kernel(r):\n    r[0] = SCALE\n")
    before = cache.compile(kernel, F64, SM80)
    ns["SCALE"] = 4.0  # numba reads the module global first
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


def test_library_module_constants_are_keyed_by_value(monkeypatch):
    """A library is keyed by its version, but its module attributes can be
    reassigned at run time (``math.pi = 3``)."""
    cache = KernelCache()
    _, kernel = reading("import math\n\ndef kernel(r):\n    r[0] = math.pi\n")
    before = cache.compile(kernel, F64, SM80)
    monkeypatch.setattr(math, "pi", 3.0)
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)


def test_lists_are_read_once(change_while_typing):
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = T[0]\n", T=(1.5, 2.5))
    change_while_typing(lambda: ns.__setitem__("T", (9.5, 2.5)))
    during = cache.compile(kernel, F64, SM80)
    ns["T"] = (1.5, 2.5)
    assert artifacts(during) == fresh(kernel, F64, SM80)


def dedent(text):
    return textwrap.dedent(text)


def test_the_def_line_numba_parses_from_the_source_text_is_keyed(user_package):
    """numba-cuda finds the line of ``def`` for debug info by parsing the
    file's text at lowering time: an edit above a function that was not
    reloaded moves it (the code object, and its line table, stay as they were)."""
    config = CompileConfig(sm=80, lineinfo=True)
    path = user_package / "lined.py"
    write_source(path, "def kernel(r):\n    r[0] = 1.0\n")
    import lined

    cache = KernelCache()
    before = cache.compile(lined.kernel, F64, config)
    write_source(path, "# a comment\ndef kernel(r):\n    r[0] = 1.0\n")  # not reloaded
    after = assert_fresh(cache, lined.kernel, F64, config)
    assert after.llvm_ir != before.llvm_ir


def test_a_hit_hashes_a_global_array_without_copying_it(monkeypatch):
    """Arrays are copied for a compile only: a hit hashes the array as it is
    (XXH3-128, see bench/bench_global_arrays.py), and an edit is still seen."""
    from gpucache_ext.sources import snapshot

    copies = []
    original = snapshot._snapshot_array
    monkeypatch.setattr(snapshot, "_snapshot_array", lambda *a: copies.append(1) or original(*a))
    cache = KernelCache()
    ns, kernel = reading("def kernel(r):\n    r[0] = A[1]\n", A=np.arange(1024, dtype=np.float64))
    before = cache.compile(kernel, F64, SM80)
    assert copies == [1]
    assert cache.compile(kernel, F64, SM80).hit and copies == [1]
    ns["A"][1] = 7.0
    assert_fresh(cache, kernel, F64, SM80, differs_from=before)
