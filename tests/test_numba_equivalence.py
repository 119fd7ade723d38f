"""The pipeline compiles what numba-cuda compiles, to equivalent code.

numba-cuda's own `compile_ptx` is the reference (see `tests/equivalence.py`:
only symbol names, module order and comment lines are normalised).  The
comparison is "equivalent up to module order and numbering" because numba's
own output differs from process to process there (its module order follows
addresses, its numbering the process's history); the pipeline's is
byte-identical in every process (tests/test_determinism.py; the exceptions
are listed in `tests/equivalence.py`).
"""

import sys

import pytest

from gpucache_ext import CompileConfig, CompileError, KernelCache

from .equivalence import normalise_ptx, numba_ptx, stand_in_gpu
from .helpers import notebook_namespace, run_cell

SM86 = CompileConfig(sm=86)

DECLARED = """
def half(x):
    return x * 0.5

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = half(x[i])
"""


def test_declared_device_signatures_cast_as_numba_casts(ip):
    # numba-cuda compiles the declared device function at once (asking the GPU
    # for its compute capability), then casts the call's argument and result.
    reference = notebook_namespace()
    run_cell(reference, DECLARED)
    with stand_in_gpu():
        reference["half"] = reference["cuda"].jit("float32(float32)", device=True)(reference["half"])
    expected = numba_ptx(reference["kernel"], "void(float64[:], float64[:])")
    assert "cvt.rn.f32.f64" in expected and "mul.f32" in expected

    ip.run_cell("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n"
                + DECLARED.replace("def half", '@cuda.jit("float32(float32)", device=True)\ndef half')
                .replace("def kernel", '@cuda.jit("void(float64[:], float64[:])")\ndef kernel')).raise_error()
    assert normalise_ptx(ip.user_ns["kernel"].ptx) == normalise_ptx(expected)

    # undeclared, the device function follows the call's float64 (also as numba)
    ip.run_cell("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n"
                + DECLARED.replace("def half", "@cuda.jit(device=True)\ndef half")
                .replace("def kernel", '@cuda.jit("void(float64[:], float64[:])")\ndef kernel')).raise_error()
    assert "mul.f32" not in ip.user_ns["kernel"].ptx and "mul.f64" in ip.user_ns["kernel"].ptx


def test_a_call_no_declared_signature_accepts_fails_as_in_numba(ip):
    result = ip.run_cell('''%%gpukernel --sm 86 --quiet
from numba import cuda

@cuda.jit("int32(int32, int32)", device=True)
def add(a, b):
    return a + b

@cuda.jit("void(float32[:], float32[:, :])")
def kernel(r, m):
    r[0] = add(m, m)
''')
    assert not result.success
    # numba's error (as numba raises it), chained to the CompileError naming the stage
    error = result.error_in_exec
    assert type(error).__name__ == "TypingError"
    assert isinstance(error.__cause__, CompileError) and error.__cause__.stage == "typing"


def test_declared_signatures_are_part_of_the_token(ip):
    def cell(signature):
        decorator = f'@cuda.jit("{signature}", device=True)' if signature else "@cuda.jit(device=True)"
        ip.run_cell("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n"
                    + DECLARED.replace("def half", f"{decorator}\ndef half")
                    .replace("def kernel", '@cuda.jit("void(float64[:], float64[:])")\ndef kernel')
                    ).raise_error()
        return ip.user_ns["kernel"].last

    as_f32, as_f64, undeclared = cell("float32(float32)"), cell("float64(float64)"), cell(None)
    assert len({as_f32.ptx, as_f64.ptx}) == 2
    assert as_f64.stages["typing"].reasons == (
        "device function half: declared signatures float32(float32) -> float64(float64)",)
    assert undeclared.stages["typing"].token != as_f64.stages["typing"].token
    again = cell("float32(float32)")
    assert again.hit and again.cubin == as_f32.cubin
    fresh = KernelCache().compile(ip.user_ns["kernel"].py_func, "void(float64[:], float64[:])", SM86)
    assert fresh.cubin == as_f32.cubin


