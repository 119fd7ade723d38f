"""What a Kernel loads on a GPU, decided without one: the default target,
an image per device architecture, PTX only where the driver can use it."""

import numpy as np
import pytest

from gpucache_ext import CompileConfig, Kernel, KernelCache, LaunchError
from gpucache_ext.backends.numba_cuda.launch.device import default_sm
from gpucache_ext.keys.config import FALLBACK_SM

from . import kernels


def test_one_function_decides_the_default_target(monkeypatch):
    monkeypatch.delenv("GPUCACHE_SM", raising=False)
    assert default_sm() == FALLBACK_SM == 86  # no GPU here
    monkeypatch.setenv("GPUCACHE_SM", "8.0")
    assert default_sm() == 80 and default_sm("75") == 75
    kernel = Kernel(kernels.copy, cache=KernelCache())
    assert kernel.config.sm == 80 and not kernel.pinned  # it follows the device it meets
    assert Kernel(kernels.copy, config=CompileConfig(sm=86), cache=KernelCache()).pinned
    assert Kernel(kernels.copy, targets="80,90", cache=KernelCache()).pinned


def test_a_kernel_that_follows_the_device_compiles_its_architecture_through_the_cache():
    cache = KernelCache()
    kernel = Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(sm=86), cache, pinned=False)
    (result,) = kernel.compile_declared()
    image = kernel.image_for(result, (9, 0))  # a GPU newer than the target
    fresh = KernelCache().compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=90))
    assert image.code_type == "cubin" and bytes(image.code) == fresh.cubin
    again = cache.compile(kernels.copy, kernels.COPY_SIG, CompileConfig(sm=90))
    assert all(layer.hit for layer in again.stages.values())  # built once, through the cache
    assert kernel.image_for(result, (8, 9)).code == result.cubin  # sm_86's cubin runs on sm_89


def test_a_pinned_target_gives_the_driver_ptx_only_where_it_can_compile_it_alone():
    cache = KernelCache()
    kernel = Kernel(kernels.copy, [kernels.COPY_SIG], CompileConfig(sm=86), cache)
    (result,) = kernel.compile_declared()
    image = kernel.image_for(result, (9, 0))
    assert image.code_type == "ptx" and image.code == result.ptx.encode()  # bytes: a str is a file name
    with pytest.raises(LaunchError, match="sm_75.*use --sm 75"):
        kernel.image_for(result, (7, 5))
    synced = Kernel(kernels.grid_sync, [kernels.GRID_SYNC_SIG], CompileConfig(sm=80), cache)
    (cooperative,) = synced.compile_declared()
    assert cooperative.cooperative
    with pytest.raises(LaunchError, match="libcudadevrt.*use --sm 90"):
        synced.image_for(cooperative, (9, 0))  # the driver's PTX compiler links nothing
    fat = Kernel(kernels.copy, [kernels.COPY_SIG], cache=cache, targets="80,90")
    (built,) = fat.compile_declared()
    assert fat.image_for(built, (8, 6)).code_type == "fatbin"
    with pytest.raises(LaunchError, match="add 75 to --sm"):
        fat.image_for(built, (7, 5))


def test_numba_dispatches_and_the_variants_are_numbas_overloads():
    from numba.cuda.dispatcher import CUDADispatcher, _Kernel

    kernel = Kernel(kernels.copy, config=CompileConfig(sm=80), cache=KernelCache(), simulate=True)
    assert isinstance(kernel, CUDADispatcher)
    r, x = np.zeros(4, np.float32), np.arange(4, dtype=np.float32)
    kernel[1, 4](r, x)
    kernel[1, 4](np.zeros(4), np.arange(4.0))
    assert len(kernel.overloads) == 2 and all(isinstance(k, _Kernel) for k in kernel.overloads.values())
    variant = kernel.overloads[kernel.signatures[0]]
    assert variant.cubin == kernel.results[kernel.signatures[0]].cubin  # the CompileResult's attributes
    assert variant.regs_per_thread == variant.resources["registers"]  # no GPU: the compile's figure
    with pytest.raises(LaunchError, match="needs a GPU"):
        _ = variant.max_threads_per_block
