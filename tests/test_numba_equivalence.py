"""The pipeline compiles what numba-cuda compiles, to equivalent code.

numba-cuda's own `compile_ptx` is the reference (see `tests/equivalence.py`:
only symbol names and comment lines are normalised).
"""

import pytest

from gpucache_ext import CompileConfig, CompileError, KernelCache

from .equivalence import normalise_ptx, numba_ptx, stand_in_gpu
from .test_cache import notebook_namespace, run_cell

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
    assert isinstance(result.error_in_exec, CompileError) and "typing" in str(result.error_in_exec)


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
    assert as_f64.layers["typing"].reasons == ("device function half changed",)
    assert undeclared.layers["typing"].token != as_f64.layers["typing"].token
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
    assert again.layers["cubin"].tier == "disk" and again.cooperative
    assert again.cubin == result.cubin