GRID_SYNC = """
def sequential_rows(M):
    col = cuda.grid(1)
    g = cuda.cg.this_grid()
    rows = M.shape[0]
    cols = M.shape[1]
    for row in range(1, rows):
        opposite = cols - col - 1
        M[row, col] = M[row - 1, opposite] + 1
        g.sync()
"""


def test_grid_synchronisation_compiles_links_cudadevrt_and_persists(tmp_path):
    ns = notebook_namespace()
    run_cell(ns, GRID_SYNC)
    sig = "void(int32[:, ::1])"
    expected = numba_ptx(ns["sequential_rows"], sig)
    result = KernelCache(directory=tmp_path).compile(ns["sequential_rows"], sig, SM86)
    assert result.cooperative and "cudaCGGetIntrinsicHandle" in result.ptx
    assert normalise_ptx(result.ptx) == normalise_ptx(expected)
    assert result.cubin[:4] == b"\x7fELF"  # nvJitLink resolved the cudadevrt calls
    again = KernelCache(directory=tmp_path).compile(ns["sequential_rows"], sig, SM86)
    assert again.stages["cubin"].tier == "disk" and again.cooperative
    assert again.cubin == result.cubin


DEVICE_OPTIONS = """
@cuda.jit(device=True{options})
def ratio(x, y):
    return x / y

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = ratio(x[i], x[0]) + x[i] / x[1]
"""


@pytest.mark.parametrize("device_fastmath", [False, True])
@pytest.mark.parametrize("kernel_fastmath", [False, True])
def test_device_functions_are_lowered_with_their_own_options(device_fastmath, kernel_fastmath):
    # numba-cuda lowers a device function with its own decorator's options,
    # whatever the calling kernel's (its test_device_fastmath_propagation)
    ns = notebook_namespace()
    run_cell(ns, DEVICE_OPTIONS.format(options=", fastmath=True" if device_fastmath else ""))
    sig = "void(float32[:], float32[:])"
    expected = numba_ptx(ns["kernel"], sig, fastmath=kernel_fastmath)
    result = KernelCache().compile(ns["kernel"], sig, CompileConfig(sm=86, fastmath=kernel_fastmath))
    assert normalise_ptx(result.ptx) == normalise_ptx(expected)
    assert ("div.approx" in result.ptx) == (device_fastmath or kernel_fastmath)
    # each division carries its own function's fast-math flags
    # (a fast float32 division calls libdevice's __nv_fast_fdividef)
    divisions = [line for line in result.llvm_ir.splitlines()
                 if " fdiv " in line or 'call float @"__nv_fast_fdividef' in line]
    assert len(divisions) == 2
    assert sum(" fdiv " not in line or " fdiv fast " in line for line in divisions) == device_fastmath + kernel_fastmath


def test_a_device_functions_options_are_part_of_the_token():
    cache = KernelCache()
    results = {}
    for options in ("", ", fastmath=True", ", inline='always'", ", forceinline=True"):
        ns = notebook_namespace()
        run_cell(ns, DEVICE_OPTIONS.format(options=options))
        results[options] = cache.compile(ns["kernel"], "void(float32[:], float32[:])", SM86)
    assert len({r.stages["llvm"].token for r in results.values()}) == 4
    assert all(any(why.startswith("device function ratio: device options") for why in r.stages["typing"].reasons)
               for options, r in results.items() if options)
    assert results[", fastmath=True"].ptx != results[""].ptx


def test_numbas_own_lto_default_is_not_taken_for_an_explicit_option():
    from numba import cuda

    from gpucache_ext.backends.numba_cuda.options import explicit_options

    def kernel(r):
        r[0] = 1

    # numba turns lto on by itself wherever nvJitLink allows; the cache keeps its default
    assert explicit_options(cuda.jit(kernel).targetoptions) == {}
    assert explicit_options(cuda.jit(kernel, fastmath=1).targetoptions) == {"fastmath": 1}
    assert explicit_options(cuda.jit(kernel, debug=True, opt=False, lto=True).targetoptions)["lto"] is True


