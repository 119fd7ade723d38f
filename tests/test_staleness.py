"""Regression tests: ordinary Python that once made the cache return stale code.

Each test edits what a kernel reads the way a notebook user would (redefine a
class, edit and reload a module, mutate an array), compiles again through a
long-lived cache, and compares every artifact with a compile of the same
final state in a brand-new cache.  Equal artifacts with a stale cache would
mean the edit never reached the code; so each test also checks that the edit
changed the output.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest

from gpucache_ext import CompileConfig, CompileError, KernelCache, UnsupportedKernelError

from .files import write_source
from .helpers import artifacts, assert_fresh, fresh, in_new_processes, notebook_namespace, run_cell

SM80 = CompileConfig(sm=80)


# ---------------------------------------------------------------------------
# 1. Classes and enums


ENUM_CELL = """
import enum

class Shade(enum.IntEnum):
    DARK = 1
    K = {value}

def kernel(r):
    r[0] = Shade.K
"""


def test_redefined_enum_recompiles():
    ns = notebook_namespace()
    cache = KernelCache()
    run_cell(ns, ENUM_CELL.format(value=3))
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    run_cell(ns, ENUM_CELL.format(value=7))
    second = assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)
    assert any("Shade" in reason for reason in second.stages["typing"].reasons)
    run_cell(ns, ENUM_CELL.format(value=3))  # back to the first definition: a hit again
    third = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    assert third.hit and third.cubin == first.cubin


def test_enum_member_read_through_another_global_recompiles():
    ns = notebook_namespace()
    cache = KernelCache()
    source = ENUM_CELL.format(value=3).replace("r[0] = Shade.K", "r[0] = MEMBER") + "\nMEMBER = Shade.K\n"
    run_cell(ns, source)
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    run_cell(ns, source.replace("K = 3", "K = 5"))
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)


def test_namedtuple_class_fields_enter_the_token():
    ns = notebook_namespace()
    cache = KernelCache()
    cell = """
    import collections
    Pair = collections.namedtuple("Pair", {fields!r})

    def kernel(r):
        p = Pair(3, 4)
        r[0] = p[0] * 10 + p.b
    """
    run_cell(ns, cell.format(fields="a b"))
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    run_cell(ns, cell.format(fields="b a"))  # swapped: p.b is now the first field
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)


def test_a_user_class_without_a_numba_extension_fails_to_type_as_in_numba():
    """A plain user class is keyed by what it is made of (numba reads it only
    through extension registrations: tests/test_extensions.py); without any,
    numba cannot type it, and the cache says what numba says, storing nothing."""
    ns = notebook_namespace()
    run_cell(ns, """
    class Settings:
        K = 3

    def kernel(r):
        r[0] = Settings.K
    """)
    cache = KernelCache()
    with pytest.raises(CompileError, match="Untyped global name 'Settings'"):
        cache.compile(ns["kernel"], "void(int64[:])", SM80)
    assert set(_entries(cache).values()) == {0}


def test_redefined_enum_recompiles_in_the_magic(ip):
    for value in (3, 7, 3):
        ip.run_cell(f"""%%gpukernel --sm 80 --quiet
import enum
from numba import cuda

class Shade(enum.IntEnum):
    K = {value}

@cuda.jit("void(int64[:])")
def paint(r):
    r[0] = Shade.K
""").raise_error()
        expected = fresh(ip.user_ns["paint"].py_func, "void(int64[:])", SM80)
        assert (ip.user_ns["paint"].llvm_ir, ip.user_ns["paint"].ptx, ip.user_ns["paint"].cubin) == expected
        assert f"i64 {value}" in ip.user_ns["paint"].llvm_ir


DISK_SCRIPT = """
import enum, json, sys
from numba import cuda
from gpucache_ext import CompileConfig, KernelCache

class Shade(enum.IntEnum):
    K = int(sys.argv[2])

def kernel(r):
    r[0] = Shade.K

