"""A Kernel offers what numba-cuda's dispatcher offers users (on the simulator here)."""

import numpy as np
import pytest

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError
from gpucache_ext.results import SassUnavailable

from .test_cache import notebook_namespace, run_cell

SOURCE = """
import numpy as np

TABLE = np.arange(4, dtype=np.float32)

def add_table(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = x[i] + TABLE[i % 4]
"""


@pytest.fixture
def kernel():
    ns = notebook_namespace()
    run_cell(ns, SOURCE)
    return Kernel(ns["add_table"], [], CompileConfig(sm=80), KernelCache(), simulate=True)


def arrays(n=10):
    return np.zeros(n, np.float32), np.arange(n, dtype=np.float32)


def test_forall_and_configure_launch_like_numbas(kernel):
    r, x = arrays()
    kernel.forall(r.size)(r, x)
    assert np.array_equal(r, x + np.arange(r.size) % 4)
    r[:] = 0
    kernel.configure(2, 8)(r, x)
    assert np.array_equal(r, x + np.arange(r.size) % 4)
    r[:] = -1
    kernel.forall(0)(r, x)
    assert (r == -1).all()
    with pytest.raises(ValueError, match="negative"):
        kernel.forall(-1)


def test_specialize_overloads_and_per_signature_getters(kernel):
    r, x = arrays()
    special = kernel.specialize(r, x)
    assert special.specialized and not kernel.specialized
    assert list(special.overloads) == special.signatures and len(special.signatures) == 1
    assert special.definitions == special.overloads
    with pytest.raises(RuntimeError, match="already specialized"):
        special.specialize(r, x)
    result = special.last
    assert special.get_regs_per_thread() == result.resources["registers"] > 0
    assert special.get_shared_mem_per_block() == 0
    assert special.get_local_mem_per_thread() == result.resources["local_bytes"]
    assert special.get_const_mem_size() == result.resources["user_constant_bytes"] >= 16  # TABLE
    # a kernel with several signatures answers per signature, as numba's
    kernel.compile("void(float32[:], float32[:])")
    kernel.compile("void(float64[:], float64[:])")
    per_signature = kernel.get_regs_per_thread()
    assert isinstance(per_signature, dict) and len(per_signature) == 2
    f64 = next(sig for sig in per_signature if "float64" in str(sig[0]))
    assert kernel.inspect_asm(f64) == kernel.overloads[f64].ptx
    assert kernel.inspect_asm("void(float64[:], float64[:])") == kernel.overloads[f64].ptx
    assert set(kernel.inspect_llvm()) == set(per_signature)
    with pytest.raises(LaunchError, match="lto"):
        kernel.inspect_lto_ptx(f64)


def test_what_needs_hardware_or_is_left_out_says_so(kernel):
    kernel.compile("void(float32[:], float32[:])")
    with pytest.raises(LaunchError, match="needs a GPU"):
        kernel.get_max_threads_per_block()
    with pytest.raises(AttributeError, match="does not offer numba's inspect_types"):
        kernel.inspect_types()
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        kernel.nonsense
    try:
        sass = kernel.inspect_sass()
    except SassUnavailable as exc:  # no nvdisasm here: the error says where to get it
        assert "nvidia-cuda-nvdisasm" in str(exc)
    else:
        assert kernel.last.entry_name in next(iter(sass.values()))