def test_record_arrays_are_baked_byte_for_byte_padding_included():
    import numpy as np

    aligned = np.dtype([("a", np.int8), ("b", np.float64)], align=True)
    ns = notebook_namespace()
    raw = np.frombuffer(bytes(range(7, 7 + 2 * aligned.itemsize)), dtype=np.uint8).copy()
    ns["TABLE"] = raw.view(aligned)  # padding bytes hold 8..14, not zeros
    run_cell(ns, """
def kernel(r):
    i = cuda.grid(1)
    t = cuda.const.array_like(TABLE)
    r[i] = t[i % 2].b + t[i % 2].a
""")
    expected = numba_ptx(ns["kernel"], "void(float64[:])")
    result = KernelCache().compile(ns["kernel"], "void(float64[:])", SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(expected)
    assert "8, 9, 10" in expected  # the padding numba bakes


def test_numbas_cuda_runtime_is_refused_while_on(monkeypatch):
    from numba.cuda.core import config as nbconfig

    from gpucache_ext import UnsupportedKernelError

    ns = notebook_namespace()
    run_cell(ns, "def kernel(r):\n    r[0] = r[1:][0]\n")
    cache = KernelCache()
    monkeypatch.setattr(nbconfig, "CUDA_ENABLE_NRT", True)
    # numba would add reference counting; the cache compiles without NRT
    assert "NRT_incref" in numba_ptx(ns["kernel"], "void(float32[:])")
    with pytest.raises(UnsupportedKernelError, match="NUMBA_CUDA_ENABLE_NRT"):
        cache.compile(ns["kernel"], "void(float32[:])", SM86)
    assert all(values.entries == 0 for values in cache.stats().values())
    monkeypatch.setattr(nbconfig, "CUDA_ENABLE_NRT", False)
    assert cache.compile(ns["kernel"], "void(float32[:])", SM86).cubin


def test_a_foreign_device_array_global_is_keyed_and_baked_as_numba_bakes_it():
    import numpy as np

    host = np.zeros(4, dtype=np.float32)

    class ForeignArray:
        """Any object with the CUDA Array Interface (no shape attribute)."""

        def __init__(self, pointer):
            self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "version": 3,
                                             "data": (pointer, False), "strides": None}

    ns = notebook_namespace()
    ns["DATA"] = ForeignArray(host.ctypes.data)
    run_cell(ns, "def kernel(r):\n    r[0] = DATA[1]\n")
    result = KernelCache().compile(ns["kernel"], "void(float32[:])", SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["kernel"], "void(float32[:])"))
    assert str(host.ctypes.data + 4) in result.ptx  # the pointer is baked in, as numba does


def test_a_kernel_called_from_a_kernel_compiles_as_numbas_device_function():
    # numba compiles a @cuda.jit kernel called from another kernel as a device
    # function, with the callee's own options (its test_llvm_inliner_flag_conflict)
    ns = notebook_namespace()
    run_cell(ns, """
import math

@cuda.jit(forceinline=True)
def bar(x):
    return math.sin(x)

@cuda.jit(lineinfo=True)
def baz(x):
    return math.cos(x)

def foo(r, y):
    r[0] = bar(y) + baz(y)
""")
    sig = "void(float32[:], float32)"
    result = KernelCache().compile(ns["foo"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["foo"], sig))
    assert any("alwaysinline" in line and "bar" in line for line in result.llvm_ir.splitlines()
               if line.startswith(("define", "attributes", "declare")))
    assert "device function bar" in " ".join(result.stages["typing"].components)


def test_an_always_inlined_overload_may_return_a_new_array_as_in_numba():
    # numba's carray is an @overload(inline="always") whose implementation
    # returns an array made from a pointer: numba allows that for functions
    # inlined into their callers (its test_array's test_carray)
    from numba.cuda import types

    ns = notebook_namespace()
    run_cell(ns, """
from numba.cuda.np.numpy_support import carray

def add(a_ptr):
    a = carray(a_ptr, (1,), dtype=cuda.float32)
    a[0] += 1.2
""")
    sig = (types.CPointer(types.float32),)
    result = KernelCache().compile(ns["add"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["add"], sig))


