"""A kernel written for numba-cuda compiled by numba-cuda-mlir (``backend="mlir"``,
what a sweep ``--backend numba-cuda,mlir`` compiles): the PTX numba-cuda-mlir
gives the same source with its import swapped, device functions and globals
included; numba-cuda objects it has no namesake for refused by name.
"""

import pytest

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")
pytest.importorskip("numba_cuda", reason="numba-cuda is not installed: nothing to translate")

from gpucache_ext import CompileConfig, KernelCache, samples  # noqa: E402
from gpucache_ext.errors import UnsupportedKernelError  # noqa: E402

SWAPS = (("from numba import cuda, float32",
          "from numba_cuda_mlir import cuda\nfrom numba_cuda_mlir.cuda import float32"),
         ("from numba import cuda", "from numba_cuda_mlir import cuda"))


def load(source: str, swapped: bool) -> dict:
    """`source` exec'd as a cell's code is (one file name, one module, whichever import)."""
    if swapped:
        for numba_cuda, mlir in SWAPS:
            if numba_cuda in source:
                source = source.replace(numba_cuda, mlir)
                break
        else:
            raise AssertionError("no numba-cuda import to swap")
    namespace = {"__name__": "translated_sample"}
    exec(compile(source, "<translated sample>", "exec"), namespace)
    return namespace


CASES = [(samples.AXPY, "axpy", samples.AXPY_SIG), (samples.MATMUL, "matmul", samples.MATMUL_SIG),
         (samples.TOTAL, "total", samples.TOTAL_SIG)]
CONFIGS = [CompileConfig(sm=86), CompileConfig(sm=80, opt=0), CompileConfig(sm=90, fastmath=True, lineinfo=True)]


@pytest.mark.parametrize("source,name,sig", CASES, ids=[name for _, name, _ in CASES])
def test_its_ptx_is_numba_cuda_mlirs_for_the_source_with_the_import_swapped(source, name, sig):
    for config in CONFIGS:
        config = config.replace(backend="mlir")
        kernel = load(source, swapped=False)[name]
        assert type(kernel).__module__.startswith("numba.cuda")  # (numba-cuda's own kernel)
        translated = KernelCache().compile(kernel, sig, config)
        native = KernelCache().compile(load(source, swapped=True)[name], sig, config)
        assert translated.ptx == native.ptx, config
        assert translated.config.backend == native.config.backend == "mlir"
        assert ".target sm_%d" % config.sm in translated.ptx


def test_a_device_function_is_compiled_over_its_own_snapshot():
    source = '''
from numba import cuda
SCALE = 2.0

@cuda.jit(device=True)
def scaled(x):
    return x * SCALE

@cuda.jit
def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = scaled(x[i])
'''
    namespace = load(source, swapped=False)
    cache, config = KernelCache(), CompileConfig(sm=86, backend="mlir")
    before = cache.compile(namespace["kernel"], "void(float32[:], float32[:])", config)
    namespace["SCALE"] = 7.0  # (the device function's global: its snapshot, and the kernel's token, change)
    after = cache.compile(namespace["kernel"], "void(float32[:], float32[:])", config)
    assert before.stages["typing"].token != after.stages["typing"].token
    assert "0f40E00000" in after.ptx and "0f40E00000" not in before.ptx  # (7.0, as PTX writes it)
    swapped = load(source.replace("SCALE = 2.0", "SCALE = 7.0"), swapped=True)
    assert after.ptx == KernelCache().compile(swapped["kernel"], "void(float32[:], float32[:])", config).ptx


def test_argument_types_of_numba_cuda_are_taken_and_what_has_no_namesake_is_refused():
    from numba.cuda import types

    kernel = load(samples.AXPY, swapped=False)["axpy"]
    config = CompileConfig(sm=86, backend="mlir")
    typed = KernelCache().compile(kernel, (types.float32[::1], types.float32, types.float32[::1],
                                           types.float32[::1]), config)  # (as a launch types its arguments)
    assert "axpy" in typed.entry_name
    unknown = load('''
import numba
from numba import cuda

@cuda.jit
def kernel(r):
    r[0] = numba.float32(1.0)
''', swapped=False)["kernel"]
    with pytest.raises(UnsupportedKernelError, match="reads the global numba .*no namesake.*--backend numba-cuda"):
        KernelCache().compile(unknown, "void(float32[:])", config)


def test_a_cell_compiles_its_numba_cuda_kernels_with_both_compilers_side_by_side(ip, capsys):
    """``--backend numba-cuda,mlir``: "does my kernel compile as well under the
    successor?" in one cell: both builds, their registers and sizes side by
    side; launches run numba-cuda's (the kernel's own), which stays bound."""
    import numpy as np
    from IPython.core.error import UsageError

    from gpucache_ext.errors import ConfigError

    from .helpers import cell

    line = f"--sm 86 --backend numba-cuda,mlir --sig '{samples.AXPY_SIG}'"
    cell(ip, line, samples.AXPY)
    shown = capsys.readouterr().out
    kernel = ip.user_ns["axpy"]
    variants = kernel.variants
    assert [v.config.backend for v in variants] == ["numba-cuda", "mlir"] and [v.bound for v in variants] == [True,
                                                                                                            False]
    (numba_cuda,), (mlir,) = (tuple(v.results.values()) for v in variants)
    assert list(numba_cuda.stages) == ["typing", "llvm", "ptx", "cubin"]
    assert list(mlir.stages) == ["typing", "mlir", "ptx", "cubin"]
    native = KernelCache().compile(load(samples.AXPY, swapped=True)["axpy"], samples.AXPY_SIG,
                                   CompileConfig(sm=86, backend="mlir"))
    assert mlir.ptx.replace("translated_sample", "__main__") == native.ptx.replace("translated_sample", "__main__")
    assert "first compile of axpy with numba-cuda-mlir" in shown  # (not explained against numba-cuda's entries)
    moved = f"registers {numba_cuda.resources['registers']} -> {mlir.resources['registers']} when backend went " \
            "numba-cuda -> mlir"
    assert numba_cuda.resources["registers"] == mlir.resources["registers"] or moved in shown, shown
    with pytest.raises(ConfigError, match="built to compare, not to launch"):
        kernel.use(backend="mlir")
    x = np.arange(64, dtype=np.float32)
    r = np.zeros_like(x)
    kernel[1, 64](r, np.float32(2), x, x)  # (numba-cuda's build: on its simulator without a GPU)
    assert np.allclose(r, 3 * x)
    cell(ip, line, samples.AXPY)  # again: every stage of both a hit
    assert all(s.hit for v in ip.user_ns["axpy"].variants for r in v.results.values() for s in r.stages.values())
    with pytest.raises(UsageError, match="compare both compilers' builds of numba-cuda kernels with --backend "
                                         "numba-cuda,mlir"):
        cell(ip, "--sm 86 --backend mlir", samples.AXPY)
