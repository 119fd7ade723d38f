"""The default cache: the loaded IPython extension's session's, else one per process.

Modules that need the default cache (kernels, ``gpucache_ext.jit``, the magic,
the widgets) import it from here, never from the package's ``__init__``; this
module imports nothing of IPython: a loaded extension's session attaches
itself (`gpucache_ext.sessions.attach_session`) and detaches when it is
unloaded, so the core holds the session as a value and asks the IPython
layer nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from .sessions import attach_session, current_session, detach_session, places
from . import memos

if TYPE_CHECKING:
    from .pipeline.cache import KernelCache

__all__ = ["default_cache", "configure_default_cache", "current_session", "attach_session", "detach_session",
           "places"]

# The cache of plain Python code (no IPython session): made on first use.
# A loaded extension's session keeps its own (see `gpucache_ext.ipython.session`).
_default_cache = None
_default_settings: Dict[str, Any] = memos.state("defaults._default_settings", {},
                                     "the settings configure_default_cache was given, for the default cache made later")


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
    session = current_session()
    if session is not None:
        return session.cache
    if _default_cache is None:
        from .pipeline.cache import KernelCache

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
    session = current_session()
    if session is not None:
        session.configure_cache(**_default_settings)