def test_debug_sections_compare_their_text_not_their_layout_bytes():
    def ptx(name: bytes, abbrev: int) -> str:
        data = bytes([abbrev, 0x11, 0x01]) + b"\0" + name + b"\0" + bytes([0x03, 0x08])
        return (".version 8.5\n.target sm_86\n.address_size 64\n.section .debug_info\n{\n"
                + ".b8 " + ",".join(str(b) for b in data) + "\n.b32 120\n}\n")

    same = normalise_ptx(ptx(b"kernel.py", 3))
    assert normalise_ptx(ptx(b"kernel.py", 7)) == same  # an abbreviation code: layout
    assert normalise_ptx(ptx(b"kernel2.py", 3)) != same  # a file name: compared


CPU_ADD = """
import numba

@numba.jit
def add(a, b):
    return a + b
"""

CPU_KERNEL = """
def add_kernel(ary):
    i = cuda.grid(1)
    ary[i] = {call}(ary[i], 1)
"""


def test_a_cpu_jit_function_called_from_a_kernel_compiles_as_numbas_device_function():
    # numba-cuda compiles a CPU dispatcher a kernel calls as a device function,
    # with the dispatcher's own options (its test_device_func's test_cpu_dispatcher)
    ns = notebook_namespace()
    run_cell(ns, CPU_ADD + CPU_KERNEL.format(call="add"))
    sig = "void(int64[:])"
    result = KernelCache().compile(ns["add_kernel"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["add_kernel"], sig))
    assert "device function add" in result.stages["typing"].components
    ns["add"](1, 2)  # compiled for the CPU too: nothing changes for the kernel
    again = KernelCache().compile(ns["add_kernel"], sig, SM86)
    assert again.cubin == result.cubin


def test_a_cpu_jit_function_read_through_a_module_compiles_as_numbas(tmp_path, monkeypatch):
    # its test_cpu_dispatcher_other_module, with the module a file of its own
    import importlib

    (tmp_path / "gpucache_cpu_helpers.py").write_text(CPU_ADD)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("gpucache_cpu_helpers")
    monkeypatch.setitem(sys.modules, "gpucache_cpu_helpers", module)  # (removed again afterwards)
    ns = notebook_namespace()
    ns["helpers"] = module
    run_cell(ns, CPU_KERNEL.format(call="helpers.add"))
    sig = "void(int64[:])"
    cache = KernelCache()
    result = cache.compile(ns["add_kernel"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["add_kernel"], sig))
    assert "device function helpers.add" in result.stages["typing"].components
    # another CPU function in its place is another device function
    run_cell(module.__dict__, "@numba.jit\ndef add(a, b):\n    return a - b\n")
    changed = cache.compile(ns["add_kernel"], sig, SM86)
    assert not changed.hit and changed.ptx != result.ptx
    assert normalise_ptx(changed.ptx) == normalise_ptx(numba_ptx(ns["add_kernel"], sig))


def test_a_cpu_jit_function_that_cannot_compile_fails_as_in_numba():
    # explicit signatures turn a CPU dispatcher's compiling off, and numba-cuda
    # then refuses it in a kernel (its test_cpu_dispatcher_invalid)
    ns = notebook_namespace()
    run_cell(ns, CPU_ADD.replace("@numba.jit", '@numba.jit("(i4, i4)")') + CPU_KERNEL.format(call="add"))
    sig = "void(int64[:])"
    message = "using cpu function on device but its compilation is disabled"
    with pytest.raises(Exception, match=message):
        numba_ptx(ns["add_kernel"], sig)
    with pytest.raises(CompileError, match=message) as raised:
        KernelCache().compile(ns["add_kernel"], sig, SM86)
    assert raised.value.stage == "typing"


def test_a_function_passed_as_an_argument_is_named_as_numba_names_it():
    # numba names the type of a function passed to a device function after its
    # dispatcher's repr, address included (twelve hex digits), in the callee's
    # mangled name: the pipeline's number in its place must have that length,
    # or the symbol's length prefix differs (its test_make_function_to_jit_function)
    ns = notebook_namespace()
    run_cell(ns, """
@cuda.jit
def consumer(func, *args):
    return func(*args)

def closure():
    @cuda.jit
    def inner(x):
        return x * 3
    return inner

inner = closure()

def kernel(out, x):
    out[0] = consumer(inner, x)
""")
    sig = "void(int64[:], int64)"
    result = KernelCache().compile(ns["kernel"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["kernel"], sig))
