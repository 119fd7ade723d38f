"""``gpucache_ext.jit``: ``numba.cuda.jit`` for plain Python files, with every
kernel compiled through the staged cache.

    import gpucache_ext
    from numba import cuda

    @gpucache_ext.jit("void(float32[:], float32, float32[:], float32[:])", fastmath=True)
    def axpy(r, a, x, y):
        i = cuda.grid(1)
        if i < r.size:
            r[i] = a * x[i] + y[i]

The same arguments and decorator forms as numba's (with and without
signatures, a list of them, ``device=True``, options).  A kernel is a
`gpucache_ext.Kernel` (numba's own dispatcher, its variants loaded from the
cache) on `gpucache_ext.default_cache()`: the disk tier persists across
processes, keyed by everything the kernel reads, its device functions in
other modules and its options included; the ``GPUCACHE_*`` variables
configure it; ``default_cache().stats()`` and ``.explain(...)`` report on it.
Its target is the current GPU's (else ``GPUCACHE_SM``, else sm_86), and it
follows the device it is launched on.

A device function (``device=True``) is numba's own dispatcher: the cache
types and lowers it for each kernel that calls it, with its own options.

Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, or numba-cuda's
``config.ENABLE_CUDASIM`` turned on since), it is numba's own ``cuda.jit``,
as plain numba is: kernels run in Python and nothing is compiled or cached.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from .device import cuda_simulator_on
from ....sources.libraries import library_caller
from ..options import check_options


def jit(func_or_sig=None, device: bool = False, **options: Any):
    """A drop-in for ``numba.cuda.jit`` whose kernels are cached per stage.

    ``@jit``, ``@jit(**options)``, ``@jit("void(float32[:])", **options)``,
    ``@jit(["sig1", "sig2"])``, ``@jit(device=True)``, and ``jit(func)``.
    Kernels with signatures are compiled when decorated, as numba does (here
    through the cache, with or without a GPU); others at their first launch,
    once per distinct set of argument types.  ``cache=True`` is accepted and
    changes nothing: every kernel is cached.

    ``backend="mlir"``, or none named for a ``numba_cuda_mlir.cuda.jit``
    kernel or a function that reads ``from numba_cuda_mlir import cuda``
    (the import decides, as in a cell), or where numba-cuda-mlir alone is
    installed: numba-cuda-mlir's ``cuda.jit``, its kernels' overloads
    compiled through the cache (`gpucache_ext.backends.numba_cuda_mlir.launch.jit`).
    """
    from ... import backend_for, canonical_backend

    backend = options.pop("backend", None)
    library = library_caller(sys._getframe(1))
    deferred = func_or_sig is None or isinstance(func_or_sig, (str, list, tuple)) or hasattr(func_or_sig, "args")
    if backend is None and deferred:  # @jit(sig, ...), @jit(...): the function it decorates decides
        return lambda func: _jit(func_or_sig, device, options, backend_for(None, func, module=True).name,
                                 library)(func)
    name = canonical_backend(backend) if backend is not None else backend_for(None, func_or_sig, module=True).name
    return _jit(func_or_sig, device, options, name, library)


def _jit(func_or_sig, device: bool, options, backend: str, library):
    """`jit` for the backend called `backend`; `library`: the library module
    that called it (None: the user's code)."""
    if backend == "mlir":
        from ... import backend as named_backend

        named_backend("mlir").check_can_compile()  # (numba-cuda-mlir not installed: which extra brings it)
        from ...numba_cuda_mlir.launch import jit as mlir_jit

        return mlir_jit(func_or_sig, **({"device": True} if device else {}), **options)
    if cuda_simulator_on() or (library is not None and (
            library not in CACHED_LIBRARY_KERNELS or (device and library in NUMBA_CORES))):
        # numba's CUDA simulator (on at import, or turned on since: numba's jit reads it as it
        # decorates), or a library's use of cuda.jit, where this stands in for it: numba's own
        from numba.cuda.decorators import jit as numba_jit

        return numba_jit(func_or_sig, device=device, **options)
    func, sigs = decorator_form(func_or_sig)
    if func is None:
        return lambda func: _decorate(func, sigs, device, options)
    return _decorate(func, sigs, device, options)


# Library modules whose kernels go through the cache where ``cuda.jit`` stands
# in (a %%gpukernel cell, or ``gpucache_ext.jit`` put in its place), compiled
# as numba would: their inputs are the user's function and the library's own
# code, both tracked.  Other libraries' calls of ``cuda.jit`` get numba's own.
CACHED_LIBRARY_KERNELS = {"numba.cuda.kernels.reduction": "cuda.reduce",
                          "numba.cuda.vectorizers": "vectorize and guvectorize"}

# Of those, the libraries whose device functions numba must compile itself:
# CUDA ufuncs compile the user's function with its signature at once and read
# the return type back from numba's overloads (a lazy dispatcher has none).
NUMBA_CORES = frozenset({"numba.cuda.vectorizers"})


class Signatures(list):
    """The signatures a ``jit`` decorator was given; `single` for one signature
    not in a list, which numba launches without dispatching (specialized)."""

    single = False


def decorator_form(func_or_sig):
    """What ``jit``'s first argument is, as numba reads it: (the function, [])
    for ``@jit`` and ``jit(func)``; (None, `Signatures`) for the forms that
    return a decorator."""
    from numba.cuda.core.sigutils import is_signature

    sigs = Signatures()
    if func_or_sig is None:
        return None, sigs
    if isinstance(func_or_sig, list):
        sigs.extend(func_or_sig)
        return None, sigs
    if is_signature(func_or_sig):
        sigs.append(func_or_sig)
        sigs.single = True
        return None, sigs
    if not callable(func_or_sig):
        raise TypeError(f"jit takes a function or a signature, not {type(func_or_sig).__name__}")
    return func_or_sig, sigs


def _decorate(func: Callable, sigs, device: bool, options) -> Any:
    from .kernel import Kernel  # (the compile core: not imported where numba's simulator stands in)

    if device:
        return device_function(func, sigs, options, "@gpucache_ext.jit(device=True, ...)")
    kernel = Kernel(func, sigs, options=options, specialized=sigs.single)
    if sigs:  # as numba: compiled now, and only these launch
        kernel.compile_declared()
    return kernel


def device_function(func: Callable, sigs, options, what: str):
    """numba's own lazy device dispatcher, its options checked as a kernel's
    are (`what` names the decorator in the error); with signatures, calls are
    typed against them (as numba does), yet it is compiled for each calling
    kernel's target, not for the current GPU."""
    from numba.cuda.decorators import jit as numba_jit

    from ....sources.functions import declare_signatures

    check_options(options, what)
    dispatcher = numba_jit(device=True, **options)(func)
    if sigs:
        declare_signatures(dispatcher, sigs)
    return dispatcher


__all__ = ["jit"]
