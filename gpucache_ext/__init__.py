"""gpucache_ext: a staged, per-stage-cached compile pipeline for numba-cuda kernels.

    from gpucache_ext import CompileConfig, KernelCache
    cache = KernelCache()
    res = cache.compile(func, "void(float32[:], float32[:])", CompileConfig(sm=86))
    res.stages["ptx"].hit, res.ptx, res.cubin

The modules tell the pipeline's story: `config` (what can change the output),
`tokens` (how inputs are hashed), `toolchain` (tool versions per stage),
`sources` (what a kernel's source depends on), `stages` (typing, llvm, ptx,
cubin), `cache` (the per-stage tiers and miss explanations).
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING

from .config import FIELD_STAGES, STAGES, CompileConfig
from .errors import CompileError, ConfigError, GpuCacheError, UnsupportedKernelError

if TYPE_CHECKING:  # for type checkers and IDEs; at run time, `__getattr__` below
    from .audit import AuditWarning
    from .cache import KernelCache
    from .decorators import jit
    from .kernel import Kernel, LaunchError
    from .results import (CacheStats, CompileResult, EntryInfo, LayerResult, Outcome, StageResult, StageStats,
                          TierStats)

# The names of modules that import numba-cuda (and so take a second or more),
# imported on first use (PEP 562): `import gpucache_ext`, the ``gpucache``
# command and reading cache files import no numba.
_LAZY = {
    "KernelCache": "cache",
    "CompileResult": "results", "StageResult": "results", "LayerResult": "results", "Outcome": "results",
    "CacheStats": "results", "StageStats": "results", "TierStats": "results", "EntryInfo": "results",
    "Kernel": "kernel", "LaunchError": "kernel", "jit": "decorators",
    "AuditWarning": "audit",
}
def __getattr__(name):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # the package's modules are attributes (``gpucache_ext.cache``), as when this file imported them
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(__all__))


# The cache of plain Python code (no IPython session): made on first use.
# A loaded extension's session keeps its own (see `gpucache_ext.ipython.session`).
_default_cache = None
_default_settings = {}


def default_cache() -> "KernelCache":
    """The cache the %%gpukernel magic uses: the loaded extension's session's
    in the running IPython, else a process-wide one.

    Made on first use by `KernelCache.from_environment`: a disk tier in
    ``GPUCACHE_DIR`` (default: the platform's user cache folder; ``off`` for
    none), and a shared Redis tier when ``GPUCACHE_REDIS_URL`` is set; the
    magic's ``cache_dir`` and ``redis_url`` settings and
    `configure_default_cache` override those.
    """
    global _default_cache
    session = _session()
    if session is not None:
        return session.cache
    if _default_cache is None:
        from .cache import KernelCache

        _default_cache = KernelCache.from_environment(**_default_settings)
    return _default_cache


def configure_default_cache(directory=None, redis_url=None, audit=None) -> None:
    """Override the environment for the default cache (from the next `default_cache()`,
    in the running IPython session too): the disk tier's `directory`, the
    shared tier's `redis_url` and `audit` (see `KernelCache`); None: as the
    settings and the environment say."""
    global _default_cache
    _default_settings.clear()
    _default_settings.update({k: v for k, v in (("directory", directory), ("redis_url", redis_url),
                                                ("audit", audit)) if v is not None})
    _default_cache = None
    session = _session()
    if session is not None:
        session.configure_cache(**_default_settings)


def _session():
    import sys

    if "IPython" not in sys.modules:  # no shell can be running: leave IPython unimported
        return None
    from .ipython.session import current

    return current()


def inspector(cache=None):
    """The live cache inspector widget (ipywidgets) of `cache`, default the magic's.

    Per stage hits, misses, entries, bytes and compile time; a chart of hits
    and misses per cell; the entries with their explanations; actions to clear
    a stage, evict or recompile an entry.  ``%gpucache`` shows it.
    """
    session = _session()
    if session is not None:
        return session.inspector(cache)
    from .widgets import inspector as _inspector

    return _inspector(cache)


def load_ipython_extension(ipython):
    """``%load_ext gpucache_ext``: registers %%gpukernel and %gpucache."""
    from .ipython.magic import load

    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext gpucache_ext``: removes what loading registered."""
    from .ipython.magic import unload

    unload(ipython)


__all__ = [
    "CompileConfig", "KernelCache", "CompileResult", "StageResult", "LayerResult", "Outcome",
    "CacheStats", "StageStats", "TierStats", "EntryInfo", "Kernel", "LaunchError", "jit",
    "default_cache", "configure_default_cache", "inspector",
    "FIELD_STAGES", "STAGES",
    "GpuCacheError", "ConfigError", "CompileError", "UnsupportedKernelError", "AuditWarning",
]
__version__ = "0.1.0"