cache = KernelCache(directory=sys.argv[1])
res = cache.compile(kernel, "void(int64[:])", CompileConfig(sm=80))
json.dump({"hit": res.hit, "ptx": res.ptx}, sys.stdout)
"""


@pytest.mark.slow
def test_redefined_enum_misses_the_disk_tier_in_a_new_process(tmp_path):
    first, second, third = in_new_processes(DISK_SCRIPT, tmp_path, (3, 7, 3))
    assert not first["hit"] and not second["hit"] and third["hit"]
    assert first["ptx"] != second["ptx"] and third["ptx"] == first["ptx"]


# ---------------------------------------------------------------------------
# 2. Modules


def write(path, text):
    write_source(path, textwrap.dedent(text))


def test_submodule_constant_edited_and_reloaded_recompiles(user_package):
    write(user_package / "cfgpkg" / "__init__.py", "")
    write(user_package / "cfgpkg" / "sub.py", "K = 3\n")
    ns = notebook_namespace()
    run_cell(ns, """
    import cfgpkg.sub

    def kernel(r):
        r[0] = cfgpkg.sub.K
    """)
    cache = KernelCache()
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    write(user_package / "cfgpkg" / "sub.py", "K = 5\n")
    importlib.reload(sys.modules["cfgpkg.sub"])
    second = assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)
    assert "global cfgpkg.sub.K 3 -> 5" in second.stages["typing"].reasons


def test_user_module_named_like_the_standard_library_is_user_code(user_package):
    sys.modules.pop("sched", None)
    write(user_package / "sched.py", "K = 3\n")
    import sched

    assert sched.__file__.startswith(str(user_package))
    ns = notebook_namespace()
    ns["sched"] = sched
    run_cell(ns, """
    def kernel(r):
        r[0] = sched.K
    """)
    cache = KernelCache()
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    write(user_package / "sched.py", "K = 4\n")
    importlib.reload(sched)
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)


def test_only_attributes_read_through_a_module_count(user_package):
    # `size` and `x` are also attribute names the kernel reads from other
    # objects (r.size, cuda.threadIdx.x); they must not drag the module's
    # unrelated dict-valued attributes into the token.
    write(user_package / "tables.py", "K = 3\nsize = {'a': 1}\nx = {'b': 2}\nUNUSED = 1\n")
    ns = notebook_namespace()
    run_cell(ns, """
    import tables

    def kernel(r):
        i = cuda.threadIdx.x
        if i < r.size:
            r[i] = tables.K
    """)
    cache = KernelCache()
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    tables = sys.modules["tables"]
    tables.UNUSED = 2
    assert cache.compile(ns["kernel"], "void(int64[:])", SM80).hit
    tables.K = 4
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)


def test_module_used_as_a_value_is_refused(user_package):
    write(user_package / "consts.py", "K = 3\n")
    ns = notebook_namespace()
    run_cell(ns, """
    import consts

    def kernel(r):
        m = consts
        r[0] = m.K
    """)
    with pytest.raises(UnsupportedKernelError, match="consts.name"):
        KernelCache().compile(ns["kernel"], "void(int64[:])", SM80)


# ---------------------------------------------------------------------------
# 3. What lowering bakes is what the token hashed


def test_lowering_reads_the_hashed_snapshot_not_the_live_array():
    ns = notebook_namespace()
    run_cell(ns, """
    import numpy as np
    TABLE = np.array([1.0, 2.0, 3.0], dtype=np.float32)

    def kernel(r):
        i = cuda.grid(1)
        if i < r.size:
            r[i] = TABLE[i % 3]
    """)
    sig = "void(float32[:])"
    cache = KernelCache()
    original = ns["TABLE"]
    cache.compile(ns["kernel"], sig, SM80)
    original[:] = [7.0, 8.0, 9.0]  # in place: a new token, a new typing entry
    cache.compile(ns["kernel"], sig, SM80)
    ns["TABLE"] = np.array([1.0, 2.0, 3.0], dtype=np.float32)  # the first contents again
    # Typing hits the first entry; lowering for another flag must bake 1, 2, 3
    # (what the token hashed), not the live first array (now 7, 8, 9).
    result = assert_fresh(cache, ns["kernel"], sig, SM80.replace(fastmath=True))
    assert result.stages["typing"].hit


def test_device_function_lowering_reads_its_snapshot():
    ns = notebook_namespace()
    run_cell(ns, """
    import numpy as np
    TABLE = np.array([1.0, 2.0, 3.0], dtype=np.float32)

    @cuda.jit(device=True)
    def lookup(i):
        return TABLE[i % 3]

    def kernel(r):
        i = cuda.grid(1)
        if i < r.size:
            r[i] = lookup(i)
    """)
    sig = "void(float32[:])"
    cache = KernelCache()
    original = ns["TABLE"]
    cache.compile(ns["kernel"], sig, SM80)
    original[:] = [7.0, 8.0, 9.0]
    cache.compile(ns["kernel"], sig, SM80)
    ns["TABLE"] = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    for change in (dict(fastmath=True), dict(sm=86, lineinfo=True)):
        assert_fresh(cache, ns["kernel"], sig, SM80.replace(**change))


def test_structured_dtypes_are_hashed_in_full():
    ns = notebook_namespace()
    raw = np.frombuffer(np.float32(1.5).tobytes() * 2, dtype=np.uint8)
    ints = raw.view(np.dtype([("a", "<i2"), ("b", "<i2")]))
    floats = raw.view(np.dtype([("a", "<f4")]))
    assert ints.dtype.str == floats.dtype.str == "|V4" and ints.tobytes() == floats.tobytes()
    run_cell(ns, """
    def kernel(r):
        r[0] = RECORDS[0]['a']
    """)
    cache = KernelCache()
    ns["RECORDS"] = ints.copy()
    first = cache.compile(ns["kernel"], "void(float64[:])", SM80)
    ns["RECORDS"] = floats.copy()
    assert_fresh(cache, ns["kernel"], "void(float64[:])", SM80, differs_from=first)


def test_array_memory_layout_enters_the_token():
    ns = notebook_namespace()
    run_cell(ns, """
    def kernel(r):
        i = cuda.grid(1)
        r[0] = GRID[i % 2, i % 3]
    """)
    values = np.arange(6, dtype=np.int64).reshape(2, 3)
    cache = KernelCache()
    ns["GRID"] = np.ascontiguousarray(values)
    first = cache.compile(ns["kernel"], "void(int64[:])", SM80)
    ns["GRID"] = np.asfortranarray(values)  # the same elements, the other layout
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)
    ns["GRID"] = np.arange(12, dtype=np.int64).reshape(2, 6)[:, ::2]  # strided ('A' layout)
    assert_fresh(cache, ns["kernel"], "void(int64[:])", SM80, differs_from=first)


# ---------------------------------------------------------------------------
# 4. numba settings and forced compiles reach device functions

DEVICE_CELL = """
@cuda.jit(device=True)
def shifted(x):
    return x + 1.0

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = shifted(x[i])
"""


def test_numba_settings_reach_device_function_lowering(monkeypatch):
    ns = notebook_namespace()
    run_cell(ns, DEVICE_CELL)
    config = CompileConfig(sm=80, debug=True, opt=0)
    sig = "void(float32[:], float32[:])"
    cache = KernelCache()
    monkeypatch.setenv("NUMBA_OPT", "3")
    optimised = cache.compile(ns["kernel"], sig, config)
    assert "isOptimized: true" in optimised.llvm_ir
    monkeypatch.setenv("NUMBA_OPT", "0")
    result = assert_fresh(cache, ns["kernel"], sig, config)
    assert "isOptimized: true" not in result.llvm_ir  # neither the kernel's nor shifted's


def test_force_types_and_lowers_device_functions_again(monkeypatch):
    from gpucache_ext.backends.numba_cuda import stages
    from gpucache_ext.backends.numba_cuda.stages import device

    ns = notebook_namespace()
    run_cell(ns, DEVICE_CELL)
    sig = "void(float32[:], float32[:])"
    cache = KernelCache()
    cache.compile(ns["kernel"], sig, SM80)
    typed = []
    real = stages.run_typing

    def run_typing(pyfunc, *a, **k):
        return typed.append(pyfunc.__name__) or real(pyfunc, *a, **k)

    # where each typing looks it up: the pipeline's of the kernel, a device proxy's of its function
    monkeypatch.setattr(stages, "run_typing", run_typing)
    monkeypatch.setattr(device, "run_typing", run_typing)
    cache.compile(ns["kernel"], sig, SM80.replace(fastmath=True))
    assert typed == []  # typing hit, the device function's typed IR is reused
    forced = cache.compile(ns["kernel"], sig, SM80, force=True)
    assert sorted(typed) == ["kernel", "shifted"]
    assert artifacts(forced) == fresh(ns["kernel"], sig, SM80)


# ---------------------------------------------------------------------------
# 5. cuda.jit reached through any alias gets the running cell's flags

KERNEL_WITH_JIT = '''
@jit("void(float32[:])")
def bump(r):
    i = cuda.grid(1)
    if i < r.size:
        r[i] += 1.5
'''


def run_magic(ip, line, body):
    result = ip.run_cell(f"%%gpukernel {line}\n{body}")
    result.raise_error()
    return ip.user_ns


def test_jit_imported_in_an_earlier_cell_gets_the_later_cells_flags(ip, capsys):
    from gpucache_ext import Kernel

    run_magic(ip, "--sm 80 --quiet", "from numba import cuda\nfrom numba.cuda import jit\n")
    capsys.readouterr()
    run_magic(ip, "--sm 90 --fastmath", KERNEL_WITH_JIT)
    kernel = ip.user_ns["bump"]
    assert isinstance(kernel, Kernel)
    assert kernel.config.sm == 90 and kernel.config.fastmath
    assert "bump" in capsys.readouterr().out  # in this cell's report
    assert kernel.cubin == KernelCache().compile(kernel.py_func, "void(float32[:])",
                                                 CompileConfig(sm=90, fastmath=True)).cubin
    # outside a %%gpukernel cell the alias is numba's jit
    ip.run_cell("lazy = jit(device=True)(lambda x: x)").raise_error()
    from numba.cuda.dispatcher import CUDADispatcher

    assert isinstance(ip.user_ns["lazy"], CUDADispatcher)


def test_alias_of_numbas_jit_made_outside_the_magic_is_stood_in_for(ip):
    from numba.cuda import decorators

    from gpucache_ext import Kernel

    ip.run_cell("from numba import cuda\njit = cuda.jit").raise_error()
    assert ip.user_ns["jit"] is decorators.jit
    run_magic(ip, "--sm 90 --quiet", KERNEL_WITH_JIT)
    assert isinstance(ip.user_ns["bump"], Kernel) and ip.user_ns["bump"].config.sm == 90
    assert ip.user_ns["jit"] is decorators.jit  # restored after the cell


def test_kernels_made_by_numbas_jit_through_a_partial_are_captured(ip):
    from gpucache_ext import Kernel

    ip.run_cell("import functools\nfrom numba import cuda\n"
                "fast_jit = functools.partial(cuda.jit, fastmath=True)").raise_error()
    run_magic(ip, "--sm 86 --quiet --sig 'void(float32[:])'", '''
@fast_jit
def halve(r):
    r[0] = r[0] / 3.0
''')
    kernel = ip.user_ns["halve"]
    assert isinstance(kernel, Kernel)
    assert kernel.config.sm == 86 and kernel.config.fastmath and kernel.results


# ---------------------------------------------------------------------------
# 6. A launch runs the declared signature numba-cuda's dispatcher would pick


def _declared_kernel(*sigs):
    from gpucache_ext import Kernel

    ns = notebook_namespace()
    run_cell(ns, """
    def store(r, v):
        r[0] = v
    """)
    return Kernel(ns["store"], list(sigs), SM80, KernelCache())


def test_exact_match_wins_over_a_lossy_conversion():
    kernel = _declared_kernel("void(int64[:], int32)", "void(int64[:], int64)")
    out = np.zeros(1, dtype=np.int64)
    assert str(kernel.result_for(out, 2**40).signature[1]) == "int64"
    assert str(kernel.result_for(out, np.int32(5)).signature[1]) == "int32"
    floats = _declared_kernel("void(float64[:], float32)", "void(float64[:], float64)")
    assert str(floats.result_for(np.zeros(1), 1.5).signature[1]) == "float64"
    assert str(floats.result_for(np.zeros(1), np.float32(1.5)).signature[1]) == "float32"


def test_conversions_follow_numbas_rules():
    from gpucache_ext import LaunchError

    only32 = _declared_kernel("void(float64[:], float32)")
    # numba converts a Python float to the one float32 variant (compilation is off)
    assert str(only32.result_for(np.zeros(1), 1.5).signature[1]) == "float32"
    # a C-contiguous array goes to a signature declared with any layout
    any_layout = _declared_kernel("void(int64[:], int64)")
    assert any_layout.result_for(np.zeros(3, dtype=np.int64), 1).signature[0].layout == "A"
    ambiguous = _declared_kernel("void(int64[:], int32)", "void(int64[:], float32)")
    with pytest.raises(LaunchError, match="equally well"):
        ambiguous.result_for(np.zeros(1, dtype=np.int64), 2**40)
    with pytest.raises(LaunchError, match="no signature accepts"):
        any_layout.result_for(np.zeros(1, dtype=np.int64), "text")


# ---------------------------------------------------------------------------
# 8. Promised refusals come before anything is compiled or stored


def _entries(cache):
    return {stage: values.entries for stage, values in cache.stats().items()}


@pytest.mark.parametrize("body, match", [
    ("""
    ext = cuda.declare_device("ext_scale", "float32(float32)")

    def kernel(r):
        r[0] = ext(r[0])
    """, r"nothing defines it: give the file or code that does, cuda.declare_device\('ext_scale', ..., link="),
])
def test_unsupported_features_are_refused_before_any_stage_is_stored(body, match):
    ns = notebook_namespace()
    run_cell(ns, body)
    cache = KernelCache()
    with pytest.raises(UnsupportedKernelError, match=match) as info:
        cache.compile(ns["kernel"], "void(float32[:])", SM80)
    assert "\x00" not in str(info.value)
    assert set(_entries(cache).values()) == {0}
    assert all(values.misses == 0 for values in cache.stats().values())


@pytest.mark.parametrize("options, match", [
    ("boundscheck=True", "bounds checking is not supported"),
    ("fasmath=True", "unknown option fasmath"),
    ("argtypes=(1,)", "no longer supported"),
])
def test_decorator_options_numba_refuses_are_refused(ip, options, match):
    for decorator in (f'@cuda.jit("void(float32[:])", {options})', f"@cuda.jit(device=True, {options})"):
        result = ip.run_cell(f"%%gpukernel --sm 80 --quiet\nfrom numba import cuda\n{decorator}\n"
                             "def refused(r):\n    r[0] = 1.0\n")
        assert not result.success and match in str(result.error_in_exec)
        assert "refused" not in ip.user_ns


# ---------------------------------------------------------------------------
# 7. Device functions reached indirectly are proxied (or refused clearly)


def lowered_flags(result, name):
    """The definitions of device function `name` in the NVVM IR (numba's symbol
    names carry the lowering flags, e.g. fastmath)."""
    found = [line.split("(")[0] for line in result.llvm_ir.splitlines()
             if line.startswith("define") and name in line]
    assert found, f"{name} is not defined in the NVVM IR"
    return found


def test_device_functions_held_in_a_tuple_are_tracked_and_proxied():
    ns = notebook_namespace()
    cell = """
    @cuda.jit(device=True)
    def first(x):
        return x + {add}

    @cuda.jit(device=True)
    def second(x):
        return x * 2.0

    STEPS = (first, second)

    def kernel(r):
        r[0] = STEPS[1](STEPS[0](r[0]))
    """
    run_cell(ns, cell.format(add=1.0))
    cache = KernelCache()
    before = cache.compile(ns["kernel"], "void(float32[:])", SM80)
    run_cell(ns, cell.format(add=5.0))
    assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80, differs_from=before)
    # lowered with its own options, like any device function (as numba):
    # the kernel's fastmath does not reach it
    plain = cache.compile(ns["kernel"], "void(float32[:])", SM80)
    fast = assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80.replace(fastmath=True))
    assert lowered_flags(fast, "first") == lowered_flags(plain, "first")
    run_cell(ns, cell.format(add=5.0).replace("@cuda.jit(device=True)\n    def first",
                                               "@cuda.jit(device=True, fastmath=True)\n    def first"))
    own = assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80)
    assert lowered_flags(own, "first") != lowered_flags(plain, "first")


def test_device_function_in_an_edited_submodule_recompiles(user_package):
    write(user_package / "devpkg" / "__init__.py", "")
    write(user_package / "devpkg" / "ops.py", """
    from numba import cuda

    @cuda.jit(device=True)
    def scale(x):
        return x * 3.0
    """)
    ns = notebook_namespace()
    run_cell(ns, """
    import devpkg.ops

    def kernel(r):
        r[0] = devpkg.ops.scale(r[0])
    """)
    cache = KernelCache()
    before = cache.compile(ns["kernel"], "void(float32[:])", SM80)
    write(user_package / "devpkg" / "ops.py", """
    from numba import cuda

    @cuda.jit(device=True)
    def scale(x):
        return x * 7.0
    """)
    importlib.reload(sys.modules["devpkg.ops"])
    assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80, differs_from=before)


RANDOM_CELL = """
from numba.cuda.random import xoroshiro128p_uniform_float32

