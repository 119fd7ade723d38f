"""Proof by difference on numba-cuda-mlir's own kernels (tests/mlir_corpus.py,
vendored from its repository): each compiles through the pipeline, for several
targets and options, to exactly the PTX of numba-cuda-mlir's own
``compile_ptx``, and a second compile hits every stage.
"""

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("numba_cuda_mlir", reason="numba-cuda-mlir is not installed (gpucache_ext[mlir]: Python 3.11+)")

from gpucache_ext import CompileConfig, KernelCache  # noqa: E402
from gpucache_ext.backends.numba_cuda_mlir import compiler  # noqa: E402

from .mlir_corpus import CORPUS  # noqa: E402

from numba_cuda_mlir import cuda as mlir_cuda  # noqa: E402

CONFIGS = (CompileConfig(sm=86), CompileConfig(sm=80, opt=0), CompileConfig(sm=90, fastmath=True))

def own_ptx(kernel, sig, config):
    with compiler.answering_host_query(config.cc), compiler._numbered_afresh():
        ptx, _ = mlir_cuda.compile_ptx(kernel.py_func, sig, cc=config.cc, opt=config.opt != 0,
                                       fastmath=config.fastmath, lineinfo=config.lineinfo)
    return ptx


def test_the_corpus_is_numba_cuda_mlirs():
    assert len(CORPUS) >= 8
    for kernel, sig in CORPUS:
        assert type(kernel).__module__.startswith("numba_cuda_mlir"), kernel
        assert isinstance(sig, str) and sig.startswith("void("), sig
    assert len({kernel.__name__ for kernel, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("kernel,sig", CORPUS, ids=[kernel.__name__ for kernel, _ in CORPUS])
def test_ptx_is_numba_cuda_mlirs_own(kernel, sig):
    cache = KernelCache()
    for config in CONFIGS:
        result = cache.compile(kernel, sig, config)
        assert result.config.backend == "mlir"
        assert result.ptx == own_ptx(kernel, sig, config), config.summary()
        again = cache.compile(kernel, sig, config)
        assert all(s.hit for s in again.stages.values()), (config.summary(), again.stages)
        assert again.ptx == result.ptx
        # a second compile from nothing in this process: the same bytes (numba-cuda-mlir's counters,
        # of shared arrays, strings and the constant arrays of globals, are numbered afresh per kernel)
        assert KernelCache().compile(kernel, sig, config).ptx == result.ptx
