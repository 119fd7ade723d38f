"""Checks that need a real NVIDIA GPU (marked `gpu`; skipped without one)."""

import numpy as np
import pytest

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError
from gpucache_ext.backends.numba_cuda.launch.kernel import device_cc

from . import kernels

pytestmark = pytest.mark.gpu


@pytest.fixture
def sm():
    major, minor = device_cc()
    return major * 10 + minor


def test_cached_cubin_launches_and_matches_numpy(sm):
    cache = KernelCache()
    kernel = Kernel(kernels.axpy, [kernels.AXPY_SIG], CompileConfig(sm=sm), cache)
    x = np.arange(1000, dtype=np.float32)
    y = np.ones_like(x)
    r = np.zeros_like(x)
    kernel[4, 256](r, np.float32(2.0), x, y)
    np.testing.assert_allclose(r, 2 * (x * kernels.SCALE) + y)
    again = Kernel(kernels.axpy, [kernels.AXPY_SIG], CompileConfig(sm=sm), cache)
    again.compile_declared()
    assert again.last.hit


def test_device_arrays_are_passed_without_copies(sm):
    from numba import cuda

    kernel = Kernel(kernels.copy, config=CompileConfig(sm=sm), cache=KernelCache())
    x = cuda.to_device(np.arange(64, dtype=np.float32))
    r = cuda.device_array(64, np.float32)
    kernel[1, 64](r, x)
    np.testing.assert_allclose(r.copy_to_host(), np.arange(64) + kernels.OFFSETS[0])


def test_target_newer_than_the_gpu_is_refused_with_the_sm_to_use(sm):
    if sm >= 120:
        pytest.skip("no newer target to try")
    kernel = Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(sm=120), KernelCache())
    with pytest.raises(LaunchError, match=f"--sm {sm}"):
        kernel[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32))


def test_linked_code_runs_float16_external_cu_and_carveout(sm, tmp_path):
    """What the cubin links (numba's float16 shims, a declare_device .cu file)
    runs, and a shared-memory carveout is accepted by the driver."""
    from .helpers import notebook_namespace, run_cell

    (tmp_path / "triple.cu").write_text(
        'extern "C" __device__ int triple(float* out, float x) { *out = 3.0f * x; return 0; }\n')
    ns = notebook_namespace()
    run_cell(ns, f"""
triple = cuda.declare_device("triple", "float32(float32)", link={str(tmp_path / "triple.cu")!r})

def halves(r, a, b):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a[i] + b[i]

def tripled(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = triple(x[i])
""")
    cache = KernelCache()
    a = np.arange(64, dtype=np.float16)
    r = np.zeros_like(a)
    Kernel(ns["halves"], [], CompileConfig(sm=sm), cache)[1, 64](r, a, a)
    np.testing.assert_array_equal(r, 2 * a)
    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    Kernel(ns["tripled"], [], CompileConfig(sm=sm), cache, {"shared_memory_carveout": "MaxL1"})[1, 64](out, x)
    np.testing.assert_allclose(out, 3 * x)


def test_a_fatbin_loads_and_the_driver_picks_the_cubin_or_compiles_the_ptx(sm):
    from gpucache_ext.keys.config import Targets

    cache = KernelCache()
    x = np.arange(256, dtype=np.float32)
    others = tuple(t for t in (75, 80, 86, 90) if t < sm)[-2:]
    r = np.zeros_like(x)
    kernel = Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(), cache, targets=others + (sm,))
    kernel[1, 256](r, x)
    np.testing.assert_allclose(r, x + kernels.OFFSETS[0])
    older = [t for t in (75, 80) if t // 10 < sm // 10]
    if not older:
        pytest.skip("no architecture of an older major to build for")
    r = np.zeros_like(x)
    Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(), cache, targets=older)[1, 256](r, x)  # its PTX
    np.testing.assert_allclose(r, x + kernels.OFFSETS[0])
    alone = Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(), cache, targets=Targets(older, ptx="none"))
    with pytest.raises(LaunchError, match=f"add {sm}"):
        alone[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32))


def test_tune_times_every_variant_and_block_and_binds_the_fastest(sm, tmp_path):
    from numba import cuda

    base = CompileConfig(sm=sm)
    cache = KernelCache(directory=tmp_path)
    kernel = Kernel(kernels.copy, [kernels.COPY_SIG], base, cache,
                    variants=[base, base.replace(max_registers=32), base.replace(fastmath=True)])
    x = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
    r = cuda.device_array(1 << 20, np.float32)
    result = kernel.tune(r, x, blocks=(128, 256, 512), runs=5)
    assert result.measured and not result.remembered and len(result.table) == 9
    assert all(ms > 0 for _, _, ms in result.table)
    fastest = min(result.table, key=lambda row: row[2])
    assert (result.config.summary(), result.block) == fastest[:2] and kernel.config == result.config
    kernel[result.grid, result.block](r, x)
    np.testing.assert_allclose(r.copy_to_host(), np.arange(1 << 20) + kernels.OFFSETS[0])
    again = Kernel(kernels.copy, [kernels.COPY_SIG], base, KernelCache(directory=tmp_path),
                   variants=[base, base.replace(max_registers=32), base.replace(fastmath=True)])
    reused = again.tune(r, x, blocks=(128, 256, 512))
    assert reused.remembered and (reused.config, reused.block) == (result.config, result.block)
