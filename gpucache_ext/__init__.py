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
_default_directory = None


def default_cache() -> KernelCache:
    """The process-wide `KernelCache` that the %%gpukernel magic uses.

    Made on first use by `KernelCache.from_environment`: a disk tier in
    ``GPUCACHE_DIR`` (default: the platform's user cache folder; ``off`` for
    none, or the magic's ``cache_dir`` setting), and a shared Redis tier when
    ``GPUCACHE_REDIS_URL`` is set.
    """
    global _default_cache
    if _default_cache is None:
        _default_cache = KernelCache.from_environment(directory=_default_directory)
    return _default_cache


def set_default_cache_directory(directory) -> None:
    """Use `directory` for the default cache's disk tier (from the next `default_cache()`)."""
    global _default_cache, _default_directory
    _default_directory = directory
    _default_cache = None


def inspector(cache=None):
    """The live cache inspector widget (ipywidgets) of `cache`, default the magic's.

    Per layer hits, misses, entries, bytes and compile time; a chart of hits
    and misses per cell; the entries with their explanations; actions to clear
    a layer, evict or recompile an entry.  ``%gpucache`` shows it.
    """
    from .widgets import inspector as _inspector

    return _inspector(cache)


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
    "default_cache", "set_default_cache_directory", "inspector",
    "FIELD_STAGES", "STAGES",
    "GpuCacheError", "ConfigError", "CompileError", "UnsupportedKernelError",
]
__version__ = "0.1.0"
