"""gpucache_ext: a staged, per-stage-cached compile pipeline for numba-cuda kernels.

    from gpucache_ext import CompileConfig, KernelCache
    cache = KernelCache()
    res = cache.compile(func, "void(float32[:], float32[:])", CompileConfig(sm=86))
    res.stages["ptx"].hit, res.ptx, res.cubin

The packages tell the pipeline's story: `keys` (what can change the output,
and how inputs are hashed), `sources` (what a kernel's source depends on),
`pipeline` (the one driver, the cache and its results), `backends` (the
compilers: typing and lowering), `toolchain` (libNVVM, nvJitLink, nvFatbin
and their versions), `store` (where entries live), `launch` (kernels as
numba launches them), `queries` and `views` (what a cache holds, and how it
reads), `ipython`, `widgets` and `cli` (the front ends).
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING

from .keys.config import FIELD_STAGES, CompileConfig
from .keys.stagespec import STAGES
from .defaults import configure_default_cache, current_session, default_cache
from .errors import (CompileError, ConfigError, DisplayWarning, GpuCacheError, GpuCacheWarning, SecurityWarning,
                     TierWarning, UnsupportedKernelError)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time, `__getattr__` below
    from .pipeline.audit import AuditWarning
    from .pipeline.cache import KernelCache
    from .backends.numba_cuda.launch.decorators import jit
    from .backends.numba_cuda.launch.compiled import LaunchError, LaunchTypeError, LaunchValueError
    from .backends.numba_cuda.launch.kernel import Kernel
    from .pipeline.results import (CacheStats, CompileResult, EntryInfo, Outcome, StageResult, StageStats,
                                   TierStats)

# The names of modules that import numba-cuda (and so take a second or more),
# imported on first use (PEP 562): `import gpucache_ext`, the ``gpucache``
# command and reading cache files import no numba.
_LAZY = {
    "KernelCache": "pipeline.cache",
    "CompileResult": "pipeline.results", "StageResult": "pipeline.results", "Outcome": "pipeline.results",
    "CacheStats": "pipeline.results", "StageStats": "pipeline.results", "TierStats": "pipeline.results",
    "EntryInfo": "pipeline.results",
    "Kernel": "backends.numba_cuda.launch.kernel", "LaunchError": "backends.numba_cuda.launch.compiled",
    "LaunchTypeError": "backends.numba_cuda.launch.compiled",
    "LaunchValueError": "backends.numba_cuda.launch.compiled", "jit": "backends.numba_cuda.launch.decorators",
    "AuditWarning": "pipeline.audit",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(_import(module, name), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # the package's modules are attributes (``gpucache_ext.pipeline.cache``), as when this file imported them
        return _import(name, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _import(module, name):
    """Imports the module behind a lazy name, or says why it could not.

    An error raised here must not be an AttributeError: ``from gpucache_ext
    import KernelCache`` would turn it into "cannot import name" and hide the
    cause.  So any failure becomes an ImportError that names the cause and
    where it happened, chained to the original exception.
    """
    try:
        return importlib.import_module(f".{module}", __name__)
    except Exception as error:
        from .importing import import_failure

        failure = import_failure(f"{__name__}.{name}", f"{__name__}.{module}", error)
        raise failure from failure.lazy_import_cause


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(__all__))


def inspector(cache=None):
    """The live cache inspector widget (ipywidgets) of `cache`, default the magic's.

    Per stage hits, misses, entries, bytes and compile time; a chart of hits
    and misses per cell; the entries with their explanations; actions to clear
    a stage, evict or recompile an entry.  ``%gpucache`` shows it.
    """
    session = current_session()
    if session is not None:
        return session.inspector(cache)
    from .widgets import inspector as _inspector

    return _inspector(cache)


def load_ipython_extension(ipython):
    """``%load_ext gpucache_ext``: registers %%gpukernel and %gpucache."""
    from .ipython.session import load

    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext gpucache_ext``: removes what loading registered."""
    from .ipython.session import unload

    unload(ipython)


__all__ = [
    "CompileConfig", "KernelCache", "CompileResult", "StageResult", "Outcome",
    "CacheStats", "StageStats", "TierStats", "EntryInfo", "Kernel", "LaunchError", "LaunchTypeError",
    "LaunchValueError", "jit",
    "default_cache", "configure_default_cache", "current_session", "inspector",
    "FIELD_STAGES", "STAGES",
    "GpuCacheError", "ConfigError", "CompileError", "UnsupportedKernelError",
    "GpuCacheWarning", "AuditWarning", "SecurityWarning", "TierWarning", "DisplayWarning",
]
__version__ = "0.1.0"
