"""Code kernels link besides their own: external device functions
(``cuda.declare_device(..., link=[...])``), numba-cuda's float16 shims and its
reshape helper.  Real NVRTC and nvJitLink, no GPU."""

from __future__ import annotations

import textwrap

import pytest

from gpucache_ext import CompileConfig, KernelCache, UnsupportedKernelError

from .equivalence import normalise_ptx, numba_ptx
from .helpers import notebook_namespace, run_cell

SM86 = CompileConfig(sm=86)
SIG = "void(float32[:], float32[:])"

CALLER = """
scale = cuda.declare_device("scale", "float32(float32)", link={path!r})

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = scale(x[i])
"""


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A .cu file that includes a header beside it, and a header it does not
    include; numba-cuda finds headers on CUDA_NVRTC_EXTRA_SEARCH_PATHS."""
    from numba.cuda.core import config

    monkeypatch.setattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", str(tmp_path))
    write(tmp_path / "factor.h", "#define FACTOR 3.0f\n")
    write(tmp_path / "unrelated.h", "#define OTHER 1\n")
    write(tmp_path / "scale.cu", """
        #include "factor.h"
        extern "C" __device__ int scale(float* out, float x) {
            *out = x * FACTOR;
            return 0;
        }
    """)
    return tmp_path


def compile_caller(cache, folder):
    ns = notebook_namespace()
    run_cell(ns, CALLER.format(path=str(folder / "scale.cu")))
    return ns, cache.compile(ns["kernel"], SIG, SM86)


def test_a_declared_external_function_links_its_cu_file(sources):
    ns, result = compile_caller(KernelCache(), sources)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["kernel"], SIG))
    assert ".extern .func" in result.ptx and "scale" in result.ptx
    assert result.cubin[:4] == b"\x7fELF"  # nvJitLink resolved scale from the NVRTC output
    assert [link.name for link in result.links] == ["scale.cu"]


def test_editing_the_cu_file_or_a_header_it_includes_recompiles_and_nothing_else_does(sources):
    cache = KernelCache()
    _, first = compile_caller(cache, sources)
    _, again = compile_caller(cache, sources)
    assert again.hit

    write(sources / "unrelated.h", "#define OTHER 2\n")
    _, unrelated = compile_caller(cache, sources)
    assert unrelated.hit and unrelated.cubin == first.cubin

    # the linked code changes only the cubin: exactly that stage rebuilds
    write(sources / "factor.h", "#define FACTOR 5.0f\n")
    _, header = compile_caller(cache, sources)
    assert [stage for stage, layer in header.stages.items() if not layer.hit] == ["cubin"]
    assert any("linked code" in reason for reason in header.stages["cubin"].reasons)
    assert header.cubin != first.cubin and header.ptx == first.ptx

    (sources / "scale.cu").write_text((sources / "scale.cu").read_text().replace("x * FACTOR", "x + FACTOR"))
    _, body = compile_caller(cache, sources)
    assert [stage for stage, layer in body.stages.items() if not layer.hit] == ["cubin"]
    assert body.cubin not in (first.cubin, header.cubin)
    # the same final state compiled fresh gives the same artifacts
    _, fresh = compile_caller(KernelCache(), sources)
    assert fresh.cubin == body.cubin and fresh.ptx == body.ptx


def test_linked_code_persists_with_the_stages_that_carry_it(sources, tmp_path_factory):
    directory = tmp_path_factory.mktemp("cache")
    _, first = compile_caller(KernelCache(directory=directory), sources)
    # a new process would find ptx on disk but relink the cubin from it
    assert KernelCache(directory=directory).evict("cubin", first.stages["cubin"].token)
    _, relinked = compile_caller(KernelCache(directory=directory), sources)
    assert relinked.stages["ptx"].tier == "disk" and not relinked.stages["cubin"].hit
    assert relinked.cubin == first.cubin
    assert [link.digest for link in relinked.links] == [link.digest for link in first.links]


def test_a_linked_file_that_cannot_be_read_is_refused_by_name(tmp_path):
    ns = notebook_namespace()
    run_cell(ns, CALLER.format(path=str(tmp_path / "missing.cu")))
    with pytest.raises(UnsupportedKernelError, match="missing.cu"):
        KernelCache().compile(ns["kernel"], SIG, SM86)


FP16 = """
def add(r, a, b):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a[i] + b[i]

def mul(r, a, b):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a[i] * b[i]
"""


def test_float16_links_numbas_shims_cut_down_to_what_the_kernel_calls():
    ns = notebook_namespace()
    run_cell(ns, FP16)
    sig = "void(float16[:], float16[:], float16[:])"
    first = KernelCache().compile(ns["add"], sig, SM86)
    assert normalise_ptx(first.ptx) == normalise_ptx(numba_ptx(ns["add"], sig))
    assert first.cubin[:4] == b"\x7fELF"
    (shim,) = first.links
    assert b"operator+" in shim.data and b"operator*" not in shim.data
    # numba's shim source grows with every kernel compiled in the process;
    # what a kernel links does not
    KernelCache().compile(ns["mul"], sig, SM86)
    numba_ptx(ns["mul"], sig)
    again = KernelCache().compile(ns["add"], sig, SM86)
    assert again.links == first.links and again.cubin == first.cubin


def test_reshape_links_numbas_helper():
    ns = notebook_namespace()
    run_cell(ns, """
