"""gpucache_ext: a staged, per-stage-cached compile pipeline for numba-cuda kernels.

    from gpucache_ext import CompileConfig, KernelCache
    cache = KernelCache()
    res = cache.compile(func, "void(float32[:], float32[:])", CompileConfig(sm=86))
    res.layers["ptx"].hit, res.ptx, res.cubin

The modules tell the pipeline's story: `config` (what can change the output),
`tokens` (how inputs are hashed), `toolchain` (tool versions per stage),
`sources` (what a kernel's source depends on), `stages` (typing, llvm, ptx,
cubin), `cache` (the per-stage tiers and miss explanations).
"""

from .config import FIELD_STAGES, STAGES, CompileConfig
from .errors import CompileError, ConfigError, GpuCacheError, UnsupportedKernelError
from .cache import CompileResult, KernelCache, LayerResult
from .kernel import Kernel, LaunchError

_default_cache = None


def default_cache() -> KernelCache:
    """The process-wide `KernelCache` that the %%gpukernel magic uses."""
    global _default_cache
    if _default_cache is None:
        _default_cache = KernelCache()
    return _default_cache

def load_ipython_extension(ipython):
    """``%load_ext gpucache_ext``: registers %%gpukernel and %gpucache."""
    from .magic import load

    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext gpucache_ext``: removes what loading registered."""
    from .magic import unload

    unload(ipython)


__all__ = [
    "CompileConfig", "KernelCache", "CompileResult", "LayerResult", "Kernel", "LaunchError",
    "default_cache",
    "FIELD_STAGES", "STAGES",
    "GpuCacheError", "ConfigError", "CompileError", "UnsupportedKernelError",
]
__version__ = "0.1.0"