def direct(states, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = xoroshiro128p_uniform_float32(states, i)

def through_module(states, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = cuda.random.xoroshiro128p_uniform_float32(states, i)
"""


def test_library_device_functions_compile_for_the_kernels_target_with_their_own_options():
    from numba.cuda.random import xoroshiro128p_dtype
    from numba.cuda.typing.typeof import typeof

    ns = notebook_namespace()
    run_cell(ns, RANDOM_CELL)
    sig = (typeof(np.zeros(4, dtype=xoroshiro128p_dtype)), typeof(np.zeros(4, dtype=np.float32)))
    cache = KernelCache()
    for name in ("direct", "through_module"):
        plain = assert_fresh(cache, ns[name], sig, SM80)
        fast = assert_fresh(cache, ns[name], sig, SM80.replace(fastmath=True))
        # as numba, the helper is lowered with its own (default) options,
        # not the kernel's fastmath
        assert lowered_flags(plain, "xoroshiro") == lowered_flags(fast, "xoroshiro")
        assert_fresh(cache, ns[name], sig, CompileConfig(sm=90, debug=True, opt=0))
    # forced: fresh proxies for the library helpers too, same bytes
    from gpucache_ext.backends.numba_cuda.stages import device

    before = {id(proxy) for proxy in device._library_proxies.values()}
    assert artifacts(cache.compile(ns["direct"], sig, SM80, force=True)) == fresh(ns["direct"], sig, SM80)
    assert {id(proxy) for proxy in device._library_proxies.values()} - before


JITABLE_CELL = """
import numba
from numba.cuda.extending import register_jitable

@register_jitable
def helper(x):
    return x * {factor}

@numba.njit
def cpu_helper(x):
    return x + {factor}

def kernel(r):
    r[0] = helper(r[0]) + cpu_helper(r[1])
"""


def test_register_jitable_and_njit_user_functions_are_tracked_and_proxied():
    ns = notebook_namespace()
    run_cell(ns, JITABLE_CELL.format(factor=2.0))
    cache = KernelCache()
    before = cache.compile(ns["kernel"], "void(float32[:])", SM80)
    assert any(name.startswith("device function helper") for name in before.stages["typing"].components)
    run_cell(ns, JITABLE_CELL.format(factor=4.0))
    after = assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80, differs_from=before)
    assert "device function helper: code changed" in after.stages["typing"].reasons
    fast = assert_fresh(cache, ns["kernel"], "void(float32[:])", SM80.replace(fastmath=True))
    # lowered with their own options, as numba does, not the kernel's
    assert lowered_flags(fast, "helper") == lowered_flags(after, "helper")


MODULE_ACROSS_PROCESSES = """
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
(folder / "procconsts.py").write_text(f"K = {sys.argv[2]}\\n")
sys.path.insert(0, str(folder))
import procconsts
from gpucache_ext import CompileConfig, KernelCache

def kernel(r):
    r[0] = procconsts.K

res = KernelCache(directory=folder / "cache").compile(kernel, "void(int64[:])", CompileConfig(sm=80))
json.dump({"hit": res.hit, "ptx": res.ptx}, sys.stdout)
"""


@pytest.mark.slow
def test_edited_user_module_misses_the_disk_tier_in_a_new_process(tmp_path):
    first, second, third = in_new_processes(MODULE_ACROSS_PROCESSES, tmp_path, (3, 5, 3))
    assert not first["hit"] and not second["hit"] and third["hit"]
    assert third["ptx"] == first["ptx"] != second["ptx"]


def test_module_edited_between_cells_recompiles_in_the_magic(ip, user_package):
    write(user_package / "cellconsts.py", "K = 3\n")
    cell = '''%%gpukernel --sm 80 --quiet
from numba import cuda
import cellconsts

@cuda.jit("void(int64[:])")
def read_k(r):
    r[0] = cellconsts.K
'''
    ip.run_cell(cell).raise_error()
    first = ip.user_ns["read_k"].cubin
    write(user_package / "cellconsts.py", "K = 9\n")
    ip.run_cell("import importlib, cellconsts\nimportlib.reload(cellconsts)").raise_error()
    ip.run_cell(cell).raise_error()
    kernel = ip.user_ns["read_k"]
    assert kernel.cubin != first
    assert kernel.cubin == KernelCache().compile(kernel.py_func, "void(int64[:])", SM80).cubin