def kernel(r, x):
    m = x.reshape((2, -1))
    r[0] = m[1, 0]
""")
    sig = "void(float32[:], float32[::1])"
    result = KernelCache().compile(ns["kernel"], sig, SM86)
    assert "numba_attempt_nocopy_reshape" in result.ptx
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["kernel"], sig))
    assert result.cubin[:4] == b"\x7fELF"


def test_link_code_with_a_setup_callback_of_the_users_is_refused():
    from numba.cuda import CUSource

    from gpucache_ext.toolchain import linking

    source = CUSource('extern "C" __device__ int f(int* r, int x) { *r = x; return 0; }',
                      setup_callback=lambda *args: None)
    with pytest.raises(UnsupportedKernelError, match="setup or teardown callbacks"):
        linking.read(source)
    assert linking.read(CUSource('extern "C" __device__ int g() { return 0; }')).kind == "cu"


def test_cffi_from_buffer_passes_a_pointer_to_external_code_as_numba_does(sources):
    import cffi

    ns = notebook_namespace()
    ns["ffi"] = cffi.FFI()
    write(sources / "total.cu", """
        extern "C" __device__ int total(float* out, float* values, int n) {
            float s = 0; for (int i = 0; i < n; i++) s += values[i]; *out = s; return 0;
        }
    """)
    run_cell(ns, f"""
total = cuda.declare_device("total", "float32(CPointer(float32), int32)", link={str(sources / "total.cu")!r})

def kernel(r, x):
    r[0] = total(ffi.from_buffer(x), len(x))
""")
    sig = "void(float32[::1], float32[::1])"  # from_buffer needs contiguous arrays
    result = KernelCache().compile(ns["kernel"], sig, SM86)
    assert normalise_ptx(result.ptx) == normalise_ptx(numba_ptx(ns["kernel"], sig))
    assert result.cubin[:4] == b"\x7fELF"
    # another FFI object (numba types them all alike) is the same kernel
    ns["ffi"] = cffi.FFI()
    assert KernelCache().compile(ns["kernel"], sig, SM86).stages["typing"].token == result.stages["typing"].token


def test_a_float16_cell_compiles_and_runs_on_the_simulator(ip):
    import numpy as np

    ip.run_cell('''%%gpukernel --sm 86 --quiet
from numba import cuda
import numpy as np

@cuda.jit("void(float16[:], float16[:], float16[:])")
def add(r, a, b):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a[i] + b[i]

a = np.arange(8, dtype=np.float16)
r = np.zeros_like(a)
add[1, 8](r, a, a)
''').raise_error()
    assert np.array_equal(ip.user_ns["r"], 2 * np.arange(8, dtype=np.float16))
    result = ip.user_ns["add"].last
    assert result.cubin[:4] == b"\x7fELF" and [link.kind for link in result.links] == ["cu"]


def test_the_audit_recompiles_a_kernel_with_external_code_to_the_same_bytes(sources, tmp_path_factory):
    directory = tmp_path_factory.mktemp("cache")
    cache = KernelCache(directory=directory)
    compile_caller(cache, sources)
    ns, again = compile_caller(cache, sources)
    outcome = cache.compile(ns["kernel"], SIG, SM86, audit=True).audit
    assert outcome.wait(60) and outcome.state == "passed", outcome
    # and `gpucache verify --recompile` rebuilds the disk entries alike
    from gpucache_ext import cli

    assert cli.main(["--dir", str(directory), "verify", "--recompile"]) == 0


KERNEL_LINK = """
scale = cuda.declare_device("scale", "float32(float32)")

@cuda.jit(link=[{path!r}])
def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = scale(x[i])
"""


def test_a_kernels_own_link_option_is_linked_and_keys_the_cubin_alone(sources):
    from numba.cuda.core import config as nbconfig

    ns = notebook_namespace()
    run_cell(ns, KERNEL_LINK.format(path=str(sources / "scale.cu")))
    dispatcher = ns["kernel"]  # numba's own, with link=: KernelCache reads it
    cache = KernelCache()
    first = cache.compile(dispatcher, SIG, SM86)
    assert [link.name for link in first.links] == ["scale.cu"] and first.cubin[:4] == b"\x7fELF"
    assert normalise_ptx(first.ptx) == normalise_ptx(numba_ptx(dispatcher.py_func, SIG))
    assert cache.compile(dispatcher, SIG, SM86).hit
    write(sources / "factor.h", "#define FACTOR 7.0f\n")
    edited = cache.compile(dispatcher, SIG, SM86)
    assert [stage for stage, layer in edited.stages.items() if not layer.hit] == ["cubin"]
    assert edited.cubin != first.cubin
    assert cache.explain(dispatcher, SIG, SM86)["cubin"] == ()
    # the plain function with link= given is the same compile
    assert cache.compile(dispatcher.py_func, SIG, SM86, link=[str(sources / "scale.cu")]).hit
    assert nbconfig.CUDA_NVRTC_EXTRA_SEARCH_PATHS == str(sources)


def test_a_cell_kernel_with_link_compiles_through_the_magic(ip, sources):
    ip.run_cell("%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n"
                + KERNEL_LINK.format(path=str(sources / "scale.cu"))).raise_error()
    kernel = ip.user_ns["kernel"]
    result = kernel.compile(SIG)
    assert [link.name for link in result.links] == ["scale.cu"] and result.cubin[:4] == b"\x7fELF"
